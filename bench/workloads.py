"""The workloads: each does the same work through django-durajobs and through the raw queue.

Every workload starts from empty tables and returns its figures. Rates of processing are taken
from the jobs' own timestamps (first ``started_at`` to last ``ended_at``), so the start-up of a
worker process and the end of a burst are not counted; the raw queue is timed around its loop.
"""

from __future__ import annotations

import random
import statistics
import threading
import time
from datetime import datetime, timedelta
from queue import Queue

from django.db import connection
from django.utils import timezone

from bench.bulk import enqueue_in_bulk
from bench.burst import worker_memory
from bench.database import postgres_params
from bench.fairness import fair_shares
from bench.family import children
from bench.fleet import fleet
from bench.harness import (
    KINDS,
    Bench,
    WorkloadFailed,
    done_rate,
    enqueue_batches,
    idle_worker,
    percentile,
    rate,
    raw_insert_batches,
    run_worker_here,
    start_worker,
    timed,
    wait_until,
    wait_worker,
)
from bench.kinds import kinds
from bench.pruning import prune_at_scale
from bench.rawqueue import PostgresRawQueue, RawQueue
from bench.redaction import redaction
from bench.report import Figure
from bench.rows import add_jobs
from bench.scale_admin import admin_at_scale
from bench.waits import timed_waits
from django_durajobs import Job, Status, enqueue, store
from django_durajobs.store.claiming import ClaimRequest
from django_durajobs.store.holding import current_limits
from django_durajobs.store.limiting import claim_limited


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
    then with a backlog of queued jobs too (and of the claim under limits, with that backlog due
    before its job), then with as many due before it that a full concurrency key holds back, then
    of a worker of the job's queue with as many of another queue due before it.

    A due-job index that leads with the status keeps the claim from reading finished rows, and
    read in claim order it stops at the first job it can take, however many are queued behind
    it; this shows whether it does. The backlog is due, in the same queue and of the same kind,
    queued after the job (so it is taken first each time); the job is put back after each claim,
    outside the timing.
    """
    sizes = bench.sizes
    bench.reset()
    job, _ = enqueue("bench_noop0")
    free, _ = enqueue("bench_keyed", subject={"key": "free"})
    Job.objects.filter(pk=free.pk).update(status=Status.DONE)
    bench.raw.insert_one(0)
    bench.analyze()  # every table state is measured with fresh statistics
    empty, raw_empty = median_claim(job, sizes.claims), median_raw_claim(bench.raw, sizes.claims)
    limited_empty = median_limited_claim(free, sizes.claims)
    add_finished_jobs(sizes.finished)
    bench.raw.add_jobs(sizes.finished, "done")
    bench.analyze()
    full, raw_full = median_claim(job, sizes.claims), median_raw_claim(bench.raw, sizes.claims)
    add_jobs(sizes.backlog, status=Status.QUEUED, next_run_at=timezone.now())
    bench.raw.add_jobs(sizes.backlog, "queued")
    bench.analyze()
    backlog, raw_backlog = median_claim(job, sizes.claims), median_raw_claim(bench.raw, sizes.claims)
    behind_plain = Job.objects.filter(pk=free.pk)
    behind_plain.update(next_run_at=timezone.now())  # behind the backlog, of a kind without limits
    limited_past_plain = median_limited_claim(free, sizes.claims)
    behind_plain.update(next_run_at=free.next_run_at)
    ahead = job.next_run_at - timedelta(minutes=1)
    add_held_back_jobs(FEW_HELD_BACK, ahead)
    bench.analyze()
    limited_past_few = median_limited_claim(free, sizes.claims)
    add_held_back_jobs(sizes.backlog - FEW_HELD_BACK, ahead, running=False)
    bench.analyze()
    past_held_back = median_claim(job, sizes.claims)
    limited_past_held_back = median_limited_claim(free, sizes.claims)
    add_jobs(sizes.backlog, status=Status.QUEUED, next_run_at=ahead, queue=OTHER_QUEUE)
    bench.analyze()
    own_queue = median_claim(job, sizes.claims, queues=[job.queue])
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
        Figure(
            "claim_limited_past_plain",
            f"the claim under limits: a job of a free key, {sizes.backlog:,} without limits due before it",
            limited_past_plain,
            "ms",
            None,
            limited_past_plain / limited_empty,
            "the same claim, empty table",
            note="median",
        ),
        Figure(
            "claim_past_held_back",
            f"claim one job, {sizes.backlog:,} of a full concurrency key due before it",
            past_held_back,
            "ms",
            None,
            past_held_back / empty,
            "the empty table",
            note="median",
        ),
        Figure(
            "claim_limited_past_held_back",
            f"the claim under limits: a job of a free key, {sizes.backlog:,} of a full key due before it",
            limited_past_held_back,
            "ms",
            None,
            limited_past_held_back / limited_past_few,
            f"the same claim behind {FEW_HELD_BACK:,}",
            note="median",
        ),
        Figure(
            "claim_own_queue",
            f"claim one job of its queue (runjobs --queue), {sizes.backlog:,} of another queue due before it",
            own_queue,
            "ms",
            None,
            own_queue / empty,
            "the empty table",
            note="median",
        ),
    ]


#: A queue whose due jobs come before the claimed job's in claim order (``claim_own_queue``).
OTHER_QUEUE = "bench-other"
#: The queue of the jobs a full concurrency key holds back (``claim_past_held_back``): not the
#: claimed job's, so that a worker of that queue does not read past them.
HELD_QUEUE = "bench-held"


#: The jobs of the full key (``add_held_back_jobs``), enqueued under limits as ``enqueue()`` would.
HELD_BACK = {"kind": "bench_keyed", "concurrency_key": "held", "under_limits": True, "queue": HELD_QUEUE}
#: How many held-back jobs the claim under limits is first measured behind: more than the first
#: jobs it reads in claim order (``limited_pick.WINDOW``), so that it reads the lanes.
FEW_HELD_BACK = 1000


def add_held_back_jobs(count: int, due: datetime, *, running: bool = True) -> None:
    """``count`` jobs of one concurrency key due at ``due``, and (``running``) one more of it held
    by a worker, which holds them back."""
    now = timezone.now()
    if running:
        add_jobs(
            1, status=Status.RUNNING, started_at=now, locked_by="bench-elsewhere", locked_at=now, **HELD_BACK
        )
    add_jobs(count, status=Status.QUEUED, next_run_at=due, **HELD_BACK)


def median_claim(job: Job, repeats: int, queues: list[str] | None = None) -> float:
    """Median milliseconds of ``store.claim()`` (of ``queues``) finding ``job``, after a few
    untimed claims."""
    worker_id = store.new_worker_id("bench")
    queued = Job.objects.filter(pk=job.pk)
    times = []
    for attempt in range(repeats + 5):
        queued.update(status=Status.QUEUED, locked_by="", locked_at=None, lease_token="", started_at=None)
        start = time.perf_counter()
        lease = store.claim(worker_id, queues=queues)
        took = time.perf_counter() - start
        if lease is None or lease.job.pk != job.pk:
            raise WorkloadFailed(f"claim() did not find job {job.pk}")
        if attempt >= 5:
            times.append(took * 1000)
    return statistics.median(times)


def median_limited_claim(keyed: Job, repeats: int) -> float:
    """Median milliseconds of the claim under limits finding ``keyed``, a job under a key of its
    own (``limiting.claim_limited``: a worker makes it once a second, and at every claim while it
    finds such jobs), after a few untimed ones."""
    limits = current_limits()
    request = ClaimRequest(store.new_worker_id("bench"), "bench-token")
    queued = Job.objects.filter(pk=keyed.pk)
    times = []
    for attempt in range(repeats + 5):
        queued.update(status=Status.QUEUED, locked_by="", locked_at=None, lease_token="", started_at=None)
        start = time.perf_counter()
        found = claim_limited(connection, Status.QUEUED, request, limits) if limits else None
        took = time.perf_counter() - start
        if found is None or found.pk != keyed.pk:
            raise WorkloadFailed(f"the claim under limits did not find job {keyed.pk}")
        if attempt >= 5:
            times.append(took * 1000)
    queued.update(status=Status.DONE, locked_by="", lease_token="")
    return statistics.median(times)


def median_raw_claim(raw: RawQueue, repeats: int) -> float:
    for _ in range(5):
        raw.time_claim()
    return statistics.median(raw.time_claim() * 1000 for _ in range(repeats))


def add_finished_jobs(count: int) -> None:
    """Add ``count`` done jobs with one ``INSERT … SELECT``."""
    now = timezone.now()
    add_jobs(count, status=Status.DONE, attempt=1, progress=100, started_at=now, ended_at=now)


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
