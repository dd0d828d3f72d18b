"""A step's checkpoint that also starts the step after it: one statement, one round trip.

A job's steps run one after another, and the step after a finished one is, nearly always, the
next declared one. So the statement that keeps a step's result also marks its declared successor
running, when that one is still pending and nobody asked to cancel or pause the job: the next
``ctx.step`` then has nothing left to write before it runs, and the screens show it running from
the moment its predecessor ended. ``engine/context.py`` decides when to ask for it and puts the
successor back to pending when the run ends without opening it.
"""

from __future__ import annotations

from typing import Any

from django.db.backends.base.base import BaseDatabaseWrapper

from ..models import Job, JobStep
from ..status import StepState
from . import sql


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
    quote = db.ops.quote_name
    parts: list[str] = []
    params: list[Any] = []
    for name in dict.fromkeys([*fields, *start]):
        target = quote(sql.column(sql.concrete_field(JobStep, name)))
        branches: list[str] = []
        branch_params: list[Any] = [step.step_id]
        for values in (fields, start):
            if name not in values:
                branches.append(target)  # kept as it is on the row the other side writes
                continue
            made, made_params = sql.assignments(db, JobStep, {name: values[name]})
            branches.append(made.sql.removeprefix(f"{target} = "))
            branch_params += made_params
        parts.append(
            f"{target} = CASE WHEN {quote('step_id')} = %s THEN {branches[0]} ELSE {branches[1]} END"
        )
        params += branch_params

    def update() -> str:
        job_table = sql.table(db, Job)
        return (
            f"UPDATE {sql.table(db, JobStep)} SET {', '.join(parts)} "
            f"WHERE {quote('job_id')} = %s AND {quote('phase')} = %s AND ({quote('step_id')} = %s OR "
            f"({quote('step_id')} = %s AND {quote('state')} = %s AND NOT EXISTS (SELECT 1 FROM {job_table} "
            f"WHERE {quote('id')} = %s AND ({quote('cancel_requested')} OR {quote('pause_requested')})))) "
            f"AND EXISTS (SELECT 1 FROM {job_table} WHERE {quote('id')} = %s AND {quote('lease_token')} = %s)"
        )

    params += [job_id, step.phase, step.step_id, successor.step_id, StepState.PENDING, job_id, job_id, token]
    statement = sql.statement(db, ("checkpoint and start", tuple(parts)), update)
    return sql.run(db, statement, params)
