"""Task jobs that no worker can start: the task's module fails to import (a typo, a missing
dependency, a deploy that reached the database before the workers), or the path is not a task.

As Django has it, such a task is ``FAILED`` with the exception; ``UNKNOWN_TASK_GRACE_SECONDS``
(default 0) keeps it ``READY`` that long first, with the reason in its errors, its wait reason
and its log, for a rolling deploy whose new workers will know it.
"""

from __future__ import annotations

from datetime import timedelta

from django.utils import timezone
from django.utils.module_loading import import_string
from django.utils.translation import gettext as _

from .. import store
from ..conf import get_setting
from ..errors import JobError
from ..models import Job
from ..redaction import describe_exception, package_logger
from ..status import Phase, Status
from ..transitions import Trigger, transition
from .results import UNKNOWN_TASK, failure_text

logger = package_logger("django_durajobs.tasks")

#: The subject key every task's job has (its backend's alias): what tells a task's job apart.
TASK_SUBJECT_KEY = "backend"


def why_not_startable(name: str) -> BaseException:
    """What importing the task ``name`` raises, or the refusal of what it found instead."""
    from .running import find_task_kind

    try:
        import_string(name)
        find_task_kind(name)
    except Exception as exc:
        return exc
    return JobError("unknown_job_kind", _("Unknown job kind %(kind)s.") % {"kind": repr(name)})


def fail_unstartable_tasks(name: str, worker_id: str) -> bool:
    """Fail the due task jobs of ``name`` past their grace, and hold the others with the reason;
    False when none of its due jobs is a task's."""
    jobs = store.due_jobs_with_subject_key(name, TASK_SUBJECT_KEY)
    if not jobs:
        return False
    reason = why_not_startable(name)
    error = failure_text(reason, worker_id)
    said = describe_exception(reason)
    grace_ends = timezone.now() - timedelta(seconds=get_setting("UNKNOWN_TASK_GRACE_SECONDS"))
    ending = [job for job in jobs if job.next_run_at is not None and job.next_run_at <= grace_ends]
    newly_held = [job for job in jobs if job not in ending and job.error_code != UNKNOWN_TASK]
    if ending:
        line = _("Failed: the task cannot be started: %(error)s") % {"error": said}
        _change(ending, Trigger.CANNOT_START, line, error=error, error_code=UNKNOWN_TASK)
        logger.error("Task %s cannot be started; %s job(s) failed: %s", name, len(ending), said)
    if newly_held:
        line = _("The task cannot be started yet: %(error)s") % {"error": said}
        _change(
            newly_held, Trigger.CANNOT_START_YET, line, wait_reason=line, error=error, error_code=UNKNOWN_TASK
        )
        logger.warning("Task %s cannot be started yet; %s job(s) held: %s", name, len(newly_held), said)
    return True


def _change(jobs: list[Job], trigger: Trigger, line: str, **given: str) -> None:
    fields = transition(trigger, Phase.RUN).values(timezone.now(), **given)
    store.change_status_many(jobs, Status.QUEUED, fields, line)
