"""``job_changed`` sent after commit on every state change, never able to break the engine.

The signal is declared in ``signals.py``, a leaf; sending it reads the job, so it happens here.
"""

from __future__ import annotations

import logging

from django.db import transaction

from ..models import Job
from ..signals import job_changed

logger = logging.getLogger("django_durajobs")


def announce_change(job_id: int, previous_status: str | None, status: str, using: str | None = None) -> None:
    """Send ``job_changed`` once the current transaction commits (at once outside one).

    Only if it has receivers now: they connect at start-up, and a worker changes jobs all the time.
    """
    if not job_changed.receivers or not job_changed.has_listeners(Job):
        return

    def send() -> None:
        job = Job.objects.filter(pk=job_id).first()
        if job is None:
            return
        for receiver, outcome in job_changed.send_robust(
            sender=Job, job=job, previous_status=previous_status, status=status
        ):
            if isinstance(outcome, Exception):
                logger.error(
                    "job_changed receiver %r failed for job %s (%s -> %s)",
                    receiver,
                    job_id,
                    previous_status,
                    status,
                    exc_info=outcome,
                )

    transaction.on_commit(send, using=using)
