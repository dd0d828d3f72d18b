"""What the console's dashboard and ``manage.py jobs stats`` count: jobs by status and queue, how
late the oldest due job is, what ended in the last hour, who must decide, what fails; each a few
grouped, indexed queries however many jobs there are."""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import Any

from django.db.models import Count, Min, Q
from django.db.models.functions import TruncMinute

from ..models import Job
from ..status import TERMINAL, WAITING, Status
from ..transitions import DUE_STATUSES, HELD_STATUSES
from .database import database_now
from .workers import SEEN_LATELY, workers_seen

#: The throughput chart's span, a bar a minute.
THROUGHPUT_MINUTES = 60
#: How many of the jobs that need a person, and of the failing kinds, the dashboard names.
NAMED = 10


@dataclass
class QueueCounts:
    """One queue's jobs that have not ended, by what they are doing, and how late its oldest due job is."""

    queue: str
    due: int = 0
    scheduled: int = 0  # queued for later
    running: int = 0
    waiting: int = 0
    lag_seconds: float | None = None  # how long the oldest due job has been due


@dataclass(frozen=True)
class Minute:
    start: datetime
    done: int
    failed: int  # failed, cancelled or reverted


@dataclass
class Overview:
    now: datetime
    by_status: dict[str, int]
    queues: list[QueueCounts]
    oldest_lag_seconds: float | None
    throughput: list[Minute]
    needs_person: list[Job] = field(default_factory=list)
    needs_person_total: int = 0
    failures_by_kind: list[tuple[str, int]] = field(default_factory=list)


def overview() -> Overview:
    """Everything the dashboard shows of the jobs (the workers come from ``workers_seen``)."""
    now = database_now()
    unfinished = Job.objects.exclude(status__in=TERMINAL)
    by_status: Counter[str] = Counter(
        dict(Job.objects.values_list("status").annotate(n=Count("id")).order_by())
    )
    queues: dict[str, QueueCounts] = {}
    rows = unfinished.values_list("queue", "status").annotate(n=Count("id")).order_by()
    for queue, status, number in rows:
        counts = queues.setdefault(queue, QueueCounts(queue))
        if status in HELD_STATUSES:
            counts.running += number
        elif status in WAITING:
            counts.waiting += number
    due = Job.objects.filter(status__in=DUE_STATUSES, locked_by="")
    for queue, number, oldest in (
        due.filter(next_run_at__lte=now)
        .values_list("queue")
        .annotate(Count("id"), Min("next_run_at"))
        .order_by()
    ):
        counts = queues.setdefault(queue, QueueCounts(queue))
        counts.due = number
        counts.lag_seconds = max(0.0, (now - oldest).total_seconds()) if oldest else None
    for queue, number in (
        due.filter(next_run_at__gt=now).values_list("queue").annotate(Count("id")).order_by()
    ):
        queues.setdefault(queue, QueueCounts(queue)).scheduled = number
    lags = [counts.lag_seconds for counts in queues.values() if counts.lag_seconds is not None]
    asking = Job.objects.filter(status=Status.NEEDS_USER)
    failing = (
        Job.objects.filter(status=Status.FAILED)
        .values_list("kind")
        .annotate(n=Count("id"))
        .order_by("-n", "kind")
    )
    return Overview(
        now=now,
        by_status={status: by_status[status] for status in Status.values if by_status[status]},
        queues=sorted(queues.values(), key=lambda counts: counts.queue),
        oldest_lag_seconds=max(lags) if lags else None,
        throughput=throughput(now),
        needs_person=list(
            asking.only("id", "label", "kind", "user_message", "updated_at").order_by("updated_at")[:NAMED]
        ),
        needs_person_total=asking.count(),
        failures_by_kind=list(failing[:NAMED]),
    )


def throughput(now: datetime) -> list[Minute]:
    """The jobs that ended in each of the last ``THROUGHPUT_MINUTES`` minutes, oldest first.

    Read by the moment, in ``durajobs_ended``, and grouped by the minute alone: a condition on
    the status, or a group by it, had SQLite read every ended job in an index by status instead."""
    first = (now - timedelta(minutes=THROUGHPUT_MINUTES - 1)).replace(second=0, microsecond=0)
    ended = (
        Job.objects.filter(ended_at__gte=first)
        .annotate(minute=TruncMinute("ended_at", tzinfo=UTC))
        .values_list("minute")
        .annotate(
            done=Count("id", filter=Q(status=Status.DONE)),
            failed=Count("id", filter=Q(status__in=sorted(TERMINAL - {Status.DONE}))),
        )
        .order_by()
    )
    done: Counter[datetime] = Counter()
    failed: Counter[datetime] = Counter()
    for minute, done_then, failed_then in ended:
        done[minute.astimezone(UTC)] += done_then
        failed[minute.astimezone(UTC)] += failed_then
    minutes = [first + timedelta(minutes=n) for n in range(THROUGHPUT_MINUTES)]
    return [Minute(minute, done[minute], failed[minute]) for minute in minutes]


def job_stats() -> dict[str, Any]:
    """Counts by status and by queue, the lag of the oldest due job of each queue, and the
    workers seen lately, JSON-ready: what ``manage.py jobs stats`` shows. Lags are judged on the
    database's clock.

    >>> job_stats()["due"]
    {'default': {'jobs': 120, 'oldest_lag_seconds': 42.5}}
    """
    now = database_now()
    by_queue: dict[str, dict[str, int]] = {}
    by_status: dict[str, int] = {}
    rows = Job.objects.values_list("queue", "status").annotate(n=Count("id")).order_by("queue", "status")
    for queue, status, count in rows:
        by_queue.setdefault(queue, {})[status] = count
        by_status[status] = by_status.get(status, 0) + count
    due_by_queue = {
        queue: {"jobs": count, "oldest_lag_seconds": lag} for queue, (count, lag) in due_lags(now).items()
    }
    oldest = (
        Job.objects.queued()
        .filter(next_run_at__lte=now)
        .order_by("next_run_at", "id")
        .values_list("id", "next_run_at")
        .first()
    )
    return {
        "measured_at": now.isoformat(),
        "total": sum(by_status.values()),
        "by_status": by_status,
        "by_queue": by_queue,
        "due": due_by_queue,
        "oldest_due": {"id": oldest[0], "lag_seconds": _seconds(now - oldest[1])} if oldest else None,
        "workers": [
            {
                "worker_id": seen.worker_id,
                "host": seen.host,
                "pid": seen.pid,
                "queues": seen.queues,
                "concurrency": seen.concurrency,
                "jobs": seen.running,
                "last_seen": seen.last_seen_at.isoformat(),
                "stale": seen.stale,
                "stopped": seen.stopped_at is not None,
                "listens": seen.listens,
            }
            for seen in workers_seen(SEEN_LATELY)
        ],
    }


def due_lags(now: datetime) -> dict[str, tuple[int, float]]:
    """Per queue, in order, the queued jobs due at ``now``: how many, and how long the oldest has
    waited, in seconds (read through ``durajobs_due``)."""
    rows = (
        Job.objects.queued()
        .filter(next_run_at__lte=now)
        .values_list("queue")
        .annotate(n=Count("id"), oldest=Min("next_run_at"))
        .order_by("queue")
    )
    return {queue: (count, _seconds(now - oldest)) for queue, count, oldest in rows}


def _seconds(delta: timedelta) -> float:
    return round(max(delta.total_seconds(), 0.0), 3)
