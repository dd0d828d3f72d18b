"""Fair shares: claims take turns among the fairness keys of the due jobs, so one key's backlog
delays another key's next job by at most one claim per busy key (docs/limits.md#fair-shares).

A job's fairness key is its kind's ``fairness_key(subject)``, or, in a queue of
``DURAJOBS["FAIR_QUEUES"]``, its kind's name. Each worker process keeps a cursor, the key it
claimed for last: the next claim takes the most urgent due job of the next key in key order with
a due job (found through ``durajobs_fair``), and after the last key, one job without a key (in
the usual order), then the first key again. The cursor is the process's own: no write, no lock.

Turns cost a look for the next key before each claim, and keep a finish from claiming the next job
with its outcome. So when a look finds no job with a key due at all, for ``KEYED_LOOKUP_SECONDS``
the process passes over the turns: a claim (and a finish, in the same statement) takes a job
without a key, and takes a turn only when none is due. A job with a key never jumps the turns:
it waits for the next look, at most that long, while jobs without a key keep its workers busy.
"""

from __future__ import annotations

import time
from datetime import datetime

from django.db.backends.base.base import BaseDatabaseWrapper
from django.utils import timezone

from ..conf import get_setting
from ..models import Job
from ..registry import fair_kinds
from ..status import Status
from . import sql
from .claiming import ClaimRequest, Condition, claim_one
from .holding import Limits, plain_claim

#: How many keys one claim tries when another worker took the chosen key's due jobs meanwhile.
KEYS_TRIED = 5
#: After a look found no due job with a key, how long (seconds) claims pass over the turns.
KEYED_LOOKUP_SECONDS = 1.0

_cursor: str = ""
#: Until when (on ``time.monotonic()``) claims pass over the turns.
_next_keyed_lookup = 0.0


def fairness_in_force() -> bool:
    """Whether any kind has a fairness key or any queue is fair."""
    return bool(fair_kinds() or get_setting("FAIR_QUEUES"))


def fairness_key_of(kind_name: str, queue: str, key: str) -> str:
    """A new job's fairness key: its kind's (given as ``key``), else its kind's name in a fair queue."""
    if key:
        return key
    return kind_name if queue in get_setting("FAIR_QUEUES") else ""


def claim_fairly(db: BaseDatabaseWrapper, request: ClaimRequest, limits: Limits | None) -> Job | None:
    """Claim a queued job for the next key's turn (the module's text says which), of a kind and in
    a queue that no limit applies to."""
    global _cursor
    now = timezone.now()
    kinds, passed_over, plain_lane = plain_claim(limits)
    if not kinds:
        return None
    tried_keyless = not turns_due()
    if tried_keyless:
        unkeyed = claim_one(db, Status.QUEUED, request, now, kinds, passed_over, KEYLESS, plain_lane)
        if unkeyed is not None:
            return unkeyed
    for _try in range(KEYS_TRIED):
        key = _next_key(db, _cursor, kinds, request.queues, now)
        if key is None:
            keys_due = bool(_cursor)  # a round of turns ended: its first key may be due again
            _cursor = ""
            unkeyed = (
                None
                if tried_keyless
                else claim_one(db, Status.QUEUED, request, now, kinds, passed_over, KEYLESS, plain_lane)
            )
            tried_keyless = True
            if unkeyed is None and keys_due:  # from the first key again (a look from it just found none)
                keys_due = _next_key(db, "", kinds, request.queues, now) is not None
            if not keys_due:
                _pass_over_turns()
            if unkeyed is not None or not keys_due:
                return unkeyed
            continue
        _cursor = key
        _pass_over_turns(seconds=0.0)  # jobs with a key are due: turns from the next claim on
        job = claim_one(db, Status.QUEUED, request, now, kinds, passed_over, _with_key(db, key))
        if job is not None:
            return job
    return None


def turns_due() -> bool:
    """Whether claims take turns now: jobs with a key were due at the last look, or it was
    ``KEYED_LOOKUP_SECONDS`` ago."""
    return time.monotonic() >= _next_keyed_lookup


def _pass_over_turns(seconds: float = KEYED_LOOKUP_SECONDS) -> None:
    global _next_keyed_lookup
    _next_keyed_lookup = time.monotonic() + seconds


#: A job without a fairness key.
KEYLESS: Condition = (" AND fairness_key = ''", ())


def _with_key(db: BaseDatabaseWrapper, key: str) -> Condition:
    """The key's jobs; ``> ''``, its condition word for word, lets the database read them from the
    partial index ``durajobs_fair``."""
    column = db.ops.quote_name("fairness_key")
    return (f" AND {column} > '' AND {column} = %s", (key,))


def _next_key(
    db: BaseDatabaseWrapper, after: str, kinds: list[str], queues: tuple[str, ...], now: datetime
) -> str | None:
    """The first fairness key after ``after`` (in key order) with a due queued job, or None.

    ``> ''`` lets the database read the partial index ``durajobs_fair``; the cursor's bound comes
    first because SQLite starts its range at the first of two lower bounds: from ``''`` it read
    every due job of the keys before the cursor, a big key's whole backlog at every turn.
    """
    quote = db.ops.quote_name

    def next_key_sql() -> str:
        in_queues = f" AND {quote('queue')} IN ({', '.join(['%s'] * len(queues))})" if queues else ""
        return (
            f"SELECT {quote('fairness_key')} FROM {sql.table(db, Job)} "
            f"WHERE {quote('status')} = %s "
            f"AND {quote('fairness_key')} > %s AND {quote('fairness_key')} > '' "
            f"AND {quote('next_run_at')} <= %s AND {quote('locked_by')} = '' "
            f"AND {quote('kind')} IN ({', '.join(['%s'] * len(kinds))}){in_queues} "
            f"ORDER BY {quote('fairness_key')} LIMIT 1"
        )

    statement = sql.statement(db, ("next fair key", len(kinds), len(queues)), next_key_sql)
    rows = sql.fetch(db, statement, [Status.QUEUED, after, sql.prepared_datetime(db, now), *kinds, *queues])
    return rows[0][0] if rows else None
