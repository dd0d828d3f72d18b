"""What an operation of the job page will do, in full, for its confirmation page: first the
sentence its button's help and the job's log say (``django_durajobs.explain``)."""

from __future__ import annotations

from typing import Any

from django.utils.translation import gettext as _
from django.utils.translation import ngettext

from ..explain import count, what_it_does
from ..models import Job
from ..registry import has_revert


def steps_kept(done: int) -> str:
    """What becomes of the steps a job finished, counted ("The 3 steps it finished are kept")."""
    if not done:
        return _("It has finished no step yet.")
    return ngettext(
        "The %(count)s step it finished is kept, not undone.",
        "The %(count)s steps it finished are kept, not undone.",
        done,
    ) % {"count": count(done)}


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
