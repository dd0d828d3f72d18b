"""Kinds under a concurrency key, and a schedule firing, against the plain kind.

One in-process worker at concurrency 1 runs 0-step jobs of: the plain kind (``bench_noop0``); a
kind with a concurrency key (``bench_keyed``, limit 1), each job with a key of its own, and with
four keys shared by all its jobs; and a mix of the two (alternating at enqueue) while an interval
schedule of ``bench_scheduled`` fires: due when the worker starts, then every second. Each figure
is its rate as a fraction of the plain kind's (the same sizes, in the same run): the keyed path's
cost, per job, is the inverse. The variants are interleaved over rounds and each
figure is the median of its rounds (three in a full run, one in a quick one), so a busy machine's
swings weigh on all of them alike.
"""

from __future__ import annotations

import statistics
from datetime import timedelta

from django.utils import timezone

from bench.harness import WorkloadFailed, rate, run_worker_here
from bench.report import Figure
from django_durajobs import Job, Status, enqueue_many, store
from django_durajobs.models import Schedule

SHARED_KEYS = 4
BATCH = 1000


def _specs(count: int, keys: int | None) -> list[dict]:
    """Subjects of ``count`` jobs: each its own key (``keys`` None), or one of ``keys`` keys."""
    return [{"subject": {"key": f"k{n if keys is None else n % keys}"}} for n in range(count)]


def _enqueue(kind: str, specs: list[dict]) -> None:
    for first in range(0, len(specs), BATCH):
        enqueue_many(kind, specs[first : first + BATCH])


def _plain(count: int) -> None:
    _enqueue("bench_noop0", [{"subject": {"n": n}} for n in range(count)])


def _own_keys(count: int) -> None:
    _enqueue("bench_keyed", _specs(count, None))


def _shared_keys(count: int) -> None:
    _enqueue("bench_keyed", _specs(count, SHARED_KEYS))


def _mix(count: int) -> None:
    """Half plain, half keyed (each its own key), and a schedule due at once, then every second."""
    half = count // 2
    _enqueue("bench_noop0", [{"subject": {"n": n}} for n in range(half)])
    _enqueue("bench_keyed", _specs(count - half, None))
    store.save_schedule(Schedule(name="bench-every-second", kind="bench_scheduled", every_seconds=1))
    Schedule.objects.filter(name="bench-every-second").update(
        next_run_at=timezone.now() - timedelta(seconds=1)
    )


VARIANTS = {"plain": _plain, "own_keys": _own_keys, "shared_keys": _shared_keys, "mix": _mix}


def _rate(bench, make, count: int) -> float:
    """Jobs/s of one worker at concurrency 1 over the jobs ``make(count)`` queues (and any a schedule
    adds, which must have fired)."""
    bench.reset()
    make(count)
    bench.analyze()
    run_worker_here(1)
    done = Job.objects.filter(status=Status.DONE)
    made = Job.objects.exclude(kind="bench_scheduled")
    if made.count() != count or done.filter(pk__in=made.values("pk")).count() != count:
        raise WorkloadFailed(f"expected {count} done jobs, found {done.count()} of {Job.objects.count()}")
    if make is _mix and not Job.objects.filter(kind="bench_scheduled").exists():
        raise WorkloadFailed("the schedule did not fire")
    span = done.order_by().values_list("started_at", "ended_at")
    first, last = min(start for start, _ in span), max(end for _, end in span)
    return rate(done.count(), (last - first).total_seconds())


def kinds(bench) -> list[Figure]:
    count = bench.sizes.kinds
    rates: dict[str, list[float]] = {name: [] for name in VARIANTS}
    rounds = bench.sizes.kinds_rounds
    for _round in range(rounds):
        for name, make in VARIANTS.items():
            rates[name].append(_rate(bench, make, count))
    plain = statistics.median(rates["plain"])
    labels = {
        "own_keys": "keyed kind, each job its own key",
        "shared_keys": f"keyed kind, {SHARED_KEYS} keys shared",
        "mix": "plain and keyed half each, a schedule firing",
    }
    figures = [Figure("kinds_plain", "plain kind (0-step), 1 worker, concurrency 1", plain, "jobs/s")]
    for name, label in labels.items():
        ours = statistics.median(rates[name])
        figures.append(
            Figure(
                f"kinds_{name}",
                f"{label}, 1 worker, concurrency 1",
                ours,
                "jobs/s",
                versus=ours / plain,
                versus_what="the plain kind",
                note=f"cost per job {plain / ours:.2f}× the plain kind's; median of {rounds}",
            )
        )
    return figures
