"""The claim's SQL: taking the most urgent due job in one status, locked so that concurrent
workers pass over each other.

Over 400 lines as one module: the pick, the take and the finish's claim share one statement
cache and one claim order. The seam to split along is the lookups at its end (whether a lock
passed a job over, the kinds no ``@job`` registered, a task's due jobs), which read the due jobs
without claiming them."""

from __future__ import annotations

import time
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from django.db import transaction
from django.db.backends.base.base import BaseDatabaseWrapper
from django.utils import timezone

from ..conf import jobs_database
from ..models import Job
from ..registry import known_kinds
from ..status import Status
from ..transitions import (
    ATTEMPT_COUNTED,
    CLAIMABLE,
    NOW,
    NOW_IF_UNSET,
    TRANSITIONS,
    Marker,
    Transition,
    Trigger,
)
from . import sql
from .checkpoints import FIRST_STEP_PARAMS, FIRST_STEP_WITH_THE_CLAIM, claim_starting_first_step, claimed_job
from .database import database_now_sql, no_flush

REVERT_LOOKUP_SECONDS = 1.0
#: When a claim next looks for pending reverts first, on ``time.monotonic()``.
_next_revert_lookup = 0.0

#: Databases whose UPDATE can return the row it changed: a claim is then one statement.
CLAIM_RETURNING = frozenset({"postgresql", "sqlite"})


@dataclass(frozen=True)
class ClaimRequest:
    """Who claims (a worker, and the lease token it will hold) and from which queues (none: any):
    the same for every status and kind a claim looks through."""

    worker_id: str
    token: str
    queues: tuple[str, ...] = ()


def claim_one(
    db: BaseDatabaseWrapper,
    status: str,
    request: ClaimRequest,
    now: datetime | None = None,
    kinds: list[str] | None = None,
    passed_over: tuple[str, ...] = (),
    only_if: Condition = ("", ()),
    plain_lane: bool = False,
) -> Job | None:
    """Claim one job in ``status``; ``now`` is the moment it is claimed at (a finish passes its own).

    Only of ``kinds`` (by default every known kind), not in the queues ``passed_over``, where
    ``only_if`` holds (SQL after the pick's other conditions, and its parameters), and with
    ``plain_lane`` only among the jobs not enqueued under limits.
    """
    kinds = known_kinds() if kinds is None else kinds
    if not kinds:
        return None
    now = now or timezone.now()
    claim = _claim_returning if db.vendor in CLAIM_RETURNING else _claim_locked
    return claim(db, status, kinds, passed_over, request, now, only_if, plain_lane)


#: One more condition of a claim's pick: SQL (`` AND …``) and its parameters.
Condition = tuple[str, tuple[Any, ...]]


def claim_order() -> tuple[str, str]:
    """The statuses a claim looks in, one at a time, so the database reads "durajobs_due" in
    claim order and stops at the first row it can lock.

    Pending reverts (an operator asked for them; they are few) are looked for first at most
    every REVERT_LOOKUP_SECONDS, and whenever nothing is queued.
    """
    global _next_revert_lookup
    if time.monotonic() >= _next_revert_lookup:
        _next_revert_lookup = time.monotonic() + REVERT_LOOKUP_SECONDS
        return (Status.REVERTING, Status.QUEUED)
    return (Status.QUEUED, Status.REVERTING)


def reverts_looked_for_lately() -> bool:
    """Whether a claim looked for pending reverts first within the last REVERT_LOOKUP_SECONDS:
    until the next look is due, a finish may claim the next queued job itself."""
    return time.monotonic() < _next_revert_lookup


def _claim_returning(
    db: BaseDatabaseWrapper,
    status: str,
    kinds: list[str],
    passed_over: tuple[str, ...],
    request: ClaimRequest,
    now: datetime,
    only_if: Condition,
    plain_lane: bool,
) -> Job | None:
    """One ``UPDATE … WHERE id = (SELECT … LIMIT 1) RETURNING …`` (on PostgreSQL the subquery locks
    with ``SKIP LOCKED``): the claim, the lock and the read in a single round trip; on PostgreSQL
    the start of a first run's first step too."""
    flush = no_flush(db)
    shape = (status, len(kinds), len(request.queues), flush, len(passed_over))
    first_step = status == Status.QUEUED and db.vendor in FIRST_STEP_WITH_THE_CLAIM

    def text() -> str:
        claim = claim_sql(db, *shape, only_if=only_if[0], plain_lane=plain_lane)
        return claim_starting_first_step(db, claim) if first_step else claim

    statement = sql.statement(db, ("claim", *shape, only_if[0], plain_lane), text)
    params = claim_params(db, status, kinds, request, now, passed_over)
    params[-1:-1] = only_if[1]  # after the pick's parameters, before the status the update checks
    if first_step:
        params += FIRST_STEP_PARAMS
    rows = sql.fetch(db, statement, params)
    if not rows:
        return None
    return claimed_job(db, rows[0]) if first_step else sql.read_rows(db, Job, rows)[0]


def _claim_locked(
    db: BaseDatabaseWrapper,
    status: str,
    kinds: list[str],
    passed_over: tuple[str, ...],
    request: ClaimRequest,
    now: datetime,
    only_if: Condition,
    plain_lane: bool,
) -> Job | None:
    """MySQL/MariaDB, which cannot return what an UPDATE changed: read the most urgent due job,
    locked (``SKIP LOCKED`` where the server has it), and take it, in one transaction.

    Without ``SKIP LOCKED`` a job another worker took meanwhile is passed over: the take is
    conditional on the job still being unclaimed.
    """
    # The server's features are read on a connection: before this thread has its own, Django
    # would open (and close) a temporary one just to read them.
    db.ensure_connection()
    lock = pick_lock(db)
    shape = (status, len(kinds), len(request.queues))
    columns = sql.returned_columns(db, Job)
    pick = sql.statement(
        db,
        ("claim pick", *shape, lock, len(passed_over), only_if[0], plain_lane),
        lambda: pick_sql(
            db, len(kinds), len(request.queues), columns, lock, only_if[0], len(passed_over), plain_lane
        ),
    )

    take = take_statement(db, status)
    prepared_now = sql.prepared_datetime(db, now)
    for _ in range(10):
        # Inside a transaction (a finish that claims the next job), no savepoint of its own: two
        # round trips a job, and InnoDB rolls a deadlock's victim back whole anyway.
        with transaction.atomic(using=jobs_database(), savepoint=False):
            params = [*pick_params(status, kinds, request.queues, prepared_now, passed_over), *only_if[1]]
            rows = sql.fetch(db, pick, params)
            if not rows:
                return None
            [job] = sql.read_rows(db, Job, rows)
            if sql.run(db, take, [*taking_params(status, request, prepared_now), job.pk, status]):
                as_claimed(job, status, now, request)
                return job
    return None


def take_statement(db: BaseDatabaseWrapper, status: str) -> sql.Statement:
    """Taking a job read in ``status``, by id, as long as it is still unclaimed; its parameters are
    ``taking_params(…)``, the id and the status."""

    def take_sql() -> str:
        quote = db.ops.quote_name
        return (
            f"UPDATE {sql.table(db, Job)} SET {_taking_sql(db, status)} "
            f"WHERE {quote('id')} = %s AND {quote('status')} = %s AND {quote('locked_by')} = ''"
        )

    return sql.statement(db, ("claim take", status), take_sql)


#: What a claim sets, as ``(column, how)`` pairs, and the parameters they take.
ClaimSets = tuple[list[tuple[str, Any]], tuple[Any, ...]]


def _claim_sets(status: str) -> ClaimSets:
    """What the transitions table says a claim from ``status`` sets, as SQL: ``(column, how)``
    pairs, and the parameters they take (``NOW`` where the moment of the claim goes)."""
    claim = _CLAIMS[status]
    sets: list[tuple[str, Any]] = [] if claim.target == status else [("status", claim.target)]
    sets += [(name, value) for name, value in claim.fields.items()]
    params = tuple(NOW if how is NOW_IF_UNSET else how for _, how in sets if how is not ATTEMPT_COUNTED)
    return sets, params


#: The claim from each status it takes a job from, as the transitions table has it.
_CLAIMS: dict[str, Transition] = {
    status: entry
    for entry in TRANSITIONS.values()
    if entry.trigger == Trigger.CLAIM
    for status in entry.sources
}
_CLAIM_SETS: dict[str, ClaimSets] = {status: _claim_sets(status) for status in _CLAIMS}


def _taking_sql(db: BaseDatabaseWrapper, status: str) -> str:
    """What a claim sets: the transitions table's fields (a queued job becomes running and counts a
    try); either way the job is locked."""
    quote = db.ops.quote_name
    taking = ""
    for name, how in _CLAIM_SETS[status][0]:
        column = quote(name)
        if how is ATTEMPT_COUNTED:
            taking += f"{column} = {column} + 1, "
        elif how is NOW_IF_UNSET:
            taking += f"{column} = COALESCE({column}, %s), "
        elif isinstance(how, Marker) and how is not NOW:  # NOW: the claim's moment, a parameter
            raise ValueError(f"A claim cannot set {name} to {how!r}")
        else:
            taking += f"{column} = %s, "
    return (
        f"{taking}{quote('locked_by')} = %s, {quote('locked_at')} = {database_now_sql(db)}, "
        f"{quote('lease_token')} = %s, {quote('updated_at')} = %s"
    )


def taking_params(status: str, request: ClaimRequest, now: Any) -> list[Any]:
    values = (now if value is NOW else value for value in _CLAIM_SETS[status][1])
    return [*values, request.worker_id, request.token, now]


def as_claimed(job: Job, status: str, now: datetime, request: ClaimRequest) -> None:
    """Set on ``job`` what its claim set in the database (where the database could not return it)."""
    for name, how in _CLAIM_SETS[status][0]:
        if how is ATTEMPT_COUNTED:
            setattr(job, name, getattr(job, name) + 1)
        elif how is NOW_IF_UNSET:
            setattr(job, name, getattr(job, name) or now)
        else:
            setattr(job, name, now if how is NOW else how)
    job.locked_by, job.lease_token, job.locked_at, job.updated_at = request.worker_id, request.token, now, now


def pick_lock(db: BaseDatabaseWrapper) -> str:
    """The lock clause of every claim's pick: ``FOR UPDATE SKIP LOCKED`` where the server has it,
    so that workers pass over each other's candidates; SQLite, which locks the whole database,
    takes the job with an update conditional on the status the candidate was read with."""
    return " FOR UPDATE SKIP LOCKED" if db.features.has_select_for_update_skip_locked else ""


def pick_sql(
    db: BaseDatabaseWrapper,
    kinds: int,
    queues: int,
    what: str,
    lock: str,
    only_if: str = "",
    passed_over: int = 0,
    plain_lane: bool = False,
) -> str:
    """``SELECT what`` of the most urgent due job in a status (its parameter), read from
    ``durajobs_due`` in claim order (a worker of some queues: ``durajobs_queue_due``; with
    ``plain_lane``, among the jobs
    not enqueued under limits: ``durajobs_plain_due``); not in ``passed_over`` queues, and
    ``only_if`` one more condition holds.

    The claim order is the index's (``due_order_sql``): every database walks the index and stops
    at the first row it can take, however long the backlog.
    """
    quote = db.ops.quote_name
    next_run_at = quote("next_run_at")
    in_queues = f" AND {quote('queue')} IN ({', '.join(['%s'] * queues)})" if queues else ""
    if passed_over:
        in_queues += f" AND {quote('queue')} NOT IN ({', '.join(['%s'] * passed_over)})"
    # Literals, as durajobs_plain_due's second column and its condition say them: every planner
    # then sees the column fixed, and the condition met.
    lane = (
        f" AND {quote('under_limits')} = FALSE AND {sql.status_in(db, CLAIMABLE)}"
        if plain_lane and not queues
        else ""
    )
    # MySQL/MariaDB would rather read durajobs_due, in the ORDER BY's order, past every other queue
    # (or every job under limits).
    index = "durajobs_queue_due" if queues else "durajobs_plain_due" if lane else ""
    hint = sql.index_hint(db, index, "mysql") if index else ""
    return (
        f"SELECT {what} FROM {sql.table(db, Job)}{hint} "
        f"WHERE {quote('status')} = %s{lane} AND {quote('locked_by')} = '' "
        f"AND {quote('kind')} IN ({', '.join(['%s'] * kinds)}) AND {next_run_at} <= %s{in_queues}{only_if} "
        f"ORDER BY {due_order_sql(db)} LIMIT 1{lock}"
    )


def due_order() -> list[str]:
    """The claim order: the columns of ``durajobs_due`` after the status, each in the index's
    direction, so the order and the index cannot drift apart. That is priority, then interrupted
    work (handed back by a lost or stopping worker) before work not started, then the time it was
    first due, then the id."""
    [due] = [index for index in Job._meta.indexes if index.name == "durajobs_due"]
    return list(due.fields[1:])


def due_order_sql(db: BaseDatabaseWrapper, alias: str = "") -> str:
    """The claim's ORDER BY, in ``due_order()``; its columns of the table named ``alias``, if given."""
    quote = db.ops.quote_name
    of = f"{alias}." if alias else ""
    return ", ".join(
        f"{of}{quote(name.lstrip('-'))} {'DESC' if name.startswith('-') else 'ASC'}" for name in due_order()
    )


def pick_params(
    status: str, kinds: list[str], queues: tuple[str, ...], now: Any, passed_over: tuple[str, ...] = ()
) -> list[Any]:
    return [status, *kinds, now, *queues, *passed_over]


def claim_sql(
    db: BaseDatabaseWrapper,
    status: str,
    kinds: int,
    queues: int,
    flush: str,
    passed_over: int = 0,
    only_if: str = "",
    plain_lane: bool = False,
) -> str:
    """The claim's ``UPDATE … RETURNING``; ``only_if`` is one more condition on the job it picks."""
    quote = db.ops.quote_name
    pick = pick_sql(db, kinds, queues, quote("id"), pick_lock(db), only_if, passed_over, plain_lane)
    return (
        f"UPDATE {sql.table(db, Job)} SET {_taking_sql(db, status)} "
        f"WHERE {quote('id')} = ({pick}) AND {quote('status')} = %s AND {quote('locked_by')} = ''{flush} "
        f"RETURNING {sql.returned_columns(db, Job)}"
    )


def claim_params(
    db: BaseDatabaseWrapper,
    status: str,
    kinds: list[str],
    request: ClaimRequest,
    now: datetime,
    passed_over: tuple[str, ...] = (),
) -> list[Any]:
    """The parameters of ``claim_sql``, in its order."""
    now = sql.prepared_datetime(db, now)
    picked = pick_params(status, kinds, request.queues, now, passed_over)
    return [*taking_params(status, request, now), *picked, status]


def passed_over_by_lock() -> bool:
    """Whether a claim that found nothing may have passed over a due job only because another
    claim was reading it.

    MySQL/MariaDB lock every row a locking read examines, in any queue, until its statement has
    judged it, so a claim with ``SKIP LOCKED`` can pass over a due job that another worker's claim
    (for other queues, say) is looking at for a moment. PostgreSQL locks only the row it returns;
    SQLite claims one at a time.
    """
    if sql.database().vendor != "mysql":
        return False
    return (
        Job.objects.queued()
        .filter(next_run_at__lte=timezone.now(), locked_by="", kind__in=known_kinds())
        .exists()
    )


def due_kinds_not_in(known: list[str], most: int = 20) -> list[str]:
    """Up to ``most`` kinds of due queued jobs that are not in ``known``, the most urgent first.

    What a worker asks to find kinds that no ``@job`` registered (the Tasks backend's tasks):
    one query per kind found, each reading ``durajobs_due`` in claim order and passing over
    the known kinds, so while jobs of known kinds are due it reads those too.
    """
    found: list[str] = []
    passed = list(known)
    due = Job.objects.queued().filter(next_run_at__lte=timezone.now()).order_by(*due_order())
    while len(found) < most:
        kind = due.exclude(kind__in=passed).values_list("kind", flat=True).first()
        if kind is None:
            break
        found.append(kind)
        passed.append(kind)
    return found


def due_jobs_with_subject_key(kind: str, key: str) -> list[Job]:
    """The due queued jobs of ``kind`` whose subject has ``key`` (a task's names its backend)."""
    due = Job.objects.queued().filter(kind=kind, next_run_at__lte=timezone.now(), subject__has_key=key)
    return list(due.only("pk", "queue", "parent_id", "status", "next_run_at", "error_code"))
