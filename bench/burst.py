"""One worker over a long burst (issue 27's flat costs): its memory and its rate as the job table
fills with done jobs.

A ``runjobs --burst`` process works through ``rss_jobs`` 0-step jobs queued beforehand. Its RSS is
sampled from ``/proc/<pid>/status``; its rate over a tenth of the jobs is taken from their own
timestamps afterwards, so nothing the sampler does is counted in it, except its load on the
database.
"""

from __future__ import annotations

import time

from django.db.models import Max, Min

from bench.harness import Bench, WorkloadFailed, done_rate, enqueue_batches, rate, start_worker, wait_worker
from bench.report import Figure
from django_durajobs import Job, Status
from django_durajobs.indexes import CLAIM_ORDER


def worker_memory(bench: Bench) -> list[Figure]:
    """RSS of one ``runjobs --burst`` process over many 0-step jobs: after warm-up and at the end;
    and its rate over the burst's last tenth against its second tenth (flat costs: 1×).

    Sampled from ``/proc/<pid>/status`` (VmRSS) together with how far the burst has come; warm-up
    is the first sample with a tenth of the jobs done. How far is read from the next job in claim
    order, one index seek: a count of the done jobs at every sample read them all, and on
    PostgreSQL took both cores from the worker it measured as they grew.
    """
    count = bench.sizes.rss_jobs
    bench.reset()
    enqueue_batches("bench_noop0", count)
    bench.analyze()
    first_id = Job.objects.order_by("id").values_list("id", flat=True).first()
    samples = []  # (jobs done or running, RSS in kB)
    worker = start_worker("--burst")
    while worker.poll() is None:
        rss = resident_kb(worker.pid)
        if rss is None:
            break
        samples.append((jobs_reached(first_id, count), rss))
        time.sleep(bench.sizes.rss_every)
    wait_worker(worker, timeout=60)
    done_rate(count)  # every job done, exactly once
    warm = next((rss for jobs, rss in samples if jobs >= count / 10), None)
    if warm is None:
        raise WorkloadFailed(f"no RSS sample after warm-up ({len(samples)} samples)")
    end = samples[-1][1]
    note = f"warm-up at {count // 10:,} jobs; {len(samples)} samples"
    second, last = (tenth_rate(first_id, count, tenth) for tenth in (1, 9))
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
        Figure(
            "burst_rate_end",
            f"one worker's rate over the last tenth of a burst of {count:,}",
            last,
            "jobs/s",
            versus=last / second,
            versus_what="over its second tenth",
            note=f"{second:,.0f} jobs/s over the second tenth",
        ),
    ]


def jobs_reached(first_id: int, count: int) -> int:
    """How many of the burst's jobs, queued in claim order from ``first_id``, a worker has taken."""
    due = Job.objects.filter(status=Status.QUEUED).order_by(*CLAIM_ORDER)
    next_id = due.values_list("id", flat=True).first()
    return count if next_id is None else next_id - first_id


def tenth_rate(first_id: int, count: int, tenth: int) -> float:
    """Jobs/s over one tenth of the burst's jobs, from its first start to its last end."""
    size = count // 10
    start = first_id + tenth * size
    span = Job.objects.filter(id__gte=start, id__lt=start + size).aggregate(
        first=Min("started_at"), last=Max("ended_at")
    )
    return rate(size, (span["last"] - span["first"]).total_seconds())


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
