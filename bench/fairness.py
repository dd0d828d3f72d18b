"""Fair shares: what turns among tenants cost a claim, and what they buy.

One tenant has a backlog (10,000 jobs in a full run) and nine tenants have 10 due jobs each,
enqueued after it. With ``@job(fairness_key=…)`` claims take turns among the tenants; without,
they go by time, so the nine wait behind the whole backlog. Figures: the median claim with and
without fair shares over the same table, and how many claims it takes until the nine tenants'
90 jobs are done.
"""

from __future__ import annotations

import statistics
import time

from bench.report import Figure
from django_durajobs import Job, enqueue_many, store
from django_durajobs.engine.runner import execute

SMALL_TENANTS = 9
EACH = 10
TIMED = 200  # claims timed per kind


def fair_shares(bench) -> list[Figure]:
    backlog = bench.sizes.bulk // 10
    fair_ms, turns = _claims("bench_fair", bench, backlog)
    plain_ms, plain_turns = _claims("bench_unfair", bench, backlog)
    small = SMALL_TENANTS * EACH
    return [
        Figure(
            "fair_claim",
            f"claim one job, fair shares, 10 tenants, {backlog:,} backlog",
            fair_ms,
            "ms",
            versus=fair_ms / plain_ms,
            versus_what="the same claim without fair shares",
            note="median",
        ),
        Figure(
            "fair_turns",
            f"claims until 9 small tenants' {small} jobs are done",
            turns,
            "claims",
            versus=turns / plain_turns,
            versus_what=f"without fair shares ({plain_turns:,} claims)",
        ),
    ]


def _claims(kind: str, bench, backlog: int) -> tuple[float, int]:
    """The median claim (ms) over the first TIMED claims, and how many claims ran until the small
    tenants' jobs were done (without fair shares: their place in the claim order)."""
    bench.reset()
    enqueue_many(kind, [{"subject": {"tenant": "big"}} for _ in range(backlog)])
    small = [{"subject": {"tenant": f"t{number}"}} for number in range(SMALL_TENANTS) for _ in range(EACH)]
    enqueue_many(kind, small)
    bench.analyze()
    worker_id = store.new_worker_id("bench")
    times, claims, small_done = [], 0, 0
    while small_done < len(small) and claims < TIMED + len(small) * 2:
        start = time.perf_counter()
        lease = store.claim(worker_id)
        times.append((time.perf_counter() - start) * 1000)
        if lease is None:
            break
        claims += 1
        small_done += lease.job.subject["tenant"] != "big"
        execute(lease)
    if small_done < len(small):  # in claim order, behind the backlog
        claims = backlog + len(small)
    Job.objects.all().delete()
    return statistics.median(times[:TIMED]), claims
