"""A parent and its children: what one child's settle costs as the family grows.

A parent waits for its children (``ctx.wait_for_children()``); each child that settles checks
whether it was the last one open, and the last wakes the parent. The workload times each child's
run and settle (``execute()`` of its claim, the finish and the check included) in a small family
and in a large one (50 and 500 children in a quick run, 100 and 10,000 in a full one): the
check should cost as much among 10,000 siblings as among 100.

Both families are in the table together, each in a queue of its own, and their settles are
interleaved (a small family's child after every hundredth of the large family's), so that a
busy machine's swings and the table's size weigh on both alike.
"""

from __future__ import annotations

import statistics
import time

from bench.harness import WorkloadFailed
from bench.report import Figure
from django_durajobs import Job, Status, enqueue, enqueue_many, store
from django_durajobs.engine.runner import execute

BATCH = 1000  # children per enqueue_many


def children(bench) -> list[Figure]:
    small, large = bench.sizes.children_small, bench.sizes.children_large
    small_ms, large_ms = _settle_ms(bench, small, large)
    return [
        Figure(
            "child_settle_small", f"one child's settle, {small:,} children", small_ms, "ms", note="median"
        ),
        Figure(
            "child_settle_large",
            f"one child's settle, {large:,} children",
            large_ms,
            "ms",
            versus=large_ms / small_ms,
            versus_what=f"{small:,} children",
            note="median",
        ),
    ]


def _family(count: int, queue: str) -> Job:
    """A parent waiting for ``count`` children queued in ``queue``."""
    parent, _ = enqueue("bench_parent")
    for first in range(0, count, BATCH):
        specs = [
            {"parent": parent.pk, "queue": queue, "subject": {"n": n}}
            for n in range(first, min(first + BATCH, count))
        ]
        enqueue_many("bench_noop0", specs)
    return parent


def _settle_ms(bench, small: int, large: int) -> tuple[float, float]:
    """The median milliseconds of one child's run and settle in each family."""
    bench.reset()
    parents = [_family(small, "small"), _family(large, "large")]
    bench.analyze()
    worker_id = store.new_worker_id("bench")
    for parent in parents:  # each parks, waiting for its children
        lease = store.claim(worker_id, queues=["default"])
        if lease is None or lease.job.pk != parent.pk:
            raise WorkloadFailed(f"parent {parent.pk} was not claimed first")
        execute(lease)
    times: dict[str, list[float]] = {"small": [], "large": []}
    every = large // small
    for number in range(large + small):
        queue = "small" if number % (every + 1) == every else "large"
        lease = store.claim(worker_id, queues=[queue])
        if lease is None:
            raise WorkloadFailed(f"no child of the {queue} family left to claim")
        start = time.perf_counter()
        execute(lease)
        times[queue].append((time.perf_counter() - start) * 1000)
    woken = Job.objects.filter(pk__in=[parent.pk for parent in parents], status=Status.QUEUED)
    if woken.count() != 2:
        raise WorkloadFailed("a family's last child did not wake its parent")
    return statistics.median(times["small"]), statistics.median(times["large"])
