"""Jobs built in any state, and the whole row read back: what the state and operation tests
start from and compare."""

from __future__ import annotations

from django_durajobs import Job
from tests.factories import JobFactory

ALL_STATUSES = [
    "queued",
    "running",
    "done",
    "failed",
    "cancelled",
    "paused",
    "awaiting_external",
    "needs_user",
    "awaiting_approval",
    "awaiting_payment",
    "not_ready",
    "needs_setup",
    "reverting",
    "reverted",
]


#: Every operation on a job's state, in the order tests run through them.
OPERATIONS = ["cancel", "pause", "resume", "retry", "revert"]


def snapshot(job) -> dict:
    """Every column of the job's row, read fresh."""
    row = Job.objects.get(pk=job.pk)
    return {field.attname: getattr(row, field.attname) for field in Job._meta.concrete_fields}


def build(status: str, kind: str = "states_basic"):
    """A job in ``status`` with one finished try, so retry()'s max_attempts rule is visible."""
    extra = {"attempt": 1} if status not in ("queued", "paused", "cancelled") else {}
    return JobFactory(kind=kind, status=status, max_attempts=1, **extra)
