"""Timed waits: what waking one due job costs as the number of jobs still waiting grows.

A job that waits until a moment (``ctx.wait_external(reason, resume_at=…)``, a question with a
deadline) sits in a waiting status with that moment as its ``next_run_at``; the worker's wake
pass (``store.wake_due_waits()``, every poll interval) queues those whose moment has passed.
The workload fills the table with waiting jobs whose moments are a day away (one
``INSERT … SELECT``: 100 and 100,000 in a full run, 100 and 10,000 in a quick one) and a few
that are due, and times the wake pass that queues the due ones, per woken job: it should cost
as much beside 100,000 waiting jobs as beside 100. The due jobs are put back to waiting after
each pass, outside the timing.
"""

from __future__ import annotations

import statistics
import time
from datetime import timedelta

from django.utils import timezone

from bench.report import Figure
from bench.rows import add_jobs
from django_durajobs import Job, Status, store

DUE = 20  # jobs woken by each pass
PASSES = 15  # timed passes at each size, after one untimed


def timed_waits(bench) -> list[Figure]:
    small, large = bench.sizes.waiting
    small_ms = _per_woken_job(bench, small)
    large_ms = _per_woken_job(bench, large)
    return [
        Figure(
            "wake_small", f"wake a due timed wait, {small:,} waiting", small_ms, "ms", note="median, per job"
        ),
        Figure(
            "wake_large",
            f"wake a due timed wait, {large:,} waiting",
            large_ms,
            "ms",
            versus=large_ms / small_ms,
            versus_what=f"{small:,} waiting",
            note="median, per job",
        ),
    ]


def _per_woken_job(bench, waiting: int) -> float:
    """The median milliseconds of a wake pass over ``DUE`` due jobs beside ``waiting`` not due, per job."""
    from bench.workloads import WorkloadFailed  # it lists this workload

    bench.reset()
    now = timezone.now()
    add_jobs(
        waiting, status=Status.AWAITING_EXTERNAL, wait_reason="Later", next_run_at=now + timedelta(days=1)
    )
    add_jobs(DUE, status=Status.AWAITING_EXTERNAL, wait_reason="Now", next_run_at=now - timedelta(minutes=1))
    bench.analyze()
    due = Job.objects.filter(pk__in=list(Job.objects.filter(wait_reason="Now").values_list("pk", flat=True)))
    times = []
    for number in range(PASSES + 1):
        due.update(status=Status.AWAITING_EXTERNAL, wait_reason="Now", next_run_at=now - timedelta(minutes=1))
        start = time.perf_counter()
        woken = store.wake_due_waits()
        took = time.perf_counter() - start
        if woken != DUE:
            raise WorkloadFailed(f"the wake pass woke {woken} jobs, not the {DUE} due")
        if number:
            times.append(took * 1000 / DUE)
    return statistics.median(times)
