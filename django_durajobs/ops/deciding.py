"""Deciding an operation: whether the job's status allows it, what it sets, and the log line that
says who did it and what it does (the sentence the job page's button says, ``explain.py``).

Every transition is conditional on the status it was decided from, so an operator's click and
a worker's outcome never overwrite each other: the loser re-reads and decides again. Each
operation's decision is a function of its own (``decide_resume``, ``decide_retry``…), shared by
the single-job operation and its bulk form ``apply_to_many``.
"""

from __future__ import annotations

from collections.abc import Callable
from datetime import datetime
from typing import Any

from django.utils import timezone
from django.utils.translation import gettext as _
from django.utils.translation import gettext_lazy

from .. import store
from ..answers import ANSWERED, chosen_label
from ..errors import JobError
from ..explain import what_it_does
from ..models import Job
from ..registry import has_revert
from ..status import Phase, Status
from ..transitions import NotAllowed, Transition, Trigger, allows, described, transition
from ..values import to_job_id

JobRef = Job | int
Decision = tuple[dict[str, Any], str]


def get_job(job: JobRef) -> Job:
    """The job's current row; ``JobError("job_not_found")`` when there is none."""
    pk = to_job_id(job)
    found = Job.objects.filter(pk=pk).first()
    if found is None:
        raise JobError("job_not_found", _("Job %(job)s does not exist.") % {"job": pk})
    return found


def invalid(message: str, **values: Any) -> JobError:
    """An ``invalid_input`` refusal: the translated ``message`` with its placeholders filled in."""
    return JobError("invalid_input", message % values)


def actor_name(by: Any) -> str:
    if by is None:
        return "system"
    if hasattr(by, "get_username"):
        return by.get_username()
    return str(by)


def apply_decision(job: JobRef, decide: Callable[[Job, datetime], Decision]) -> Job:
    """Apply ``decide(current, now)`` if the status is still the one decided from; retry on a race."""
    for _attempt in range(10):
        current = get_job(job)
        fields, log_line = decide(current, timezone.now())
        if store.change_status(current, fields, log_line):
            break
    else:
        raise JobError("job_busy", _("Job %(job)s kept changing; try again.") % {"job": current.pk})
    if isinstance(job, Job):
        job.refresh_from_db()
        return job
    return get_job(current.pk)


#: Each operation's refusal of a job its status does not allow: its code, and its message.
REFUSAL_CODES = {
    Trigger.RESUME: "job_not_resumable",
    Trigger.RETRY: "job_not_retryable",
    Trigger.PAUSE: "job_not_pausable",
    Trigger.CANCEL: "job_not_cancellable",
    Trigger.REVERT: "job_not_revertible",
}
REFUSALS = {
    Trigger.RESUME: gettext_lazy("Job %(job)s is %(status)s; only %(allowed)s jobs can be resumed."),
    Trigger.RETRY: gettext_lazy("Job %(job)s is %(status)s; only %(allowed)s jobs can be retried."),
    Trigger.PAUSE: gettext_lazy("Job %(job)s is %(status)s; only %(allowed)s jobs can be paused."),
    Trigger.CANCEL: gettext_lazy("Job %(job)s is %(status)s; only %(allowed)s jobs can be cancelled."),
    Trigger.REVERT: gettext_lazy("Job %(job)s is %(status)s; only %(allowed)s jobs can be reverted."),
}


def allowed(trigger: Trigger, current: Job, also: Trigger | None = None) -> Transition:
    """The trigger's transition for ``current`` as read; its ``REFUSALS`` entry when its status refuses it."""
    try:
        return transition(trigger, current.phase, current.status)
    except NotAllowed:
        allowed = described(trigger, *filter(None, [also]))
        shown = dict(job=current.pk, status=current.status, allowed=allowed)
        raise JobError(REFUSAL_CODES[trigger], REFUSALS[trigger] % shown) from None


# The decisions: what each operation does to a job as read, at ``now`` -----------------------------
# Each reads only the columns in DECISION_COLUMNS, and what it sets is the same for every job it
# allows in one status (a per-row value is an SQL expression), so many jobs change in one UPDATE.

#: What a decision reads of a job: never its subject or results.
DECISION_COLUMNS = (
    *("id", "label", "kind", "status", "phase", "queue", "parent_id", "actions"),
    *("waits_for_event", "next_run_at"),  # what its explanation reads
)


def decide_resume(
    current: Job, now: datetime, by: Any, action: str | None = None, data: Any = None
) -> Decision:
    resumed = allowed(Trigger.RESUME, current)
    offered = [entry["id"] for entry in current.actions or []]
    shown = dict(job=current.pk, actions=", ".join(offered), action=repr(action), actor=actor_name(by))
    if action is None and offered and current.status == Status.NEEDS_USER:
        message = _("Job %(job)s asks a question; resume it with one of its answers: %(actions)s.")
        raise JobError("invalid_input", message % shown)
    if action is not None and action not in offered:
        if not offered:
            raise invalid(_("Job %(job)s offers no actions; resume it without one."), **shown)
        raise invalid(
            _("Job %(job)s offers the actions %(actions)s; %(action)s is not one of them."), **shown
        )
    fields = resumed.values(now, resume_action=action or "", resume_data=data)
    if action:
        return fields, str(ANSWERED % {**shown, "action": repr(chosen_label(current.actions, action))})
    return fields, _("Resumed by %(actor)s.") % shown


def decide_retry(current: Job, now: datetime, by: Any) -> Decision:
    retried = allowed(Trigger.RETRY, current)
    actor = {"actor": actor_name(by)}
    if current.phase == Phase.REVERT:
        return retried.values(now), _("Revert retried by %(actor)s.") % actor
    return retried.values(now), _("Retried by %(actor)s.") % actor


def decide_pause(current: Job, now: datetime, by: Any) -> Decision:
    actor = {"actor": actor_name(by)}
    if allows(Trigger.REQUEST_PAUSE, current.phase, current.status):
        fields = transition(Trigger.REQUEST_PAUSE, current.phase).values(now)
        return fields, _("Pause requested by %(actor)s.") % actor
    paused = allowed(Trigger.PAUSE, current, also=Trigger.REQUEST_PAUSE)
    return paused.values(now), _("Paused by %(actor)s.") % actor


def decide_cancel(current: Job, now: datetime, by: Any) -> Decision:
    actor = {"actor": actor_name(by)}
    if allows(Trigger.REQUEST_CANCEL, current.phase, current.status):
        fields = transition(Trigger.REQUEST_CANCEL, current.phase).values(now)
        return fields, _("Cancel requested by %(actor)s.") % actor
    if current.status == Status.REVERTING:
        message = _("Job %(job)s is reverting; a revert cannot be cancelled.") % {"job": current.pk}
        raise JobError("job_not_cancellable", message)
    cancelled = allowed(Trigger.CANCEL, current, also=Trigger.REQUEST_CANCEL)
    return cancelled.values(now), _("Cancelled by %(actor)s.") % actor


def decide_revert(current: Job, now: datetime, by: Any) -> Decision:
    if not has_revert(current.kind):
        message = _("Job %(job)s (%(kind)s) has no revert.") % {"job": current.pk, "kind": current.kind}
        raise JobError("job_not_revertible", message)
    reverted = allowed(Trigger.REVERT, current)
    return reverted.values(now), _("Revert requested by %(actor)s.") % {"actor": actor_name(by)}


DECISIONS: dict[str, Callable[..., Decision]] = {
    "resume": decide_resume,
    "retry": decide_retry,
    "pause": decide_pause,
    "cancel": decide_cancel,
    "revert": decide_revert,
}


def decide(
    operation: str, current: Job, now: datetime, by: Any, done: int | None = None, **arguments: Any
) -> Decision:
    """``operation``'s decision for ``current``, its log line followed by what the operation does,
    in the words of its button (``done``: the steps it finished, counted when not given). An
    answer's line names the answer chosen instead."""
    fields, line = DECISIONS[operation](current, now, by, **arguments)
    if arguments.get("action"):
        return fields, line
    if done is None:
        done = finished_steps([current])[current.pk] if operation == "revert" else 0
    return fields, f"{line} {what_it_does(operation, current, done)}"


def finished_steps(jobs: list[Job]) -> dict[int, int]:
    """How many steps of its present phase each job finished, in one query."""
    counts = store.step_counts([job.pk for job in jobs])
    return {job.pk: counts.get((job.pk, job.phase), (0, 0))[0] for job in jobs}
