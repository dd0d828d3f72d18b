"""Giving held jobs back: after a lost worker (an expired lease, an earlier incarnation) or a stopping one."""

from __future__ import annotations

import logging
from datetime import timedelta

from django.db import transaction
from django.db.models import Q
from django.utils import timezone
from django.utils.translation import gettext as _
from django.utils.translation import ngettext

from ..conf import get_setting, jobs_database
from ..models import Job, JobStep
from ..status import Status, StepState
from ..transitions import Trigger, transition
from .changes import changed_to, notify_due, written
from .database import database_now
from .log import append_log

logger = logging.getLogger("django_durajobs")


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


def release(job: Job, why: str, extra: Q | None = None) -> int:
    """Give a held job back to the queue (to resume after its last finished step); 1 if it was.

    It keeps its place: the next claim of its priority takes it before any job that has not
    started, whatever the backlog (the transitions table's ``RELEASE``).

    ``why`` is ``"lost"`` (its worker died or lost its lease: counts towards
    ``MAX_WORKER_LOSSES``) or ``"stopping"`` (its worker is shutting down: counts nothing).
    The update is fenced by the job's lease token as it was read, so a job that changed hands
    meanwhile is left alone.
    """
    now = timezone.now()
    losses = job.worker_losses + (why == "lost")
    unlock = dict(locked_by="", locked_at=None, lease_token="", updated_at=now, worker_losses=losses)
    if why == "lost" and losses >= get_setting("MAX_WORKER_LOSSES"):
        error = ngettext(
            "The worker running this job was lost %(count)s time; it is not handed to another one.",
            "The worker running this job was lost %(count)s times; it is not handed to another one.",
            losses,
        ) % {"count": losses}
        fields = transition(Trigger.WORKER_LOST, job.phase).values(now, error=error)
        line = ngettext(
            "Worker %(worker)s lost; the job failed after %(count)s lost worker.",
            "Worker %(worker)s lost; the job failed after %(count)s lost workers.",
            losses,
        ) % {"worker": job.locked_by, "count": losses}
    else:
        fields = written(transition(Trigger.RELEASE, job.phase).values(now))
        if why == "lost":
            line = _("Worker %(worker)s lost; the job resumes after its last finished step.") % {
                "worker": job.locked_by
            }
        else:
            line = _("Worker %(worker)s stopped; the job resumes after its last finished step.") % {
                "worker": job.locked_by
            }
    status = fields["status"]
    with transaction.atomic(using=jobs_database()):
        fence = Job.objects.held().filter(pk=job.pk, lease_token=job.lease_token)
        if extra is not None:
            fence = fence.filter(extra)
        if not fence.update(**unlock, **fields):
            return 0
        JobStep.objects.filter(job_id=job.pk, state=StepState.RUNNING).update(
            state=StepState.PENDING,
            detail=_("Interrupted: its worker was lost.")
            if why == "lost"
            else _("Interrupted: its worker stopped."),
        )
        append_log(job.pk, line)
        if status != Status.FAILED:
            notify_due(job.queue)
    logger.warning("Job %s: %s", job.pk, line)
    changed_to(job, job.status, status)
    return 1
