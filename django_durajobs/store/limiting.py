"""The claim of a job that limits may hold back (``holding.py`` says what the limits are).

While nothing is limited, ``claim()`` is the one-statement claim of ``claiming.py``, unchanged.
Otherwise jobs no limit applies to are still claimed by that statement (restricted to them and to
the plain lane of ``durajobs_plain_due``, so it never reads past jobs a limit holds back), and
jobs under limits come here, looked for first as often as pending reverts are (at most every
``claiming.REVERT_LOOKUP_SECONDS``), and whenever no other job is due:

1. Count what is held now, by kind, queue and key, in one statement (held jobs are few: the
   ``durajobs_due`` index, led by the status, reads only them), and read which rate-limited kinds
   are at their rate. Only while a limit was full at the last count, or a pick made without
   counting met one (``_count_first``): while every limit has room, step 2 picks without counts.
2. Pick the most urgent due job that those counts leave room for (``SKIP LOCKED`` where the
   database has it): jobs a full limit holds back are passed over by the pick's own conditions.
   On PostgreSQL and SQLite the pick reads past none of the jobs it may not take, held back or
   of kinds no limit applies to (``limited_pick.py``); MariaDB/MySQL read ``durajobs_due`` past
   them.
3. For a job under limits, lock its limits' rows (``JobLimit``, in one order, so that two
   claims never wait for each other in a circle; a row not made yet is made by this transaction,
   which then holds it, where the database returns what it inserts), count again, and take it
   only if there is still room; a rate-limited kind records the start in its row, still under
   the lock. A job whose one limit is its key has its row made or locked by one statement
   (``hold_rows``), and is counted by the take itself (``take_under_key``).

Why the counts under the lock are right, although two workers may both have counted 0 in step 1:
every claim that takes a job under a limit holds that limit's row lock from before its count
until its commit. PostgreSQL, and MySQL/MariaDB under Django's default READ COMMITTED (or where
the count is the transaction's first plain read: the pick and the lock are locking reads), read
each statement from a snapshot taken when it starts, so the count after the lock (a statement of
its own, or the take's) sees every claim under the limit committed before the lock was granted,
and none can commit meanwhile. A claim that makes a row holds it from its insert: another claim
making the same row waits for it on the unique index, finds it made, and picks again. A
held job leaving (finished, released, recovered) only lowers a count, and needs no lock: a claim
that counted it still held merely holds back a job once more, until the next poll (on
PostgreSQL, the finish of a limited job NOTIFYs the idle workers). SQLite locks the whole
database for the transaction (``BEGIN IMMEDIATE``), so there claims simply take turns.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from django.db import transaction
from django.db.backends.base.base import BaseDatabaseWrapper
from django.utils import timezone

from ..models import Job, JobLimit
from . import sql
from .claiming import (
    CLAIM_RETURNING,
    ClaimRequest,
    Condition,
    as_claimed,
    claim_one,
    pick_lock,
    pick_params,
    pick_sql,
    take_statement,
    taking_params,
)
from .database import database_now
from .holding import KEY, KIND, THROTTLE, Held, Limits, full_rates, held_now, plain_claim, throttle_name
from .limit_rows import HELD, Scope, at_rate, hold_rows, locked_rows, record_start, take_under_key
from .limited_pick import PICKS_BY_LANE, pick_by_lane

#: How often one claim picks again (its counts were out of date, or its limits' rows were still to
#: be made) before it gives up until the worker's next look.
PICKS = 5


# The claim -------------------------------------------------------------------------------------


#: Whether a claim counts what is held before it picks: only while the last count found a limit
#: full, or a pick made without counting met one. Otherwise it picks the most urgent job under
#: limits and counts only under the lock, where the count always was (step 3), one round trip
#: fewer for a worker whose limits have room.
_count_first = False
#: Whether the latest look for jobs under limits found one: the next claim then looks for them
#: first, as a worker busy with them would find nothing elsewhere (the finish of such a job has
#: already claimed any other job that was due, see ``Lease.finish``).
_limited_found = False


def limited_found_lately() -> bool:
    return _limited_found


def claim_under_limits(
    db: BaseDatabaseWrapper,
    status: str,
    request: ClaimRequest,
    limits: Limits,
    limited_too: bool,
) -> Job | None:
    """Claim a job in ``status`` while limits are in force: one that no limit applies to with the
    plain one-statement claim, else (``limited_too``: they were not looked for first) one under
    limits that none holds back."""
    kinds, passed_over, plain_lane = plain_claim(limits)
    job = claim_one(db, status, request, timezone.now(), kinds, passed_over, plain_lane=plain_lane)
    if job is None and limited_too:
        return claim_limited(db, status, request, limits)
    return job


def claim_limited(db: BaseDatabaseWrapper, status: str, request: ClaimRequest, limits: Limits) -> Job | None:
    """Claim the most urgent due job in ``status`` under limits that none holds back (the module's
    text says how)."""
    global _limited_found
    job = _claim_limited(db, status, request, timezone.now(), limits)
    _limited_found = job is not None
    return job


def _claim_limited(
    db: BaseDatabaseWrapper,
    status: str,
    request: ClaimRequest,
    now: datetime,
    limits: Limits,
) -> Job | None:
    global _count_first
    # A job of any kind may be in a limited queue.
    kinds = [*limits.plain_kinds, *limits.limited_kinds] if limits.limited_queues else limits.limited_kinds
    for attempt in range(PICKS):
        counted = _count_first or attempt > 0
        held, rated = (held_now(db), full_rates(db, limits)) if counted else (Held(), {})
        startable = [kind for kind in kinds if not _kind_is_full(kind, limits, held, rated)]
        if counted:
            _count_first = bool(rated) or len(startable) < len(kinds) or _any_full(limits, held)
        if not startable:
            return None
        outcome = _pick_and_take(db, status, startable, request, now, limits, held, rated)
        if not isinstance(outcome, PickAgain):
            return outcome
        _count_first = True
        if outcome.missing:
            rows = [JobLimit(scope=scope, name=name) for scope, name in outcome.missing]
            JobLimit.objects.bulk_create(rows, ignore_conflicts=True)
    return None


def _any_full(limits: Limits, held: Held) -> bool:
    """Whether a queue's or a key's limit is full, so that a pick must pass over some jobs."""
    full_queue = any(held.by_queue[queue] >= limit for queue, limit in limits.queues.items())
    return full_queue or bool(_full_keys(limits, held))


def _kind_is_full(kind: str, limits: Limits, held: Held, rated: Mapping[str, Any]) -> bool:
    return kind in rated or (kind in limits.max_running and held.by_kind[kind] >= limits.max_running[kind])


@dataclass(frozen=True)
class PickAgain:
    """The counts a pick was made with were out of date, or the rows of its job's limits (``missing``)
    do not exist yet."""

    missing: tuple[Scope, ...] = ()


def _pick_and_take(
    db: BaseDatabaseWrapper,
    status: str,
    kinds: list[str],
    request: ClaimRequest,
    now: datetime,
    limits: Limits,
    held: Held,
    full: Mapping[Any, Any],
) -> Job | PickAgain | None:
    """Steps 2 and 3 in one transaction: the job taken, or None when nothing may start."""
    full_queues = sorted(queue for queue, limit in limits.queues.items() if held.by_queue[queue] >= limit)
    full_keys = _full_keys(limits, held) + _full_throttles(full)
    room = _room_conditions(db, limits, kinds, full_queues, full_keys)
    prepared_now = sql.prepared_datetime(db, now)
    with _claiming_transaction(db):
        rows = _pick(db, status, kinds, request.queues, prepared_now, room)
        if not rows:
            return None
        [job] = sql.read_rows(db, Job, rows)
        scopes = limits.scopes(job)
        rate = limits.rates.get(job.kind)
        throttle = limits.throttles.get(job.kind)
        throttled = (THROTTLE, throttle_name(job.kind, job.concurrency_key))
        key_only = scopes == [(KEY, job.concurrency_key)] and db.vendor in CLAIM_RETURNING
        if key_only:
            hold_rows(db, scopes)
        elif scopes:
            locked, missing = locked_rows(db, scopes, make=db.vendor in CLAIM_RETURNING)
            if missing:
                return PickAgain(missing)
            rated = {}
            if rate or throttle:
                # Judged on the database's clock, and claimed at that moment: under the lock the
                # kind's (or the key's) starts are then recorded in order.
                now = database_now()
                prepared_now = sql.prepared_datetime(db, now)
                rated = at_rate(locked[(KIND, job.kind)], rate, now) if rate else {}
            if throttle and at_rate(locked[throttled], throttle, now):
                return PickAgain()
            if limits.held_back_by(job, held_now(db), rated):
                return PickAgain()
        params = [*taking_params(status, request, prepared_now), job.pk, status]
        if not _take(db, status, params, limits.key_limits[job.kind] if key_only else 0, job):
            return PickAgain()
        if rate:
            record_start(db, locked[(KIND, job.kind)], rate, now)
        if throttle:
            record_start(db, locked[throttled], throttle, now)
    as_claimed(job, status, now, request)
    return job


def _pick(
    db: BaseDatabaseWrapper,
    status: str,
    kinds: list[str],
    queues: tuple[str, ...],
    now: Any,
    room: Condition,
) -> list[tuple[Any, ...]]:
    """Step 2's row, read past none of the jobs it may not take where the database can
    (``limited_pick.py``)."""
    if db.vendor in PICKS_BY_LANE:
        return pick_by_lane(db, status, kinds, queues, now, room)
    lock = pick_lock(db)
    pick = sql.statement(
        db,
        ("limited pick", len(kinds), len(queues), room[0], lock),
        lambda: pick_sql(db, len(kinds), len(queues), sql.returned_columns(db, Job), lock, room[0]),
    )
    return sql.fetch(db, pick, [*pick_params(status, kinds, queues, now), *room[1]])


def _take(db: BaseDatabaseWrapper, status: str, params: list[Any], key_limit: int, job: Job) -> int:
    """Take ``job`` (``params``: the take's); with ``key_limit``, only while its key has room."""
    if not key_limit:
        return sql.run(db, take_statement(db, status), params)
    return sql.run(db, take_under_key(db, status), [*params, *HELD, job.concurrency_key, key_limit])


def _full_keys(limits: Limits, held: Held) -> list[tuple[list[str], list[str]]]:
    """Per concurrency limit: the kinds with that limit, and the keys held as often or more."""
    by_limit: dict[int, list[str]] = {}
    for kind, limit in limits.key_limits.items():
        by_limit.setdefault(limit, []).append(kind)
    found = []
    for limit, kinds in sorted(by_limit.items()):
        keys = sorted(key for key, count in held.by_key.items() if count >= limit)
        if keys:
            found.append((sorted(kinds), keys))
    return found


def _full_throttles(full: Mapping[Any, Any]) -> list[tuple[list[str], list[str]]]:
    """Per throttled kind: the keys at their throttle, passed over by the pick as full keys are."""
    by_kind: dict[str, list[str]] = {}
    for kind, key in (name for name in full if isinstance(name, tuple)):
        by_kind.setdefault(kind, []).append(key)
    return [([kind], sorted(keys)) for kind, keys in sorted(by_kind.items())]


def _room_conditions(
    db: BaseDatabaseWrapper,
    limits: Limits,
    kinds: list[str],
    full_queues: list[str],
    full_keys: list[tuple[list[str], list[str]]],
) -> Condition:
    """The pick's conditions: a job under limits (of a limited kind, or in a limited queue), not
    held back by a full queue or key; and their parameters."""
    quote = db.ops.quote_name

    def placeholders(values: list[str] | tuple[str, ...]) -> str:
        return ", ".join(["%s"] * len(values))

    conditions, params = "", []
    if limits.limited_queues:
        limited = [kind for kind in kinds if kind in limits.limited_kinds]
        in_limited_kinds = f"{quote('kind')} IN ({placeholders(limited)}) OR " if limited else ""
        conditions += f" AND ({in_limited_kinds}{quote('queue')} IN ({placeholders(limits.limited_queues)}))"
        params += [*limited, *limits.limited_queues]
    if full_queues:
        conditions += f" AND {quote('queue')} NOT IN ({placeholders(full_queues)})"
        params += full_queues
    for kinds_with_limit, keys in full_keys:
        conditions += (
            f" AND NOT ({quote('kind')} IN ({placeholders(kinds_with_limit)}) "
            f"AND {quote('concurrency_key')} IN ({placeholders(keys)}))"
        )
        params += [*kinds_with_limit, *keys]
    return conditions, tuple(params)


def _claiming_transaction(db: BaseDatabaseWrapper) -> Any:
    """The claim's transaction; on SQLite ``BEGIN IMMEDIATE``, so that it counts what it then takes
    with the database already locked for it."""
    if db.vendor == "sqlite":
        return sql.transaction(db, statements_only=True, immediate=True)
    return transaction.atomic(using=db.alias)
