"""What each operation of the job page will do to a job, in words: the help under its button and
the first sentence of its confirmation page are the same sentence."""

from __future__ import annotations

from typing import Any

from django.utils.translation import gettext as _
from django.utils.translation import ngettext

from ..models import Job
from ..registry import has_revert
from ..status import EXTERNAL_WAITS, Phase, Status
from .display import count


def steps_kept(done: int) -> str:
    """What becomes of the steps a job finished, counted ("The 3 steps it finished are kept")."""
    if not done:
        return _("It has finished no step yet.")
    return ngettext(
        "The %(count)s step it finished is kept, not undone.",
        "The %(count)s steps it finished are kept, not undone.",
        done,
    ) % {"count": count(done)}


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


def consequences(operation: str, job: Job, done: int, failed_children: int) -> list[Any]:
    """What the operation will do to this job, in sentences, for its confirmation page: first
    the sentence its button's help says."""
    first = what_it_does(operation, job, done, failed_children)
    if operation == "cancel":
        more = _("Use Revert to undo them.") if done and has_revert(job.kind) else ""
        return [first, " ".join(filter(None, [steps_kept(done), more]))]
    if operation == "revert":
        ends = _("It ends as reverted, or as failed if the revert fails (and may then be reverted again).")
        return [first, ends]
    itself = _("Job %(id)s itself is not retried: retry it once its children are done.")
    return [first, itself % {"id": job.pk}]
