"""Workers: their ids (who holds a lease, which earlier incarnations are dead) and the registry
of ``runjobs`` processes the console lists, each row written by the worker's own heartbeat."""

from __future__ import annotations

import os
import socket
import uuid
from collections.abc import Iterable
from dataclasses import dataclass
from datetime import datetime, timedelta

from django.db.models import Count

from ..conf import get_setting
from ..models import Job, Worker
from ..registry import kind_versions
from ..transitions import HELD_STATUSES
from .database import DatabaseNow, database_now, made_despite_deadlocks

#: A worker not seen for this long is forgotten: its row is deleted by the next worker to start.
FORGET_WORKERS_AFTER = timedelta(days=1)
#: What "seen lately" means on the dashboard and in ``manage.py jobs stats``.
SEEN_LATELY = timedelta(hours=1)
#: How many of a worker's running jobs ``workers_seen`` names (it counts them all).
JOBS_NAMED = 10


def worker_prefix(name: str | None = None) -> str:
    """What the ids of this worker's incarnations start with.

    Named workers (``runjobs --worker-id NAME``, one name per running process) are ``NAME@``;
    unnamed ones are ``host:pid:`` — a process with our pid on our host is dead, whoever it was.
    """
    return f"{name}@" if name else f"{socket.gethostname()}:{os.getpid()}:"


def new_worker_id(name: str | None = None) -> str:
    """Unique per process incarnation: host, pid and a random part."""
    suffix = f"{socket.gethostname()}:{os.getpid()}:{uuid.uuid4().hex[:8]}"
    return f"{name}@{suffix}" if name else suffix


def register_worker(worker_id: str, queues: Iterable[str], concurrency: int) -> None:
    """Say that this process runs as ``worker_id``; forget the workers gone for a day.

    Workers that start together may deadlock on InnoDB's gap locks (each looks for its new row
    before inserting it): the one made the victim registers again."""
    now = database_now()
    Worker.objects.filter(last_seen_at__lt=now - FORGET_WORKERS_AFTER).delete()
    row = {
        "host": socket.gethostname(),
        "pid": os.getpid(),
        "queues": sorted(queues),
        "concurrency": concurrency,
        "kind_versions": kind_versions(),
        "started_at": now,
        "last_seen_at": now,
        "stopped_at": None,
    }
    made_despite_deadlocks(lambda _first: Worker.objects.update_or_create(worker_id=worker_id, defaults=row))


def worker_alive(worker_id: str, queues: Iterable[str], concurrency: int) -> None:
    """The worker's heartbeat: one UPDATE; its row made again if it was forgotten meanwhile."""
    if not Worker.objects.filter(worker_id=worker_id).update(last_seen_at=DatabaseNow()):
        register_worker(worker_id, queues, concurrency)


def worker_listens(worker_id: str, listens: bool) -> None:
    """Whether the worker hears new jobs at once, or polls for them (the console shows it)."""
    Worker.objects.filter(worker_id=worker_id).update(listens=listens)


def worker_stopped(worker_id: str) -> None:
    Worker.objects.filter(worker_id=worker_id).update(stopped_at=DatabaseNow(), last_seen_at=DatabaseNow())


def version_unserved(kind: str, version: str, now: datetime | None = None) -> bool:
    """Whether workers are running, and none of them runs ``version`` of ``kind``: a job that waits
    for its version (``on_version_change="wait"``) would wait for ever. ``now``: the database's
    clock, when it was read already."""
    lease = timedelta(seconds=get_setting("LEASE_SECONDS"))
    live = Worker.objects.filter(stopped_at__isnull=True, last_seen_at__gte=(now or database_now()) - lease)
    served = [(row or {}).get(kind) for row in live.values_list("kind_versions", flat=True)]
    return bool(served) and version not in served


@dataclass(frozen=True)
class SeenWorker:
    """A worker as the console shows it."""

    worker_id: str
    host: str
    pid: int
    queues: list[str]
    concurrency: int
    started_at: datetime
    last_seen_at: datetime
    stopped_at: datetime | None
    #: Not seen for longer than a lease lasts, and not stopped: it probably died.
    stale: bool
    listens: bool
    running: int
    running_ids: list[int]


def workers_seen(since: datetime | timedelta) -> list[SeenWorker]:
    """The workers seen since then (a moment, or that long ago on the database's clock), live
    ones first, each with the jobs it holds now."""
    now = database_now()
    cutoff = now - since if isinstance(since, timedelta) else since
    rows = list(Worker.objects.filter(last_seen_at__gte=cutoff).order_by("-last_seen_at", "id"))
    held = Job.objects.filter(status__in=HELD_STATUSES, locked_by__in=[row.worker_id for row in rows])
    counts = dict(held.values_list("locked_by").annotate(n=Count("id")).order_by())
    named: dict[str, list[int]] = {}
    for locked_by, pk in held.order_by("locked_by", "id").values_list("locked_by", "id"):
        if len(named.setdefault(locked_by, [])) < JOBS_NAMED:
            named[locked_by].append(pk)
    lease = timedelta(seconds=get_setting("LEASE_SECONDS"))
    seen = [
        SeenWorker(
            worker_id=row.worker_id,
            host=row.host,
            pid=row.pid,
            queues=list(row.queues or []),
            concurrency=row.concurrency,
            started_at=row.started_at,
            last_seen_at=row.last_seen_at,
            stopped_at=row.stopped_at,
            stale=row.stopped_at is None and now - row.last_seen_at > lease,
            listens=row.listens,
            running=counts.get(row.worker_id, 0),
            running_ids=named.get(row.worker_id, []),
        )
        for row in rows
    ]
    return sorted(seen, key=lambda worker: (worker.stopped_at is not None, worker.stale))
