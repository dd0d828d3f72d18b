"""What the metrics endpoint reports, read without a full scan of the jobs table.

Unfinished jobs are counted through the ``durajobs_due`` index (status leads). Finished jobs are
counted in ``FinishedTally`` rows: each scrape adds the jobs that ended since ``TallyMark`` (read
through the ``durajobs_ended`` index, at most ``BATCH`` of them), so the counters only go up,
pruning does not lower them, and the work per scrape follows the jobs that ended, not the table.
"""

from __future__ import annotations

from bisect import bisect_left
from dataclasses import dataclass, field
from datetime import datetime, timedelta

from django.db import IntegrityError, transaction
from django.db.models import Count
from django.utils import timezone

from ..conf import jobs_database
from ..models import FinishedTally, Job, TallyMark
from ..status import TERMINAL, Status
from .overview import due_lags

#: The upper bounds, in seconds, of ``durajobs_job_duration_seconds``'s buckets (and +Inf).
DURATION_BUCKETS = (0.1, 0.5, 1.0, 5.0, 15.0, 60.0, 300.0, 900.0, 3600.0, 21600.0)
#: The most ended jobs one scrape adds to the tallies; the rest wait for the next scrapes.
BATCH = 10_000
#: A job counts once it ended this long ago: a finish written in a transaction that commits
#: a moment after its ``ended_at`` is not passed over.
SETTLE_SECONDS = 2.0

UNFINISHED = tuple(sorted(set(Status) - TERMINAL))


@dataclass
class Tally:
    count: int = 0
    seconds: float = 0.0
    buckets: list[int] = field(default_factory=lambda: [0] * (len(DURATION_BUCKETS) + 1))


@dataclass(frozen=True)
class Snapshot:
    """The figures of one scrape."""

    jobs: list[tuple[str, str, str, int]]  # status, kind, queue, how many
    lag: dict[str, float]  # queue -> seconds its oldest due job has waited
    finished: dict[tuple[str, str], Tally]  # (kind, outcome) -> tally


def snapshot() -> Snapshot:
    """Advance the tallies, then read every figure."""
    advance_tallies()
    now = timezone.now()
    jobs = [
        (row["status"], row["kind"], row["queue"], row["n"])
        for row in Job.objects.filter(status__in=UNFINISHED)
        .values("status", "kind", "queue")
        .annotate(n=Count("*"))
        .order_by()
    ]
    lag = {queue: 0.0 for _status, _kind, queue, _n in jobs if _status == Status.QUEUED}
    lag.update({queue: seconds for queue, (_due, seconds) in due_lags(now).items()})
    finished = {
        (tally.kind, tally.outcome): Tally(tally.count, tally.seconds, _counts(tally.buckets))
        for tally in FinishedTally.objects.all()
    }
    return Snapshot(jobs, lag, finished)


class _Overtaken(Exception):
    """Another scrape advanced the mark meanwhile: it counted these jobs."""


def advance_tallies() -> int:
    """Add the jobs that ended since the mark to the tallies; how many were added.

    The mark moves with a conditional update, in the transaction that writes the tallies: of two
    scrapes at once, one counts and the other (finding the mark moved) counts nothing.
    """
    horizon = timezone.now() - timedelta(seconds=SETTLE_SECONDS)
    mark = _mark(horizon)
    rows = list(
        Job.objects.filter(ended_at__gte=mark.ended_at, ended_at__lte=horizon)
        .order_by("ended_at", "id")
        .values_list("id", "kind", "status", "started_at", "ended_at")[:BATCH]
    )
    rows = [row for row in rows if row[4] is not None and (row[4] > mark.ended_at or row[0] > mark.job_id)]
    if not rows:
        return 0
    added: dict[tuple[str, str], Tally] = {}
    for _pk, kind, status, started_at, ended_at in rows:
        _add(added.setdefault((kind, status), Tally()), started_at, ended_at)  # type: ignore[arg-type]
    last_id, last_end = rows[-1][0], rows[-1][4]
    try:
        with transaction.atomic(using=jobs_database()):
            moved = TallyMark.objects.filter(pk=mark.pk, ended_at=mark.ended_at, job_id=mark.job_id).update(
                ended_at=last_end, job_id=last_id
            )
            if not moved:
                raise _Overtaken
            _write(added)
    except _Overtaken:
        return 0
    return len(rows)


def _mark(horizon: datetime) -> TallyMark:
    """The mark; the first scrape sets it, and the counters count from then on."""
    try:
        mark, _created = TallyMark.objects.get_or_create(pk=1, defaults={"ended_at": horizon})
    except IntegrityError:  # another scrape's first made it meanwhile
        mark = TallyMark.objects.get(pk=1)
    return mark


def _add(tally: Tally, started_at: datetime | None, ended_at: datetime) -> None:
    tally.count += 1
    if started_at is None:  # it ended without running (cancelled while queued): no duration
        return
    seconds = max(0.0, (ended_at - started_at).total_seconds())
    tally.seconds += seconds
    tally.buckets[bisect_left(DURATION_BUCKETS, seconds)] += 1


def _write(added: dict[tuple[str, str], Tally]) -> None:
    existing = {
        (tally.kind, tally.outcome): tally
        for tally in FinishedTally.objects.select_for_update().filter(kind__in={kind for kind, _ in added})
    }
    for (kind, outcome), new in added.items():
        row = existing.get((kind, outcome))
        if row is None:
            FinishedTally.objects.create(
                kind=kind, outcome=outcome, count=new.count, seconds=new.seconds, buckets=_text(new.buckets)
            )
            continue
        row.count += new.count
        row.seconds += new.seconds
        row.buckets = _text([a + b for a, b in zip(_counts(row.buckets), new.buckets, strict=True)])
        row.save(update_fields=["count", "seconds", "buckets"])


def _counts(text: str) -> list[int]:
    """A tally's stored bucket counts, one per bucket of ``DURATION_BUCKETS`` and +Inf."""
    counts = [int(count) for count in text.split()][: len(DURATION_BUCKETS) + 1]
    return counts + [0] * (len(DURATION_BUCKETS) + 1 - len(counts))


def _text(counts: list[int]) -> str:
    return " ".join(str(count) for count in counts)
