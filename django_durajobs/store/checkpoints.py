"""Writes that start a step along with another one: one statement, one round trip per step.

A job's steps run one after another, and the step after a finished one is, nearly always, the
next declared one. So the statement that keeps a step's result also marks its declared successor
running, when that one is still pending and nobody asked to cancel or pause the job: the next
``ctx.step`` then has nothing left to write before it runs, and the screens show it running from
the moment its predecessor ended. ``engine/context.py`` decides when to ask for it and puts the
successor back to pending when the run ends without opening it.

On PostgreSQL the claim of a job's first run starts its first declared step the same way.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from django.db.backends.base.base import BaseDatabaseWrapper

from ..models import Job, JobStep
from ..status import Phase, StepState
from . import sql
from .set_lists import Shape, set_list, shape


def declared_steps(job_id: int, phase: str, declared: list[tuple[str, str]]) -> list[JobStep]:
    """The rows an enqueue wrote for ``declared`` steps (id and title), as they are until a run
    marks one: built, not read, and as read rows are built (``sql.instances``), without the cost
    of ``Model.__init__`` per field, which a first run would otherwise pay for every step."""
    db = sql.database()
    blank, places = sql.kept(db, ("blank step",), _blank_step)
    rows = []
    for position, (step_id, title) in enumerate(declared):
        values = blank.copy()
        for place, value in zip(places, (job_id, phase, position, step_id, title), strict=True):
            values[place] = value
        rows.append(values)
    return sql.instances(db, JobStep, rows)


def _blank_step() -> tuple[list[Any], tuple[int, ...]]:
    """A pending step's values in field order, and where its own (job, phase, position, id, title) go."""
    fields = JobStep._meta.concrete_fields
    attnames = [field.attname for field in fields]
    places = tuple(attnames.index(name) for name in ("job_id", "phase", "position", "step_id", "title"))
    return [None if field.primary_key else field.get_default() for field in fields], places


#: In a slot: the parameter is the checkpointed step's id (each column's ``CASE`` tells the rows apart).
_ITS_STEP_ID = -1


@dataclass(frozen=True, eq=False)
class _Checkpoint:
    """The statement for one pair of shapes, and per placeholder where its parameter comes from:
    the values of the step done (0) or of the next one (1), by field name and how to prepare it,
    or ``_ITS_STEP_ID``."""

    statement: sql.Statement
    slots: tuple[tuple[int, str | None, Any], ...]


def checkpoint_and_start(
    db: BaseDatabaseWrapper,
    job_id: int,
    token: str,
    done: tuple[JobStep, dict[str, Any]],
    following: tuple[JobStep, dict[str, Any]],
) -> int:
    """Write ``done``'s fields to its step and ``following``'s to the next one, fenced by the lease
    token; the next one only while it is pending and no cancel or pause is asked for.

    Returns the rows changed: 2 when both were written, 1 when only the checkpoint was, 0 when the
    job is no longer this lease's.
    """
    (step, fields), (successor, start) = done, following
    shapes = (shape(fields), shape(start))
    made = sql.kept(db, ("checkpoint and start", *shapes), lambda: _checkpoint(db, *shapes))
    sides = (fields, start)
    params = [
        step.step_id if side == _ITS_STEP_ID else fill if name is None else fill(sides[side][name], db)
        for side, name, fill in made.slots
    ]
    params += [job_id, step.phase, step.step_id, successor.step_id, step.step_id, StepState.PENDING]
    params += [job_id, job_id, token]
    return sql.run(db, made.statement, params)


def _checkpoint(db: BaseDatabaseWrapper, *shapes: Shape) -> _Checkpoint:
    quote = db.ops.quote_name
    parts: list[str] = []
    slots: list[tuple[int, str | None, Any]] = []
    kinds = [dict(of) for of in shapes]
    for name in dict.fromkeys([*kinds[0], *kinds[1]]):
        target = quote(sql.column(sql.concrete_field(JobStep, name)))
        branches: list[str] = []
        slots.append((_ITS_STEP_ID, None, None))
        for side, of in enumerate(kinds):
            if name not in of:
                branches.append(target)  # kept as it is on the row the other side writes
                continue
            made = set_list(db, JobStep, ((name, of[name]),))
            branches.append(made.sql.removeprefix(f"{target} = "))
            slots += [(side, field_name, fill) for field_name, fill in made.slots]
        parts.append(
            f"{target} = CASE WHEN {quote('step_id')} = %s THEN {branches[0]} ELSE {branches[1]} END"
        )
    job_table = sql.table(db, Job)
    text = (
        f"UPDATE {sql.table(db, JobStep)} SET {', '.join(parts)} "
        f"WHERE {quote('job_id')} = %s AND {quote('phase')} = %s AND {quote('step_id')} IN (%s, %s) "
        f"AND ({quote('step_id')} = %s OR ({quote('state')} = %s AND NOT EXISTS (SELECT 1 FROM {job_table} "
        f"WHERE {quote('id')} = %s AND ({quote('cancel_requested')} OR {quote('pause_requested')})))) "
        f"AND EXISTS (SELECT 1 FROM {job_table} WHERE {quote('id')} = %s AND {quote('lease_token')} = %s)"
    )
    return _Checkpoint(sql.as_statement(db, text), tuple(slots))


#: Databases whose claim also starts a first run's first declared step (a CTE that writes).
FIRST_STEP_WITH_THE_CLAIM = frozenset({"postgresql"})


def claim_starting_first_step(db: BaseDatabaseWrapper, claim: str) -> str:
    """PostgreSQL: ``claim`` (an ``UPDATE … RETURNING`` of a queued job), which also starts the
    job's first step (``first_step_started``); its rows are ``claimed_job``'s."""
    started = first_step_started(db)
    return f"WITH claimed AS ({claim}), {started} SELECT claimed.*, {started_step_id(db)} FROM claimed"


def first_step_started(db: BaseDatabaseWrapper) -> str:
    """The CTE ``started``: the first declared step of the job in the CTE ``claimed`` marked running
    as ``ctx.step`` marks it, when this is the job's first run (the claim set its start, and it is
    no rerun: ``JobContext.first_run``'s test) and no cancel or pause is asked of it. The run
    then finds the step started ahead. Its parameters, after the claim's: ``FIRST_STEP_PARAMS``."""
    quote = db.ops.quote_name
    step = sql.table(db, JobStep)

    def claimed(name: str) -> str:
        return f"claimed.{quote(name)}"

    def its(name: str) -> str:
        return f"{step}.{quote(name)}"

    return (
        f"started AS (UPDATE {step} SET {quote('state')} = %s, "
        f"{quote('started_at')} = {claimed('updated_at')}, {quote('ended_at')} = NULL, "
        f"{quote('detail')} = '', {quote('error')} = '' FROM claimed "
        f"WHERE {its('job_id')} = {claimed('id')} AND {its('phase')} = %s AND {its('position')} = 0 "
        f"AND {its('state')} = %s AND {claimed('started_at')} = {claimed('updated_at')} "
        f"AND {claimed('rerun_of_id')} IS NULL "
        f"AND NOT {claimed('cancel_requested')} AND NOT {claimed('pause_requested')} "
        f"RETURNING {its('step_id')})"
    )


FIRST_STEP_PARAMS = (StepState.RUNNING.value, Phase.RUN.value, StepState.PENDING.value)


def started_step_id(db: BaseDatabaseWrapper) -> str:
    """The column after the claimed job's: the id of the step ``started`` marked running, or NULL."""
    return f"(SELECT {db.ops.quote_name('step_id')} FROM started LIMIT 1)"


def claimed_job(db: BaseDatabaseWrapper, row: Any) -> Job:
    """The job of a claim's row that ends with ``started_step_id``, knowing the step it started."""
    [job] = sql.read_rows(db, Job, [row[:-1]])
    job.step_started_by_claim = row[-1]
    return job
