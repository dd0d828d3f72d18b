"""The pick of a job under limits, read past none of the jobs it may not take.

The plain pick (``claiming.pick_sql``) reads ``durajobs_due`` in claim order and passes over the
jobs its conditions leave out: those a full limit holds back, and those of the kinds no limit
applies to, which the plain claim takes. It reads past every one of them at every look (once a
second, and at every claim while it finds jobs): a full concurrency key with 1,000,000 due jobs
made each look read 1,000,000 rows, and so did 1,000,000 due jobs of a kind without limits, with
no job under limits anywhere (667 ms a look on PostgreSQL, whose generic plan reads
``durajobs_due`` whatever the kinds; a worker's burst through them slowed to 160 jobs/s). The
claim under limits picks in two reads instead, each bounded by what it may take, not by what
waits:

1. The window: the most urgent of the first ``WINDOW`` jobs in the status, in claim order, that
   the pick's conditions leave room for. Where the jobs it may not take are few, or behind, it
   finds the job the plain pick would, in at most ``WINDOW`` rows.
2. The lanes, only when the window held none: the jobs enqueued under limits, read through
   ``durajobs_limited_due`` by lane, that is by queue, kind and concurrency key. One seek per
   lane finds the next (a recursive query), one seek per lane the pick's conditions leave room
   for finds its most urgent job; the most urgent of those is the one taken. A full key, a full
   kind or a full queue is a lane or a run of lanes, so its backlog costs one seek, whatever its
   size.

   With them, the first ``WINDOW`` jobs of the plain lane: a release that puts a kind under a
   limit leaves its jobs queued before in the plain lane (``holding.py``), and the claim of the
   plain jobs takes the jobs ahead of them there.

The two together find the job the plain pick finds, but for such a job more than ``WINDOW``
behind in the plain lane: it waits until the claim of the plain jobs has taken those ahead.

MariaDB/MySQL keep the plain pick: MariaDB reads a seek whose range comes from the lane before as
an equality on that lane's queue and kind with the key's range a filter, so each next lane reads a
whole kind (measured: 46 ms behind 20,000 held-back jobs, 229 ms behind 100,000, where the plain
pick reads 27 and 139 ms).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from django.db.backends.base.base import BaseDatabaseWrapper

from ..models import Job
from ..transitions import CLAIMABLE
from . import sql
from .claiming import Condition, due_order_sql, pick_lock, pick_params, pick_sql

#: How many jobs, the first in claim order, the window reads.
WINDOW = 100
#: The columns of ``durajobs_limited_due`` after the status: what a lane is.
LANE = ("queue", "kind", "concurrency_key")

#: Where the pick under limits is read in two parts; elsewhere the plain pick stays.
PICKS_BY_LANE = frozenset({"postgresql", "sqlite"})


def pick_by_lane(
    db: BaseDatabaseWrapper, status: str, kinds: list[str], queues: tuple[str, ...], now: Any, room: Condition
) -> list[tuple[Any, ...]]:
    """The row of the most urgent due job in ``status`` of ``kinds`` (and ``queues``, if any) that
    ``room`` (the pick's conditions on a job's queue, kind and key) leaves room for: the window's,
    else the lanes'. ``now`` is prepared for the database."""
    lock = pick_lock(db)
    shape = (len(kinds), len(queues), room[0], lock)
    picked = [*pick_params(status, kinds, queues, now), *room[1]]

    def text(make: Callable[..., str]) -> Callable[[], str]:
        return lambda: make(db, len(kinds), len(queues), sql.returned_columns(db, Job), lock, room[0])

    rows = sql.fetch(db, sql.statement(db, ("limited window", *shape), text(window_sql)), [*picked, status])
    if rows:
        return rows
    lanes = sql.statement(db, ("limited lanes", *shape), text(lanes_sql))
    heads = [status, now, *kinds, *queues, *room[1]]
    return sql.fetch(db, lanes, [*[status] * (1 + len(LANE)), *picked, *heads, status])


def window_sql(db: BaseDatabaseWrapper, kinds: int, queues: int, what: str, lock: str, only_if: str) -> str:
    """The pick (``pick_sql``'s conditions and order) among the first ``WINDOW`` jobs in the
    status; its parameters are ``pick_params``, ``only_if``'s, then the status again."""
    quote = db.ops.quote_name
    return _by_id(
        db,
        what,
        pick_sql(db, kinds, queues, quote("id"), lock, f"{only_if} AND {quote('id')} IN ({_first_jobs(db)})"),
    )


def lanes_sql(db: BaseDatabaseWrapper, kinds: int, queues: int, what: str, lock: str, only_if: str) -> str:
    """The pick (``pick_sql``'s conditions and order) among the most urgent due job of each lane
    that the pick's conditions (``only_if``: on a lane's columns alone) leave room for, and the
    first ``WINDOW`` jobs of the plain lane: there a release that put a kind under a limit left
    its jobs queued before (``holding.py``), which the lanes do not hold.

    Its parameters: the status ``1 + len(LANE)`` times (the lanes), ``pick_params`` and
    ``only_if``'s; the status, the moment due by, the kinds, the queues and ``only_if``'s again
    (the lanes' jobs); the status (the plain lane's first jobs)."""
    quote = db.ops.quote_name
    lanes = quote("durajobs_lanes")
    in_queues = f" AND {quote('queue')} IN ({', '.join(['%s'] * queues)})" if queues else ""
    heads = (
        f"SELECT ({_most_urgent(db, lanes)}) FROM {lanes} "
        f"WHERE {quote('kind')} IN ({', '.join(['%s'] * kinds)}){in_queues}{only_if}"
    )
    plain_lane = f" AND {quote('under_limits')} = FALSE AND {sql.status_in(db, CLAIMABLE)}"
    candidates = f" AND {quote('id')} IN ({heads} UNION ALL {_first_jobs(db, plain_lane)})"
    columns = ", ".join(quote(name) for name in ("id", *LANE))
    return (
        f"WITH RECURSIVE {lanes} ({columns}) AS ({_first_lane(db)} UNION ALL {_next_lane(db, lanes)}) "
        f"{_by_id(db, what, pick_sql(db, kinds, queues, quote('id'), lock, only_if + candidates))}"
    )


def _by_id(db: BaseDatabaseWrapper, what: str, pick: str) -> str:
    """``what`` of the job ``pick`` (a statement that selects an id) picks: the pick then sorts its
    candidates' order columns alone, not every column of each."""
    quote = db.ops.quote_name
    return f"SELECT {what} FROM {sql.table(db, Job)} WHERE {quote('id')} = ({pick})"


def _first_jobs(db: BaseDatabaseWrapper, lane: str = "") -> str:
    """The ids of the first ``WINDOW`` jobs in the status (a parameter), in claim order; within
    ``lane``, if given (a condition written as an index's)."""
    quote = db.ops.quote_name
    return (
        f"SELECT {quote('id')} FROM (SELECT {quote('id')} FROM {sql.table(db, Job)} "
        f"WHERE {quote('status')} = %s{lane} ORDER BY {due_order_sql(db)} LIMIT {WINDOW}) "
        f"{quote('durajobs_window')}"
    )


def _first_lane(db: BaseDatabaseWrapper) -> str:
    """The first lane: a job of it, and its columns. ``>= ''`` makes it a seek as the next queue's
    is (without one, SQLite read the status's whole range and sorted it)."""
    first = db.ops.quote_name("first")
    return (
        f"SELECT * FROM (SELECT {_of(db, first, 'id')}, {_lane_of(db, first)} FROM {_lane_table(db, first)} "
        f"WHERE {_in_lane(db, first)} AND {_of(db, first, 'queue')} >= '' "
        f"ORDER BY {_lane_of(db, first)} LIMIT 1) {db.ops.quote_name('first_lane')}"
    )


def _next_lane(db: BaseDatabaseWrapper, lanes: str) -> str:
    """The lane after each in ``lanes``: within its queue and kind, the next key; else within its
    queue, the next kind; else the next queue. Three seeks, each equalities and one range on the
    index's columns in order, as every planner reads them (a row comparison, ``(a, b, c) > …``,
    reads a range of its first column only, past the lane's whole backlog)."""
    seek, nxt = db.ops.quote_name("seek"), db.ops.quote_name("nxt")
    seeks = []
    for depth in reversed(range(len(LANE))):
        same = "".join(f" AND {_of(db, seek, name)} = {_of(db, lanes, name)}" for name in LANE[:depth])
        after = f"{_of(db, seek, LANE[depth])} > {_of(db, lanes, LANE[depth])}"
        seeks.append(
            f"(SELECT {_of(db, seek, 'id')} FROM {_lane_table(db, seek)} WHERE {_in_lane(db, seek)}{same} "
            f"AND {after} ORDER BY {_lane_of(db, seek)} LIMIT 1)"
        )
    return (
        f"SELECT {_of(db, nxt, 'id')}, {_lane_of(db, nxt)} FROM {lanes} "
        f"JOIN {sql.table(db, Job)} {nxt} ON {_of(db, nxt, 'id')} = COALESCE({', '.join(seeks)})"
    )


def _most_urgent(db: BaseDatabaseWrapper, lanes: str) -> str:
    """The id of a lane's most urgent due job, ordered as the index is. The key is fixed by a range
    rather than an equality, so that the order is the index's alone: with every lane column equal,
    PostgreSQL took it for durajobs_due's order too, and read that index past every other lane."""
    head = db.ops.quote_name("head")
    key, lane_key = _of(db, head, LANE[-1]), _of(db, lanes, LANE[-1])
    same_lane = "".join(f" AND {_of(db, head, name)} = {_of(db, lanes, name)}" for name in LANE[:-1])
    return (
        f"SELECT {_of(db, head, 'id')} FROM {_lane_table(db, head)} WHERE {_in_lane(db, head)}{same_lane} "
        f"AND {key} >= {lane_key} AND {key} <= {lane_key} "
        f"AND {_of(db, head, 'locked_by')} = '' AND {_of(db, head, 'next_run_at')} <= %s "
        f"ORDER BY {_lane_of(db, head)}, {due_order_sql(db, head)} LIMIT 1"
    )


def _of(db: BaseDatabaseWrapper, alias: str, name: str) -> str:
    return f"{alias}.{db.ops.quote_name(name)}"


def _lane_of(db: BaseDatabaseWrapper, alias: str) -> str:
    return ", ".join(_of(db, alias, name) for name in LANE)


def _lane_table(db: BaseDatabaseWrapper, alias: str) -> str:
    """The job table as ``alias``, read through ``durajobs_limited_due``: SQLite without ``STAT4``
    would rather read another index led by the status, and sort."""
    return f"{sql.table(db, Job)} {alias}{sql.index_hint(db, 'durajobs_limited_due', 'sqlite')}"


def _in_lane(db: BaseDatabaseWrapper, alias: str) -> str:
    """A job of ``alias`` in the status (a parameter) and in a lane: the index's condition word for
    word, so that every planner reads the index. SQLite matches the words: Django 6 wrote the
    flag ``"under_limits" = 1`` there, Django 5.2 ``"under_limits"``, and the index is as the
    Django that migrated made it, so both are said (``INDEXED BY`` fails outright without)."""
    statuses = ", ".join(f"'{status}'" for status in CLAIMABLE)
    flag = _of(db, alias, "under_limits")
    under_limits = f"{flag} = 1 AND {flag}" if db.vendor == "sqlite" else flag
    status = _of(db, alias, "status")
    return f"{status} IN ({statuses}) AND {under_limits} AND {status} = %s"
