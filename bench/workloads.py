"""The workloads: each does the same work through django-durajobs and through the raw queue.

Every workload starts from empty tables and returns its figures. Rates of processing are taken
from the jobs' own timestamps (first ``started_at`` to last ``ended_at``), so the start-up of a
worker process and the end of a burst are not counted; the raw queue is timed around its loop.
"""

from __future__ import annotations

import math
import os
import random
import signal
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from queue import Queue

from django.apps import apps
from django.core.management.color import no_style
from django.db import connection
from django.db.models import Count, Max, Min
from django.utils import timezone

from bench.bulk import enqueue_in_bulk
from bench.database import Target, postgres_params
from bench.fairness import fair_shares
from bench.family import children
from bench.fleet import fleet
from bench.kinds import kinds
from bench.pruning import prune_at_scale
from bench.rawqueue import STEPS_TABLE, TABLE, PostgresRawQueue, RawQueue, open_raw_queue
from bench.redaction import redaction
from bench.report import Figure
from bench.rows import add_jobs
from bench.scale_admin import admin_at_scale
from bench.waits import timed_waits
from django_durajobs import Job, Status, enqueue, enqueue_many, store
from django_durajobs.worker import Worker, WorkerOptions

REPO_ROOT = Path(__file__).resolve().parent.parent
BATCH = 1000  # jobs per enqueue_many / executemany call
#: The no-op kinds processed, and their number of steps.
KINDS = (("bench_noop0", 0), ("bench_noop1", 1), ("bench_noop5", 5))


@dataclass(frozen=True)
class Sizes:
    enqueue: int  # jobs enqueued one call at a time
    bulk: int  # jobs enqueued in batches of BATCH
    process: int  # jobs per processing run
    wakeups: int  # samples of the wake-up latency
    finished: int  # done jobs in the table for the claim cost
    backlog: int  # queued jobs added behind the claimed one, for the claim cost
    claims: int  # timed claims per table state
    rss_jobs: int  # jobs the RSS worker runs
    rss_every: float  # seconds between RSS samples
    redaction: int  # characters of each text redacted
    admin: tuple[int, ...]  # jobs in the table as the admin's changelist is rendered (bench/scale_admin.py)
    children_small: int  # children of a small family
    children_large: int  # children of a large one
    prune: tuple[int, int]  # finished jobs in the table as prune() deletes them (bench/pruning.py)
    waiting: tuple[int, int]  # jobs in a timed wait that is not over, beside the due ones (bench/waits.py)
    kinds: int  # jobs per run of each variant of bench/kinds.py
    kinds_rounds: int  # its rounds, each figure the median of them


FULL = Sizes(
    enqueue=5_000,
    bulk=100_000,
    process=5_000,
    wakeups=50,
    finished=1_000_000,
    backlog=1_000_000,
    claims=200,
    rss_jobs=100_000,
    rss_every=0.5,
    redaction=1_000_000,
    admin=(100_000, 1_000_000),
    children_small=100,
    children_large=10_000,
    prune=(100_000, 1_000_000),
    waiting=(100, 100_000),
    kinds=2_000,
    kinds_rounds=3,
)
# A smoke run (CI): every workload, small. RSS is sampled more often so a short run still has
# samples after warm-up.
QUICK = Sizes(
    enqueue=300,
    bulk=10_000,
    process=300,
    wakeups=20,
    finished=2_000,
    backlog=20_000,
    claims=30,
    rss_jobs=1_000,
    rss_every=0.1,
    redaction=250_000,
    admin=(2_000, 20_000),
    children_small=50,
    children_large=500,
    prune=(5_000, 20_000),
    waiting=(100, 10_000),
    kinds=200,
    kinds_rounds=1,
)


class WorkloadFailed(Exception):
    """The work was not done as it should have been; the run exits non-zero."""


@dataclass
class Bench:
    """What every workload needs: the database, the raw queue on it, and the sizes."""

    target: Target
    raw: RawQueue
    sizes: Sizes

    def reset(self) -> None:
        """Empty django-durajobs' tables and the raw queue, so no workload sees another's rows."""
        flush = connection.ops.sql_flush(no_style(), self.tables(), reset_sequences=True)
        connection.ops.execute_sql_flush(flush)
        self.raw.clear()

    def reconnect(self) -> None:
        """New connections after a failed workload: it may have left one broken or in a transaction."""
        connection.close()
        self.raw.close()
        self.raw = open_raw_queue(self.target)

    def analyze(self) -> None:
        """Fresh planner statistics for both queues, as autovacuum would give them after a while."""
        with connection.cursor() as cursor:
            if connection.vendor == "mysql":  # no whole-database ANALYZE: name every table
                tables = [*self.tables(), TABLE, STEPS_TABLE]
                cursor.execute(f"ANALYZE TABLE {', '.join(tables)}")
                cursor.fetchall()  # it answers with a row per table
            else:
                cursor.execute("ANALYZE")

    @staticmethod
    def tables() -> list[str]:
        """The app's tables, each once: a proxy model (the jobs dashboard) shares the job table, and
        MariaDB refuses an ``ANALYZE TABLE`` that names a table twice."""
        models = apps.get_app_config("django_durajobs").get_models()
        return list(dict.fromkeys(model._meta.db_table for model in models))


# Helpers ---------------------------------------------------------------------------------------


def rate(count: int, seconds: float) -> float:
    return count / seconds if seconds > 0 else float("inf")


def timed(work: Callable[[], object]) -> float:
    """Seconds ``work()`` takes."""
    start = time.perf_counter()
    work()
    return time.perf_counter() - start


def percentile(values: list[float], p: float) -> float:
    """Nearest-rank percentile: a value that was measured, not one interpolated between two."""
    ordered = sorted(values)
    return ordered[max(0, math.ceil(p / 100 * len(ordered)) - 1)]


def enqueue_batches(kind: str, count: int) -> None:
    """Queue ``count`` jobs of ``kind`` with ``enqueue_many``, BATCH at a time."""
    for first in range(0, count, BATCH):
        enqueue_many(kind, [{"subject": {"n": n}} for n in range(first, min(first + BATCH, count))])


def raw_insert_batches(raw: RawQueue, count: int) -> None:
    """Queue ``count`` raw jobs with ``executemany``, BATCH at a time."""
    for first in range(0, count, BATCH):
        raw.insert_many(range(first, min(first + BATCH, count)))


def done_rate(expected: int) -> float:
    """Jobs/s from the first claim to the last finish, after checking every job is done."""
    done = Job.objects.filter(status=Status.DONE)
    if done.count() != expected or Job.objects.count() != expected:
        statuses = dict(Job.objects.values_list("status").annotate(n=Count("id")).order_by())
        raise WorkloadFailed(f"expected {expected} done jobs; the jobs by status: {statuses}")
    span = done.aggregate(first=Min("started_at"), last=Max("ended_at"))
    return rate(expected, (span["last"] - span["first"]).total_seconds())


def run_worker_here(concurrency: int) -> None:
    """``Worker(burst=True).run()`` in this process.

    The worker installs SIGINT/SIGTERM handlers in the main thread; they are put back
    afterwards so that Ctrl-C still stops the benchmark.
    """
    saved = {signum: signal.getsignal(signum) for signum in (signal.SIGINT, signal.SIGTERM)}
    worker = Worker(WorkerOptions(concurrency=concurrency, burst=True))
    try:
        worker.run()
    finally:
        for signum, handler in saved.items():
            signal.signal(signum, handler)
    if worker.crashed:
        raise WorkloadFailed("a worker thread crashed")


def start_worker(*options: str) -> subprocess.Popen:
    """``manage.py runjobs -v 0 OPTIONS`` (as ``python -m django``) on the bench settings.

    ``-v 0``: the line per job a worker logs by default is not what is measured. Its output goes
    to a temporary file, shown if it fails.
    """
    env = {**os.environ, "DJANGO_SETTINGS_MODULE": "bench.settings", "PYTHONPATH": str(REPO_ROOT)}
    log = tempfile.TemporaryFile()
    command = [sys.executable, "-m", "django", "runjobs", "-v", "0", *options]
    process = subprocess.Popen(command, cwd=REPO_ROOT, env=env, stdout=log, stderr=subprocess.STDOUT)
    process.log = log
    return process


def wait_worker(process: subprocess.Popen, timeout: float) -> None:
    """Wait for a worker process to exit; a non-zero exit fails the workload with its output."""
    try:
        returncode = process.wait(timeout)
    except subprocess.TimeoutExpired:
        process.kill()
        process.wait()
        returncode = f"killed after {timeout:g} s"
    process.log.seek(0)
    output = process.log.read().decode(errors="replace").strip()
    process.log.close()
    if returncode not in (0, -signal.SIGTERM):
        raise WorkloadFailed(f"runjobs exited with {returncode}: {output[-2000:]}")


@contextmanager
def idle_worker(*options: str) -> Iterator[subprocess.Popen]:
    """A long-running ``runjobs`` process, stopped with SIGTERM at the end."""
    process = start_worker(*options)
    try:
        yield process
    finally:
        process.send_signal(signal.SIGTERM)
        wait_worker(process, timeout=60)


def wait_until(condition: Callable[[], object], timeout: float, what: str, every: float = 0.005):
    """Poll ``condition`` until it returns something true, which is returned."""
    deadline = time.monotonic() + timeout
    while not (value := condition()):
        if time.monotonic() > deadline:
            raise WorkloadFailed(f"{what} did not happen within {timeout:g} s")
        time.sleep(every)
    return value


# Workloads -------------------------------------------------------------------------------------


def enqueue_one_by_one(bench: Bench) -> list[Figure]:
    """``enqueue()`` called once per job (1-step kind) against single autocommit INSERTs."""
    count = bench.sizes.enqueue
    bench.reset()
    raw = rate(count, timed(lambda: [bench.raw.insert_one(n) for n in range(count)]))
    ours = rate(count, timed(lambda: [enqueue("bench_noop1", subject={"n": n}) for n in range(count)]))
    if Job.objects.count() != count:
        raise WorkloadFailed(f"expected {count} jobs, found {Job.objects.count()}")
    return [Figure("enqueue", "enqueue, one call per job (1-step)", ours, "jobs/s", raw)]


def processing(bench: Bench) -> list[Figure]:
    """Queued no-op jobs run to done: 1 worker at concurrency 1 and 4, and 2 worker processes
    (at concurrency 1 each, compared with the 1 worker at concurrency 1 as well).

    The ceiling is the raw queue's claim-and-finish loop on one connection in one process, with
    as many checkpoints per job as the jobs have steps (the raw durable loop). What one step
    costs is the difference between 5-step and 0-step jobs, per step, beside the same for raw.
    """
    figures = []
    per_job: dict[int, tuple[float, float]] = {}  # steps -> seconds per job, ours and raw
    for kind, steps in KINDS:
        raw = raw_processing(bench, steps)
        one = run_queued(bench, kind, concurrency=1)
        four = run_queued(bench, kind, concurrency=4)
        two = run_queued(bench, kind, processes=2)
        per_job[steps] = (1 / one, 1 / raw)
        what = f"process {steps}-step jobs"
        note = "raw: a checkpoint INSERT per step" if steps else ""
        figures += [
            Figure(f"process_{steps}_c1", f"{what}, 1 worker, concurrency 1", one, "jobs/s", raw, note=note),
            Figure(f"process_{steps}_c4", f"{what}, 1 worker, concurrency 4", four, "jobs/s", raw, note=note),
            Figure(
                f"process_{steps}_2p",
                f"{what}, 2 worker processes",
                two,
                "jobs/s",
                raw,
                two / one,
                "1 process",
            ),
        ]
    (ours_5, raw_5), (ours_0, raw_0) = per_job[5], per_job[0]
    step_ms, raw_step_ms = (ours_5 - ours_0) / 5 * 1000, (raw_5 - raw_0) / 5 * 1000
    figures.append(
        Figure("step_cost", "cost of one step, 1 worker, concurrency 1", step_ms, "ms", raw_step_ms)
    )
    return figures


def raw_processing(bench: Bench, steps: int) -> float:
    """The raw queue's jobs/s, each job with ``steps`` checkpoints."""
    count = bench.sizes.process
    bench.reset()
    raw_insert_batches(bench.raw, count)
    bench.analyze()
    start = time.perf_counter()
    ran = bench.raw.process_all(steps)
    seconds = time.perf_counter() - start
    if ran != count:
        raise WorkloadFailed(f"the raw queue ran {ran} of {count} jobs")
    return rate(ran, seconds)


def run_queued(bench: Bench, kind: str, concurrency: int = 1, processes: int = 0) -> float:
    """Queue ``bench.sizes.process`` jobs of ``kind`` and run them; jobs/s.

    ``processes=0`` runs one in-process worker at ``concurrency``; otherwise that many
    ``runjobs --burst`` processes run side by side.
    """
    bench.reset()
    enqueue_batches(kind, bench.sizes.process)
    bench.analyze()
    if processes:
        workers = [start_worker("--burst", "--concurrency", str(concurrency)) for _ in range(processes)]
        for worker in workers:
            wait_worker(worker, timeout=1800)
    else:
        run_worker_here(concurrency)
    return done_rate(bench.sizes.process)


def wake_up(bench: Bench) -> list[Figure]:
    """How long a job waits for an idle worker: from the ``enqueue()`` call to its ``started_at``
    (the moment its claim began).

    PostgreSQL wakes the worker with ``NOTIFY``, SQLite with the file's change counter (the poll
    interval is 5 s, so a missed wake-up shows); PostgreSQL's ceiling is the raw queue's own
    wake-up: an ``INSERT`` that sends ``pg_notify`` in the same statement, heard by a listening
    connection that then claims the row. The bare ``NOTIFY`` round trip is in the note. MariaDB's
    worker polls, every 0.05 s here, and there is no ceiling to compare with.
    """
    notify = connection.vendor == "postgresql"
    woken = notify or connection.vendor == "sqlite"
    bench.reset()
    latencies = []
    rng = random.Random(7)  # gaps that do not fall into step with a poll interval
    with idle_worker("--poll-interval", "5" if woken else "0.05"):
        for sample in range(bench.sizes.wakeups + 1):  # the first one only shows the worker is up
            time.sleep(rng.uniform(0.02, 0.12))
            start = time.time()
            job, _ = enqueue("bench_noop0")
            finished = Job.objects.filter(pk=job.pk, status=Status.DONE).values_list("started_at", flat=True)
            patience = 60 if sample == 0 else 15
            started_at = wait_until(finished.first, timeout=patience, what=f"job {job.pk} done")
            if sample:
                latencies.append((started_at.timestamp() - start) * 1000)
    raw = raw_wake_ups(bench, bench.sizes.wakeups) if notify else None
    bare = raw_wake_ups(bench, bench.sizes.wakeups, claim=False) if notify else None
    figures = []
    for p in (50, 95):
        ceiling = percentile(raw, p) if raw else None
        if bare:
            note = f"raw: INSERT with pg_notify, heard, claimed (NOTIFY alone {percentile(bare, p):.2f} ms)"
        else:
            note = (
                "woken by PRAGMA data_version, polls every 5 s"
                if woken
                else "no NOTIFY here: polls every 0.05 s"
            )
        label = f"wake-up latency of an idle worker, p{p} of {len(latencies)}"
        figures.append(Figure(f"wakeup_p{p}", label, percentile(latencies, p), "ms", ceiling, note=note))
    return figures


def raw_wake_ups(bench: Bench, samples: int, claim: bool = True) -> list[float]:
    """Milliseconds from sending a wake-up to a listening thread starting the job, ``samples`` times.

    With ``claim``, the wake-up is the raw queue's: one ``INSERT`` that also sends ``pg_notify``,
    and the listener claims the job (the latency ends where its claim begins, as ``started_at``
    does). Without, it is a bare ``NOTIFY`` held by the listener.
    """
    import psycopg

    received: Queue[float] = Queue()
    listening = threading.Event()
    bench.raw.clear()

    def listen() -> None:
        with psycopg.connect(**postgres_params(bench.target), autocommit=True) as conn:
            conn.execute("LISTEN bench_raw")
            listening.set()
            while True:
                # The claim goes after the loop: notifies() holds the connection while it runs.
                payload = next(iter(conn.notifies(stop_after=1))).payload
                heard = time.perf_counter()
                if payload == "stop":
                    return
                if claim and conn.execute(PostgresRawQueue.claim_sql).fetchone() is None:
                    raise WorkloadFailed("the raw queue was woken but found no job")
                received.put(heard)

    listener = threading.Thread(target=listen, daemon=True)
    listener.start()
    listening.wait(10)
    rng = random.Random(7)
    trips = []
    send = (
        f"WITH job AS ({bench.raw.insert_sql} RETURNING id) SELECT pg_notify('bench_raw', id::text) FROM job"
        if claim
        else "NOTIFY bench_raw, 'job'"
    )
    with psycopg.connect(**postgres_params(bench.target), autocommit=True) as sender:
        for sample in range(samples + 1):  # the first one warms up
            time.sleep(rng.uniform(0.02, 0.12))
            start = time.perf_counter()
            sender.execute(send, (bench.raw.payload(sample),) if claim else ())
            trip = (received.get(timeout=10) - start) * 1000
            if sample:
                trips.append(trip)
        sender.execute("NOTIFY bench_raw, 'stop'")
    listener.join(10)
    return trips


def claim_cost(bench: Bench) -> list[Figure]:
    """Median time of one claim with nothing but the job in the table, then with many done jobs,
    then with a backlog of queued jobs too.

    A due-job index that leads with the status keeps the claim from reading finished rows, and
    read in claim order it stops at the first job it can take, however many are queued behind
    it; this shows whether it does. The backlog is due, in the same queue and of the same kind,
    queued after the job (so it is taken first each time); the job is put back after each claim,
    outside the timing.
    """
    sizes = bench.sizes
    bench.reset()
    job, _ = enqueue("bench_noop0")
    bench.raw.insert_one(0)
    bench.analyze()  # every table state is measured with fresh statistics
    empty, raw_empty = median_claim(job, sizes.claims), median_raw_claim(bench.raw, sizes.claims)
    add_finished_jobs(sizes.finished)
    bench.raw.add_jobs(sizes.finished, "done")
    bench.analyze()
    full, raw_full = median_claim(job, sizes.claims), median_raw_claim(bench.raw, sizes.claims)
    add_jobs(sizes.backlog, status=Status.QUEUED, next_run_at=timezone.now())
    bench.raw.add_jobs(sizes.backlog, "queued")
    bench.analyze()
    backlog, raw_backlog = median_claim(job, sizes.claims), median_raw_claim(bench.raw, sizes.claims)
    return [
        Figure("claim_empty", "claim one job, empty table", empty, "ms", raw_empty, note="median"),
        Figure(
            "claim_finished",
            f"claim one job, {sizes.finished:,} done jobs in the table",
            full,
            "ms",
            raw_full,
            full / empty,
            "the empty table",
            note="median",
        ),
        Figure(
            "claim_backlog",
            f"claim one job, {sizes.backlog:,} queued behind it and {sizes.finished:,} done",
            backlog,
            "ms",
            raw_backlog,
            backlog / empty,
            "the empty table",
            note="median",
        ),
    ]


def median_claim(job: Job, repeats: int) -> float:
    """Median milliseconds of ``store.claim()`` finding ``job``, after a few untimed claims."""
    worker_id = store.new_worker_id("bench")
    queued = Job.objects.filter(pk=job.pk)
    times = []
    for attempt in range(repeats + 5):
        queued.update(status=Status.QUEUED, locked_by="", locked_at=None, lease_token="", started_at=None)
        start = time.perf_counter()
        lease = store.claim(worker_id)
        took = time.perf_counter() - start
        if lease is None or lease.job.pk != job.pk:
            raise WorkloadFailed(f"claim() did not find job {job.pk}")
        if attempt >= 5:
            times.append(took * 1000)
    return statistics.median(times)


def median_raw_claim(raw: RawQueue, repeats: int) -> float:
    for _ in range(5):
        raw.time_claim()
    return statistics.median(raw.time_claim() * 1000 for _ in range(repeats))


def add_finished_jobs(count: int) -> None:
    """Add ``count`` done jobs with one ``INSERT … SELECT``."""
    now = timezone.now()
    add_jobs(count, status=Status.DONE, attempt=1, progress=100, started_at=now, ended_at=now)


def worker_memory(bench: Bench) -> list[Figure]:
    """RSS of one ``runjobs --burst`` process over many 0-step jobs: after warm-up and at the end.

    Sampled from ``/proc/<pid>/status`` (VmRSS) together with the number of jobs done; warm-up
    is the first sample with a tenth of the jobs done.
    """
    count = bench.sizes.rss_jobs
    bench.reset()
    enqueue_batches("bench_noop0", count)
    bench.analyze()
    done = Job.objects.filter(status=Status.DONE)
    samples = []  # (jobs done, RSS in kB)
    worker = start_worker("--burst")
    while worker.poll() is None:
        rss = resident_kb(worker.pid)
        if rss is None:
            break
        samples.append((done.count(), rss))
        time.sleep(bench.sizes.rss_every)
    wait_worker(worker, timeout=60)
    done_rate(count)  # every job done, exactly once
    warm = next((rss for jobs, rss in samples if jobs >= count / 10), None)
    if warm is None:
        raise WorkloadFailed(f"no RSS sample after warm-up ({len(samples)} samples)")
    end = samples[-1][1]
    note = f"warm-up at {count // 10:,} jobs; {len(samples)} samples"
    return [
        Figure("rss_warm", f"worker RSS after warm-up ({count // 10:,} jobs)", warm / 1024, "MB", note=note),
        Figure(
            "rss_end",
            f"worker RSS after {count:,} jobs",
            end / 1024,
            "MB",
            versus=end / warm,
            versus_what="after warm-up",
            note=f"growth {(end / warm - 1) * 100:+.1f} %",
        ),
    ]


def resident_kb(pid: int) -> int | None:
    """VmRSS of a live process in kB; None once it has exited."""
    try:
        with open(f"/proc/{pid}/status") as status:
            for line in status:
                if line.startswith("VmRSS:"):
                    return int(line.split()[1])
    except (FileNotFoundError, ProcessLookupError):
        return None
    return None  # a zombie has no VmRSS


WORKLOADS = (
    enqueue_one_by_one,
    enqueue_in_bulk,
    processing,
    wake_up,
    claim_cost,
    fair_shares,
    worker_memory,
    redaction,
    admin_at_scale,
    children,
    prune_at_scale,
    kinds,
    fleet,
    timed_waits,
)
#: Run only when named (``--workload NAME``): minutes of many processes, not a smoke run's seconds.
WHEN_NAMED = (fleet,)
