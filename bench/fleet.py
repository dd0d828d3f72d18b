"""A fleet of workers on one PostgreSQL, and what one job and one step cost the database.

Run only when named (``bench/run.py --workload fleet``, PostgreSQL only): it starts up to eight
worker processes at a time and takes minutes, not the seconds of a smoke run.

**Scale.** 1, 2, 4 and 8 ``runjobs --concurrency 4`` processes run queued no-op jobs of 0 and 5
steps. The jobs are enqueued to a queue no worker serves; once every worker has registered, one
``UPDATE`` moves them to the workers' queue, so the whole fleet starts together (the workers poll
every 0.1 s). Jobs/s come from the jobs' own timestamps. Meanwhile ``bench.pgstats.Sampler`` takes
what the database's backends wait for, the locks not granted, the backends at once and their CPU
time; ``pg_stat_database`` gives the deadlocks, conflicts and rollbacks of the run.
With ``DURAJOBS_BENCH_POOLER`` set to a PgBouncer in transaction mode in front of the same server
(``scripts/pgbouncer start 6433``, then ``postgres://postgres@127.0.0.1:6433``), 1 and 8 processes
run through it too, with the default settings (the workers find out themselves that they cannot
keep prepared statements, and poll as they cannot hear ``NOTIFY`` through it). 1 and 8 processes
also run straight to the server without prepared statements (``BENCH_UNPREPARED``, read by
bench/settings.py): what the pooler's hop costs apart from what losing them costs.

**Cost.** One ``runjobs --burst`` at concurrency 1 runs N jobs of 0 and of 5 steps: the WAL of the
database's own records and its commit records (``pg_walinspect``), ``pg_stat_database``'s
transactions and rows written, the backends' CPU time. The statements are counted by an
in-process worker whose every connection has an execute wrapper. Per job, and per extra step
(the difference between 5-step and 0-step jobs, over 5); the worker's own housekeeping
(heartbeats, looks for reverts) over the run is included.
"""

from __future__ import annotations

import os
import signal
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, replace

from django.db import connection
from django.db.backends.signals import connection_created

from bench.database import UNPREPARED_VARIABLE, URL_VARIABLE, Target
from bench.harness import WorkloadFailed, done_rate, run_worker_here, start_worker, wait_until, wait_worker
from bench.pgstats import Activity, Sampler, database_stats, difference, maintenance, wal_written
from bench.report import Figure
from django_durajobs import Job, Status, enqueue, enqueue_many
from django_durajobs.models import Worker as WorkerRow

POOLER_VARIABLE = "DURAJOBS_BENCH_POOLER"
HOLD, QUEUE = "fleet_hold", "fleet"
THREADS = 4
PROCESSES = (1, 2, 4, 8)
POOLED_PROCESSES = (1, 8)
#: The workers straight to the server without prepared statements, as through PgBouncer < 1.21.
UNPREPARED = "direct, unprepared"
KINDS = {0: "bench_noop0", 5: "bench_noop5"}
BATCH = 1000


@dataclass
class Run:
    jobs: int
    rate: float
    activity: Activity
    stats: dict[str, int]

    def figure(self, route: str, steps: int, processes: int, base: float) -> Figure:
        a = self.activity
        note = (
            f"active backends waiting on Lock {a.share('Lock'):.0%}, LWLock {a.share('LWLock'):.0%}, "
            f"IO {a.share('IO'):.0%} (most: {a.top_events()}); locks not granted: at most "
            f"{a.max_ungranted}; waiting on a Lock most: {a.top_lock_waiter()}; "
            f"backends at most {a.max_backends}, {a.max_busy} in a transaction; "
            f"CPU per job: database {a.database_cpu / self.jobs * 1000:.2f} ms, workers "
            f"{a.workers_cpu / self.jobs * 1000:.2f} ms; deadlocks {self.stats['deadlocks']}, "
            f"conflicts {self.stats['conflicts']}, rollbacks {self.stats['rollbacks']}"
        )
        return Figure(
            f"fleet_{steps}_{processes}x{THREADS}_{route.replace(',', '').replace(' ', '_').lower()}",
            f"{steps}-step jobs, {processes} × {THREADS} threads, {route}",
            self.rate,
            "jobs/s",
            versus=self.rate / base,
            versus_what=f"1 × {THREADS}, {route}",
            note=note,
        )


def fleet(bench) -> list[Figure]:
    if bench.target.vendor != "postgresql":
        print("(PostgreSQL only: nothing measured)", end=" ", flush=True)
        return []
    with connection.cursor() as cursor:
        cursor.execute("CREATE EXTENSION IF NOT EXISTS pg_walinspect")
    figures = costs(bench)
    routes = [
        Route("direct", bench.target, PROCESSES),
        Route(UNPREPARED, bench.target, POOLED_PROCESSES, True),
    ]
    if pooler := os.environ.get(POOLER_VARIABLE):
        routes.append(
            Route("PgBouncer", replace(Target.parse(pooler), name=bench.target.name), POOLED_PROCESSES)
        )
    else:
        print(f"(no {POOLER_VARIABLE}: not through PgBouncer)", end=" ", flush=True)
    base: dict[tuple[int, str], float] = {}
    for steps in KINDS:  # the routes interleaved, so that a busy moment weighs on both
        for processes in PROCESSES:
            for route in routes:
                if processes in route.processes:
                    run = scale_run(bench, route, steps, processes)
                    first = base.setdefault((steps, route.name), run.rate)
                    figures.append(run.figure(route.name, steps, processes, first))
    return figures


def queue_jobs(kind: str, count: int, queue: str = "default") -> None:
    for first in range(0, count, BATCH):
        enqueue_many(
            kind, [{"queue": queue, "subject": {"n": n}} for n in range(first, min(first + BATCH, count))]
        )


def own_backends(bench) -> list[int]:
    """The benchmark's own connections to its database: not counted among the workers'."""
    connection.ensure_connection()
    return [connection.connection.info.backend_pid, bench.raw.conn.info.backend_pid]


def end_other_backends(conn, name: str, ours: list[int]) -> None:
    """End the backends of earlier runs that PgBouncer keeps, so that each run counts its own."""
    sql = "SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE datname = %s AND pid <> ALL(%s)"
    conn.execute(sql, (name, ours))
    left = "SELECT count(*) FROM pg_stat_activity WHERE datname = %s AND pid <> ALL(%s)"
    for _ in range(200):
        if conn.execute(left, (name, ours)).fetchone()[0] == 0:
            return
        time.sleep(0.05)


@dataclass(frozen=True)
class Route:
    """How the workers reach the database: where they connect, and whether they prepare."""

    name: str
    target: Target
    processes: tuple[int, ...]
    unprepared: bool = False


@contextmanager
def workers_on(route: Route) -> Iterator[None]:
    """Worker processes started in this block connect as ``route`` says."""
    saved = dict(os.environ)
    os.environ[URL_VARIABLE] = route.target.url
    if route.unprepared:
        os.environ[UNPREPARED_VARIABLE] = "1"
    try:
        yield
    finally:
        os.environ.clear()
        os.environ.update(saved)


def scale_run(bench, route: Route, steps: int, processes: int) -> Run:
    """``processes`` workers at ``THREADS`` run jobs of ``steps`` steps, all starting together."""
    count = bench.sizes.process // (4 if steps else 2)
    bench.reset()
    queue_jobs(KINDS[steps], count, HOLD)
    bench.analyze()
    name, ours = bench.target.name, own_backends(bench)
    with maintenance(bench.target) as conn:
        end_other_backends(conn, name, ours)
        with workers_on(route):
            options = ("--queue", QUEUE, "--concurrency", str(THREADS), "--poll-interval", "0.1")
            workers = [start_worker(*options) for _ in range(processes)]
        pids = [worker.pid for worker in workers]
        try:
            registered = WorkerRow.objects.filter(pid__in=pids)
            wait_until(lambda: registered.count() == processes, 120, "the workers' start", every=0.1)
            before = database_stats(conn, name)
            done = Job.objects.filter(status=Status.DONE)
            with Sampler(bench.target, name, ours, pids) as sampler:
                Job.objects.filter(queue=HOLD).update(queue=QUEUE)
                wait_until(lambda: done.count() == count, 600, f"{count} jobs done", every=0.2)
        finally:
            for worker in workers:
                worker.send_signal(signal.SIGTERM)
            for worker in workers:
                wait_worker(worker, timeout=60)
        end_other_backends(conn, name, ours)  # their statistics are flushed as they end
        stats = difference(before, database_stats(conn, name))
    return Run(count, done_rate(count), sampler.activity, stats)


# The cost of a job and of a step --------------------------------------------------------------


@dataclass
class Cost:
    """One run's totals, turned per job."""

    statements: float
    commits: float  # commit records in the WAL: transactions that wrote
    transactions: float  # pg_stat_database: every transaction, read-only ones too
    wal_bytes: float
    fpi_bytes: float  # of which full-page images (the first change of a page after a checkpoint)
    rows: float  # rows inserted, updated and deleted
    cpu_ms: float  # the database's backends
    enqueue_commits: float  # of enqueue(), one call per job
    enqueue_wal_bytes: float
    wal_records: str  # the record types that wrote the most, per job


COSTS = (
    ("statements", "statements", "statements sent (an in-process worker's execute wrappers)"),
    ("commits", "commits", "commit records in the WAL (pg_walinspect)"),
    ("transactions", "transactions", "pg_stat_database xact_commit, read-only ones too"),
    ("wal_bytes", "bytes", "WAL bytes of the database's records"),
    ("fpi_bytes", "bytes", "of those, full-page images"),
    ("rows", "rows", "rows inserted, updated, deleted (pg_stat_database)"),
    ("cpu_ms", "ms", "CPU of the database's backends"),
    ("enqueue_commits", "commits", "enqueue(), one call per job: commit records"),
    ("enqueue_wal_bytes", "bytes", "enqueue(), one call per job: WAL bytes"),
)


def costs(bench) -> list[Figure]:
    """Per 0-step job and per extra step (the 5-step job's excess over 5)."""
    count = bench.sizes.process // 5
    zero, five = (job_cost(bench, steps, count) for steps in KINDS)
    figures = []
    for attribute, unit, what in COSTS:
        per_job, per_5 = getattr(zero, attribute), getattr(five, attribute)
        figures += [
            Figure(
                f"cost_{attribute}_job", f"per 0-step job: {attribute}", round(per_job, 2), unit, note=what
            ),
            Figure(
                f"cost_{attribute}_step",
                f"per extra step: {attribute}",
                round((per_5 - per_job) / 5, 2),
                unit,
                note=f"5-step job: {per_5:.2f}",
            ),
        ]
    for steps, cost in zip(KINDS, (zero, five), strict=True):
        label = f"WAL of a {steps}-step job, the largest record types"
        figures.append(
            Figure(f"cost_wal_records_{steps}", label, round(cost.wal_bytes), "bytes", note=cost.wal_records)
        )
    return figures


def job_cost(bench, steps: int, count: int) -> Cost:
    """One ``runjobs --burst`` at concurrency 1 over ``count`` jobs: what the database did."""
    bench.reset()
    queue_jobs(KINDS[steps], count)
    bench.analyze()
    name, ours = bench.target.name, own_backends(bench)
    with connection.cursor() as cursor, maintenance(bench.target) as conn:
        cursor.execute("SELECT pg_current_wal_insert_lsn(), oid FROM pg_database WHERE datname = %s", [name])
        start, oid = cursor.fetchone()
        before = database_stats(conn, name)
        worker = start_worker("--burst")
        with Sampler(bench.target, name, ours, []) as sampler:
            wait_worker(worker, timeout=600)
        end_other_backends(conn, name, ours)
        stats = difference(before, database_stats(conn, name))
        time.sleep(0.5)  # the last claims commit asynchronously: let the WAL writer flush them
        cursor.execute("SELECT pg_current_wal_flush_lsn()")
        wal = wal_written(cursor, oid, start, cursor.fetchone()[0])
    done_rate(count)  # every job done, exactly once
    enqueue_commits, enqueue_wal = enqueue_cost(bench, steps, count)
    return Cost(
        statements=statements_per_job(bench, steps, min(count, 500)),
        commits=wal.commits / count,
        transactions=stats["transactions"] / count,
        wal_bytes=wal.bytes / count,
        fpi_bytes=wal.images / count,
        wal_records=wal.largest(count),
        rows=stats["rows written"] / count,
        cpu_ms=sampler.activity.database_cpu / count * 1000,
        enqueue_commits=enqueue_commits / count,
        enqueue_wal_bytes=enqueue_wal / count,
    )


def enqueue_cost(bench, steps: int, count: int) -> tuple[int, int]:
    """Commit records and WAL bytes of ``count`` calls of ``enqueue()``."""
    bench.reset()
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT pg_current_wal_insert_lsn(), oid FROM pg_database WHERE datname = %s", [bench.target.name]
        )
        start, oid = cursor.fetchone()
        for n in range(count):
            enqueue(KINDS[steps], subject={"n": n})
        cursor.execute("SELECT pg_current_wal_flush_lsn()")
        wal = wal_written(cursor, oid, start, cursor.fetchone()[0])
    return wal.commits, wal.bytes


def statements_per_job(bench, steps: int, count: int) -> float:
    """Statements per job of an in-process worker at concurrency 1, every connection counted."""
    bench.reset()
    queue_jobs(KINDS[steps], count)
    lock, sent = threading.Lock(), [0]

    def counted(execute, sql, params, many, context):
        with lock:
            sent[0] += 1
        return execute(sql, params, many, context)

    def watch(sender, connection, **kwargs) -> None:
        connection.execute_wrappers.append(counted)

    connection_created.connect(watch)
    connection.execute_wrappers.append(counted)  # the worker's housekeeping runs in this thread
    try:
        run_worker_here(concurrency=1)
    finally:
        connection_created.disconnect(watch)
        connection.execute_wrappers.remove(counted)
    if Job.objects.filter(status=Status.DONE).count() != count:
        raise WorkloadFailed("the in-process worker did not run every job")
    return sent[0] / count
