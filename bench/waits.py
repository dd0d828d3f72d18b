"""Timed waits: what waking one due job costs as the number of jobs still waiting grows.

A job that waits until a moment (``ctx.wait_external(reason, resume_at=…)``, a question with a
deadline) sits in a waiting status with that moment as its ``next_run_at``; the worker's wake
pass (``store.wake_due_waits()``, every poll interval) queues those whose moment has passed.
The workload fills the table with waiting jobs whose moments are a day away (one
``INSERT … SELECT``: 100 and 100,000 in a full run, 100 and 10,000 in a quick one) and a few
that are due, and times the wake pass that queues the due ones, per woken job: it should cost
as much beside 100,000 waiting jobs as beside 100. The due jobs are put back to waiting after
each pass, outside the timing. It also times the pass that finds nothing due, as most passes do.
The small table is measured before and after the large one, so that a machine that gets busier
or quieter meanwhile weighs on both sizes alike.
"""

from __future__ import annotations

import statistics
import time
from datetime import timedelta

from django.utils import timezone

from bench.harness import WorkloadFailed
from bench.report import Figure
from bench.rows import add_jobs
from django_durajobs import Job, Status, store

DUE = 20  # jobs woken by each pass
PASSES = 20  # timed passes at each size, after one untimed


def timed_waits(bench) -> list[Figure]:
    small, large = bench.sizes.waiting
    smalls: list[tuple[float, float]] = []
    larges: list[tuple[float, float]] = []
    _wake_passes(bench, small, smalls)
    _wake_passes(bench, large, larges)
    _wake_passes(bench, small, smalls)  # before and after the large table: its drift counts on both
    small_ms, small_idle = (statistics.median(times) for times in zip(*smalls, strict=True))
    large_ms, large_idle = (statistics.median(times) for times in zip(*larges, strict=True))
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
        Figure(
            "wake_idle_small", f"wake pass, nothing due, {small:,} waiting", small_idle, "ms", note="median"
        ),
        Figure(
            "wake_idle_large",
            f"wake pass, nothing due, {large:,} waiting",
            large_idle,
            "ms",
            versus=large_idle / small_idle,
            versus_what=f"{small:,} waiting",
            note="median",
        ),
    ]


def _wake_passes(bench, waiting: int, times: list[tuple[float, float]]) -> None:
    """Beside ``waiting`` jobs not due, add to ``times`` the milliseconds of ``PASSES`` wake passes
    over ``DUE`` due jobs, per job, each with those of a pass that finds none."""
    bench.reset()
    now = timezone.now()
    add_jobs(
        waiting, status=Status.AWAITING_EXTERNAL, wait_reason="Later", next_run_at=now + timedelta(days=1)
    )
    add_jobs(DUE, status=Status.AWAITING_EXTERNAL, wait_reason="Now", next_run_at=now - timedelta(minutes=1))
    bench.analyze()
    due = Job.objects.filter(pk__in=list(Job.objects.filter(wait_reason="Now").values_list("pk", flat=True)))
    for number in range(PASSES + 1):
        due.update(status=Status.AWAITING_EXTERNAL, wait_reason="Now", next_run_at=now - timedelta(minutes=1))
        start = time.perf_counter()
        woken = store.wake_due_waits()
        took = time.perf_counter() - start
        if woken != DUE:
            raise WorkloadFailed(f"the wake pass woke {woken} jobs, not the {DUE} due")
        start = time.perf_counter()
        woken = store.wake_due_waits()
        idle_took = time.perf_counter() - start
        if woken:
            raise WorkloadFailed(f"a wake pass with nothing due woke {woken} jobs")
        if number:
            times.append((took * 1000 / DUE, idle_took * 1000))
