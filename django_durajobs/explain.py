"""What each operation will do to a job as it stands, in one sentence: the help under its button,
the first sentence of its confirmation page, and what the job's log says when it is done."""

from __future__ import annotations

from typing import Any

from django.utils.formats import number_format
from django.utils.translation import gettext as _
from django.utils.translation import ngettext

from .models import Job
from .status import EXTERNAL_WAITS, Phase, Status


def count(number: int) -> str:
    """A count as the console shows it, grouped by thousands: 19,990."""
    return number_format(number, force_grouping=True)


def _resume(job: Job) -> str:
    if job.waits_for_event:
        message = _("Runs it again now, without the event %(event)s: it waits again until the event is sent.")
        return message % {"event": job.waits_for_event}
    if job.status == Status.PAUSED:
        return _("It goes on after its last finished step.")
    if job.status in EXTERNAL_WAITS and job.next_run_at:
        return _("Checks again now, not at its next check.")
    return _("It goes on after its last finished step, as if what it waits for had come.")


def _retry(job: Job) -> str:
    if job.status == Status.NEEDS_USER:
        return _("Runs it again after its last finished step, without an answer: it may ask again.")
    return _("Runs it again after its last finished step, with one more try allowed.")


def _pause(job: Job) -> str:
    if job.status == Status.RUNNING:
        return _("It pauses at its next step; resumed, it goes on from there.")
    return _("Holds it until someone resumes it; its finished steps are kept.")


def _cancel(job: Job) -> str:
    if job.status == Status.RUNNING:
        return _("It stops at its next step, then ends as cancelled.")
    return _("It ends now as cancelled and will not run again.")


def _revert(job: Job, done: int) -> str:
    if job.phase == Phase.REVERT:
        return _("Runs its kind's revert again, from its start.")
    return ngettext(
        "Runs its kind's revert, which undoes what its %(count)s finished step did.",
        "Runs its kind's revert, which undoes what its %(count)s finished steps did.",
        done,
    ) % {"count": count(done)}


def _retry_children(failed: int) -> str:
    return ngettext(
        "Queues %(count)s failed child job for another try.",
        "Queues %(count)s failed child jobs for another try.",
        failed,
    ) % {"count": count(failed)}


def what_it_does(operation: str, job: Job, done: int, failed_children: int = 0) -> Any:
    """One sentence: what ``operation`` does to ``job`` as it stands (``done`` steps finished)."""
    if operation == "resume":
        return _resume(job)
    if operation == "retry":
        return _retry(job)
    if operation == "pause":
        return _pause(job)
    if operation == "cancel":
        return _cancel(job)
    if operation == "revert":
        return _revert(job, done)
    if operation == "retry_children":
        return _retry_children(failed_children)
    return _("Enqueues a copy of this job, with a new idempotency key.")
