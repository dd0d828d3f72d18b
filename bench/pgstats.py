"""What a PostgreSQL server does for the benchmark's database while workers run (bench/fleet.py).

- ``Sampler``: ``pg_stat_activity`` and ``pg_locks`` of the benchmark's database every 50 ms, on a
  connection of its own to the maintenance database (so it is not among the backends it counts):
  backends, what the active ones wait for, locks not granted; and the CPU time of those backends
  and of the worker processes (``/proc/<pid>/stat``: the server is on this machine).
- ``database_stats``: ``pg_stat_database``'s counters of the database (transactions, deadlocks,
  conflicts, rows written).
- ``wal_written``: the WAL of the database's own records between two positions, read with
  ``pg_walinspect`` (PostgreSQL 15+): the server's other databases (tests running beside the
  benchmark) write WAL too, so the difference of ``pg_current_wal_lsn()`` alone would count theirs.
  Its records are those that touch a relation of the database and the commit records of the
  transactions that wrote them.
"""

from __future__ import annotations

import os
import threading
from collections import Counter
from dataclasses import dataclass, field, replace

import psycopg

from bench.database import Target, postgres_params

TICKS = os.sysconf("SC_CLK_TCK")

SAMPLE_SQL = r"""
SELECT a.pid, a.state, a.wait_event_type, a.wait_event,
       CASE WHEN a.wait_event_type = 'Lock' THEN
           left(regexp_replace(a.query, '\s+', ' ', 'g'), 50) || ' waits for ' || coalesce((
               SELECT left(regexp_replace(b.query, '\s+', ' ', 'g'), 50) FROM pg_stat_activity b
               WHERE b.pid = (pg_blocking_pids(a.pid))[1]), '?')
       END,
       EXISTS (SELECT 1 FROM pg_locks l WHERE l.pid = a.pid AND NOT l.granted)
FROM pg_stat_activity a
WHERE a.datname = %s AND a.backend_type = 'client backend' AND a.pid <> ALL(%s)
"""
STATS_SQL = """
SELECT xact_commit, xact_rollback, deadlocks, conflicts, tup_inserted + tup_updated + tup_deleted
FROM pg_stat_database WHERE datname = %s
"""
STATS = ("transactions", "rollbacks", "deadlocks", "conflicts", "rows written")
WAL_SQL = """
WITH r AS (SELECT * FROM pg_get_wal_records_info(%(start)s, %(end)s)),
xids AS (SELECT DISTINCT xid::text AS xid FROM r WHERE block_ref ~ %(rel)s AND xid::text <> '0')
SELECT resource_manager || ' ' || split_part(record_type, ' ', 1), count(*), sum(record_length),
       sum(fpi_length)
FROM r
WHERE block_ref ~ %(rel)s OR (resource_manager = 'Transaction' AND xid::text IN (SELECT xid FROM xids))
GROUP BY 1
"""


def cpu_seconds(pid: int) -> float | None:
    """User and system CPU time of a live process (all its threads); None once it has exited."""
    try:
        with open(f"/proc/{pid}/stat") as stat:
            fields = stat.read().rsplit(")", 1)[1].split()
    except OSError:
        return None
    return (int(fields[11]) + int(fields[12])) / TICKS


def maintenance(server: Target) -> psycopg.Connection:
    """An autocommit connection to the server's ``postgres`` database."""
    return psycopg.connect(**postgres_params(replace(server, name="postgres")), autocommit=True)


@dataclass
class Activity:
    """What the samples saw, summed over samples (a backend seen in 10 samples counts 10)."""

    samples: int = 0
    max_backends: int = 0
    max_busy: int = 0  # backends in a transaction (active, or idle in one) at once
    active: int = 0
    waits: Counter = field(default_factory=Counter)  # wait_event_type of active backends
    events: Counter = field(default_factory=Counter)  # "type:event" of active backends
    lock_waiters: Counter = field(default_factory=Counter)  # statements waiting on a Lock, and for what
    ungranted: int = 0
    max_ungranted: int = 0
    database_cpu: float = 0.0  # seconds, the database's backends
    workers_cpu: float = 0.0  # seconds, the worker processes

    def share(self, wait_type: str) -> float:
        """The fraction of active backend samples waiting on ``wait_type``."""
        return self.waits[wait_type] / self.active if self.active else 0.0

    def top_events(self, count: int = 2) -> str:
        shares = [f"{event} {n / self.active:.0%}" for event, n in self.events.most_common(count)]
        return ", ".join(shares) if shares else "none"

    def top_lock_waiter(self) -> str:
        """The statement most often seen waiting on a heavyweight lock and the one it waited for
        (the blocking backend's current or last statement), with its share of those waits."""
        if not self.lock_waiters:
            return "none"
        statement, seen = self.lock_waiters.most_common(1)[0]
        return f"{statement!r} ({seen / self.waits['Lock']:.0%})"


class Sampler:
    """Samples the database ``name`` every ``every`` seconds while the ``with`` block runs.

    ``ours``: backends not counted (the benchmark's own connections). ``processes``: worker
    processes whose CPU time over the block is added up (those alive at its end).
    """

    def __init__(
        self, server: Target, name: str, ours: list[int], processes: list[int], every: float = 0.05
    ) -> None:
        self.server, self.name, self.ours, self.every = server, name, ours, every
        self.processes = {pid: cpu_seconds(pid) or 0.0 for pid in processes}
        self.activity = Activity()
        self._cpu: dict[int, tuple[float, float]] = {}  # backend -> (CPU when first seen, last)
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def __enter__(self) -> Sampler:
        self._conn = maintenance(self.server)
        self._sample(first=True)
        self._thread.start()
        return self

    def __exit__(self, *exc_info) -> None:
        self._stop.set()
        self._thread.join()
        self._sample()
        self._conn.close()
        activity = self.activity
        activity.database_cpu = sum(last - first for first, last in self._cpu.values())
        for pid, start in self.processes.items():
            activity.workers_cpu += max(0.0, (cpu_seconds(pid) or start) - start)

    def _run(self) -> None:
        while not self._stop.wait(self.every):
            self._sample()

    def _sample(self, first: bool = False) -> None:
        rows = self._conn.execute(SAMPLE_SQL, (self.name, self.ours)).fetchall()
        activity = self.activity
        activity.samples += 1
        activity.max_backends = max(activity.max_backends, len(rows))
        busy = sum(1 for _, state, *_ in rows if state in ("active", "idle in transaction"))
        activity.max_busy = max(activity.max_busy, busy)
        ungranted = sum(1 for *_, waiting in rows if waiting)
        activity.ungranted += ungranted
        activity.max_ungranted = max(activity.max_ungranted, ungranted)
        for pid, state, wait_type, event, statement, _ in rows:
            if state == "active":
                activity.active += 1
                activity.waits[wait_type or "CPU"] += 1
                if wait_type:
                    activity.events[f"{wait_type}:{event}"] += 1
                if statement:
                    activity.lock_waiters[statement] += 1
            now = cpu_seconds(pid)
            if now is not None:
                # A backend there from the start counts from then; a new one from its fork.
                start = self._cpu.get(pid, (now if first else 0.0, 0.0))[0]
                self._cpu[pid] = (start, now)


def database_stats(conn: psycopg.Connection, name: str) -> dict[str, int]:
    """``pg_stat_database``'s counters of ``name`` (flushed by each backend as it exits)."""
    row = conn.execute(STATS_SQL, (name,)).fetchone()
    return dict(zip(STATS, row, strict=True))


def difference(before: dict[str, int], after: dict[str, int]) -> dict[str, int]:
    return {key: after[key] - before[key] for key in before}


@dataclass
class Wal:
    """The WAL records of one database over a stretch, by resource manager and record type."""

    records: dict[str, tuple[int, int]]  # "Heap HOT_UPDATE" -> (records, bytes)
    images: int  # bytes of full-page images among them

    @property
    def bytes(self) -> int:
        return sum(size for _, size in self.records.values())

    @property
    def commits(self) -> int:
        return self.records.get("Transaction COMMIT", (0, 0))[0]

    def largest(self, per: int, count: int = 4) -> str:
        """The ``count`` record types that wrote the most, as records and bytes per ``per``."""
        ordered = sorted(self.records.items(), key=lambda item: -item[1][1])[:count]
        return ", ".join(f"{name} {n / per:.1f}× {size / per:.0f} B" for name, (n, size) in ordered)


def wal_written(cursor, database_oid: int, start: str, end: str) -> Wal:
    """The WAL of the database ``database_oid`` between ``start`` and ``end`` (``pg_walinspect``
    in the current database)."""
    params = {"start": start, "end": end, "rel": f"rel [0-9]+/{int(database_oid)}/"}
    cursor.execute(WAL_SQL, params)
    rows = cursor.fetchall()
    return Wal({name: (int(n), int(size)) for name, n, size, _ in rows}, sum(int(fpi) for *_, fpi in rows))
