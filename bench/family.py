"""A parent and its children: what one child's settle costs as the family grows.

A parent waits for its children (``ctx.wait_for_children()``); each child that settles checks
whether it was the last one open, and the last wakes the parent. The workload times each child's
run and settle (``execute()`` of its claim, the finish and the check included) in a small family
and in a large one (50 and 500 children in a quick run, 100 and 10,000 in a full one): the
check should cost as much among 10,000 siblings as among 100.
"""

from __future__ import annotations

import statistics
import time

from bench.report import Figure
from django_durajobs import Job, Status, enqueue, enqueue_many, store
from django_durajobs.engine.runner import execute

BATCH = 1000  # children per enqueue_many


def children(bench) -> list[Figure]:
    small, large = bench.sizes.children_small, bench.sizes.children_large
    small_ms = _settle_ms(bench, small)
    large_ms = _settle_ms(bench, large)
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


def _settle_ms(bench, count: int) -> float:
    """The median milliseconds of one child's run and settle, in a family of ``count`` children."""
    from bench.workloads import WorkloadFailed  # it lists this workload

    bench.reset()
    parent, _ = enqueue("bench_parent")
    for first in range(0, count, BATCH):
        specs = [{"parent": parent.pk, "subject": {"n": n}} for n in range(first, min(first + BATCH, count))]
        enqueue_many("bench_noop0", specs)
    bench.analyze()
    worker_id = store.new_worker_id("bench")
    lease = store.claim(worker_id)
    if lease is None or lease.job.pk != parent.pk:
        raise WorkloadFailed("the parent was not claimed first")
    execute(lease)  # it parks, waiting for its children
    times = []
    while (lease := store.claim(worker_id)) is not None and lease.job.pk != parent.pk:
        start = time.perf_counter()
        execute(lease)
        times.append((time.perf_counter() - start) * 1000)
    if lease is None or len(times) != count:
        raise WorkloadFailed(f"the last of {len(times)} children settled without waking the parent")
    execute(lease)
    if Job.objects.filter(status=Status.DONE).count() != count + 1:
        raise WorkloadFailed("not every job of the family is done")
    return statistics.median(times)
