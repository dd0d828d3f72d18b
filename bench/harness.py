"""What every workload shares: the sizes of a run, the database and raw queue it runs on, and the
ways to time work, run a worker here or in a process of its own, and wait for what it does.

The workloads (``bench/workloads.py`` lists them) import these at the top; this module imports
no workload.
"""

from __future__ import annotations

import math
import os
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

from django.apps import apps
from django.core.management.color import no_style
from django.db import connection
from django.db.models import Count, Max, Min

from bench.database import Target
from bench.rawqueue import STEPS_TABLE, TABLE, RawQueue, open_raw_queue
from django_durajobs import Job, Status, enqueue_many
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
