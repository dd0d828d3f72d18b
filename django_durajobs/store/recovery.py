"""Finding the held jobs a lost worker left (an expired lease, an earlier incarnation): each is given
back by ``waking.release``, as a stopping worker's are."""

from __future__ import annotations

from datetime import timedelta

from django.db.models import Q

from ..conf import get_setting
from ..models import Job
from .database import database_now
from .waking import release


def recover(worker_id: str | None = None) -> int:
    """Re-queue running (or reverting) jobs whose lease expired, and ``worker_id``'s own.

    The lease is judged on the database's clock. A job whose worker is lost for the
    ``MAX_WORKER_LOSSES``-th time fails with ``error_code="worker_lost"`` instead of being
    handed to yet another worker it might crash.
    """
    cutoff = database_now() - timedelta(seconds=get_setting("LEASE_SECONDS"))
    lost = Q(locked_at__lt=cutoff)
    if worker_id:
        lost |= Q(locked_by=worker_id)
    return _release_all(lost, "lost")


def recover_predecessors(worker_id: str, prefix: str) -> int:
    """Re-queue at once the jobs of earlier incarnations of this worker (see ``worker_prefix``).

    A process that starts again under the same name knows its predecessor is dead, so its jobs
    need not wait for their leases to expire.
    """
    return _release_all(Q(locked_by__startswith=prefix) & ~Q(locked_by=worker_id), "lost")


def _release_all(which: Q, why: str) -> int:
    candidates = Job.objects.held().filter(which).exclude(locked_by="")
    fields = ("pk", "status", "phase", "queue", "lease_token", "worker_losses", "locked_by", "parent_id")
    return sum(release(job, why, extra=which) for job in candidates.only(*fields))
