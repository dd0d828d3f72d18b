"""Screen summaries: ``describe(job)`` and ``children_summary(parent)``, JSON-ready and redacted."""

from __future__ import annotations

from collections import Counter
from datetime import datetime, timedelta
from functools import partial
from typing import Any

from django.db.models import Count, Max, Min
from django.utils import timezone
from django.utils.translation import gettext as _

from ..conf import get_setting
from ..errors import JobError
from ..models import Job, JobLog, JobStep
from ..redaction import redact
from ..registry import has_revert
from ..status import (
    EXTERNAL_WAITS,
    SETTLED_UNSUCCESSFULLY,
    TERMINAL,
    WAITING,
    Phase,
    Status,
    StepState,
)
from ..store import DatabaseNow, children_of, database_now, held_back_reason, step_counts, version_unserved
from ..transitions import HELD_STATUSES, Trigger, allows
from ..values import to_job_id
from .moments import in_words
from .progress import progress_of

ACTIVE_STEP_STATES = (StepState.RUNNING, StepState.WAITING, StepState.NEEDS_USER, StepState.FAILED)


def _iso(moment: datetime | None) -> str | None:
    return moment.isoformat() if moment else None


def _load(job: Job | int) -> Job:
    """A fresh read of the job, with the database's clock (``database_now``) to judge its lease by."""
    pk = to_job_id(job)
    found = Job.objects.annotate(database_now=DatabaseNow()).filter(pk=pk).first()
    if found is None:
        raise JobError("job_not_found", _("Job %(job)s does not exist.") % {"job": pk})
    return found


#: A failed step's state while its job is queued (or running) to try it again.
RETRYING = "retrying"


def shown_state(state: str, job_status: str) -> str:
    """A step's state as its job now stands: a wait or question the job no longer has reads as
    pending, and a failed try the job makes again as ``retrying``."""
    if state in (StepState.WAITING, StepState.NEEDS_USER) and job_status not in WAITING:
        return StepState.PENDING
    if state == StepState.FAILED and job_status in HELD_STATUSES | {Status.QUEUED}:
        return RETRYING
    return state


def step_summary(step: JobStep, job_status: str) -> dict[str, Any]:
    return {
        "id": step.step_id,
        "title": step.title,
        "phase": step.phase,
        "state": shown_state(step.state, job_status),
        "started_at": _iso(step.started_at),
        "ended_at": _iso(step.ended_at),
        "detail": step.detail or None,
        "error": step.error or None,
        "result": redact(step.result),
    }


def resuming_reason(job: Job) -> str | None:
    """Why an interrupted job waits, until it runs again: only for a worker, since it goes before
    the jobs of its priority that have not started; None for any other job."""
    if not job.interrupted:
        return None
    # A lost worker counts towards MAX_WORKER_LOSSES and a stopping one counts nothing, so the count
    # tells them apart (a job lost once and released by a stopping worker since reads as lost).
    if job.worker_losses:
        return _("Resuming after a lost worker")
    return _("Resuming after its worker stopped")


def _eta_unknown_reason(job: Job) -> str | None:
    if job.eta_at:
        return None
    if job.status in TERMINAL:
        return _("The job has ended.")
    if job.interrupted:
        return _("%(reason)s: next for a free worker, after its last finished step.") % {
            "reason": resuming_reason(job)
        }
    if job.status == Status.QUEUED:
        now = timezone.now()
        if job.next_run_at and job.next_run_at > now:
            return _("Scheduled to run again %(when)s.") % {"when": in_words(job.next_run_at, now)}
        return _("Waiting for a worker to pick it up.")
    if job.status == Status.NEEDS_USER and job.on_deadline and job.next_run_at:
        return _("Waiting for a person's decision, answered by itself %(when)s.") % {
            "when": in_words(job.next_run_at, timezone.now())
        }
    if job.status == Status.NEEDS_USER:
        return _("Waiting for a person's decision.")
    if job.status == Status.PAUSED:
        return _("Paused until an operator resumes it.")
    if job.status in WAITING:
        return _("Depends on an outside event: %(reason)s") % {"reason": job.wait_reason or job.status}
    return _("The job has not reported an ETA.")


def is_stale(job: Job, now: datetime) -> bool:
    """Running (or reverting) under a lease that has expired at ``now`` (the database's clock, as
    ``recover()`` judges it): its worker is probably gone."""
    if job.status not in HELD_STATUSES or not job.locked_at:
        return False
    return now - job.locked_at > timedelta(seconds=get_setting("LEASE_SECONDS"))


def _facts(job: Job, steps_done: int, steps_total: int) -> dict[str, Any]:
    """What a screen shows of the job's own row, in ``describe()``'s order up to its steps."""
    return {
        "id": job.pk,
        "kind": job.kind,
        "kind_version": job.kind_version or None,
        "label": job.label,
        "status": job.status,
        "phase": job.phase,
        "progress": progress_of(job.status, job.progress, steps_done, steps_total),
        "attempt": job.attempt,
        "max_attempts": job.max_attempts,
        "next_run_at": _iso(job.next_run_at),
        "eta_at": _iso(job.eta_at),
        "eta_unknown_reason": _eta_unknown_reason(job),
        "created_at": _iso(job.created_at),
        "updated_at": _iso(job.updated_at),
        "started_at": _iso(job.started_at),
        "ended_at": _iso(job.ended_at),
    }


def open_question(job: Job) -> str | None:
    """The question (or message, set by ``update()``) the job shows its user, None once it has
    ended: an answer, a retry and a cancel clear it (the log keeps it), and a job cancelled
    before they did shows none either."""
    if not job.user_message or job.status in TERMINAL:
        return None
    return job.user_message


def _checks(job: Job) -> dict[str, Any] | None:
    """A timed wait checked again and again: how many checks, the last one and the next."""
    if job.status not in EXTERNAL_WAITS or not job.wait_checks:
        return None
    return {
        "count": job.wait_checks["count"],
        "last_at": job.wait_checks["last_at"],
        "next_at": _iso(job.next_run_at),
    }


def _outcome(job: Job) -> dict[str, Any]:
    """What a screen shows of the job's wait, question, error and allowed operations."""
    can = partial(allows, phase=job.phase, status=job.status)
    return {
        "wait_reason": job.wait_reason or resuming_reason(job) or held_back_reason(job),
        "wait_checks": _checks(job),
        "user_message": open_question(job),
        "actions": redact(job.actions) if job.status == Status.NEEDS_USER else None,
        # A question that answers itself: when, and with which of its actions.
        "deadline": _iso(job.next_run_at) if job.on_deadline and job.status == Status.NEEDS_USER else None,
        "on_deadline": job.on_deadline or None,
        "timeout": job.timeout,
        "error": job.error or None,
        "error_code": job.error_code or None,
        "cancel_requested": job.cancel_requested,
        "pause_requested": job.pause_requested,
        "can_cancel": can(Trigger.CANCEL) or can(Trigger.REQUEST_CANCEL),
        "can_retry": can(Trigger.RETRY),
        "can_resume": can(Trigger.RESUME),
        "can_pause": can(Trigger.PAUSE) or can(Trigger.REQUEST_PAUSE),
        "can_revert": can(Trigger.REVERT) and has_revert(job.kind),
        "terminal": job.status in TERMINAL,
        "stale": is_stale(job, getattr(job, "database_now", None) or database_now()),
        "interrupted": job.interrupted,
    }


def row_summaries(jobs: list[Job]) -> list[dict[str, Any]]:
    """``describe()``'s keys of each job's own row, for a list of jobs: no steps, log, result or
    children; the progress follows the steps, counted for all the jobs in one query. Each ``job``
    as read (annotated with ``database_now``, its staleness costs no query)."""
    counts = step_counts([job.pk for job in jobs])
    return [{**_facts(job, *counts.get((job.pk, job.phase), (0, 0))), **_outcome(job)} for job in jobs]


def describe(job: Job | int) -> dict[str, Any]:
    """Everything a screen shows about a job, from a fresh read.

    >>> describe(job)["current_step"]
    {'id': 'upload', 'title': 'Upload files', 'state': 'running', ...}
    """
    job = _load(job)
    steps = list(JobStep.objects.filter(job=job))
    steps.sort(key=lambda step: (step.phase != Phase.RUN, step.position))
    summaries = [step_summary(step, job.status) for step in steps]  # each step's result redacted once
    active = [index for index, step in enumerate(steps) if step.phase == job.phase]
    current = next((i for i in active if steps[i].state in ACTIVE_STEP_STATES), None)
    if current is None:
        current = next((i for i in active if steps[i].state == StepState.PENDING), None)
    following = active[active.index(current) + 1] if current is not None and current != active[-1] else None
    keep = get_setting("LOG_LINES_KEPT")
    log = list(JobLog.objects.filter(job=job).order_by("-id")[:keep])[::-1]
    has_children = Job.objects.filter(parent=job).exists()
    done = sum(1 for i in active if steps[i].state == StepState.DONE)
    return {
        **_facts(job, done, len(active)),
        "current_step": dict(summaries[current]) if current is not None else None,
        "completed_steps": [dict(summaries[i]) for i in active if steps[i].state == StepState.DONE],
        "next_step": dict(summaries[following]) if following is not None else None,
        "steps": summaries,
        **_outcome(job),
        "result": redact(job.result),
        "log": [{"at": _iso(entry.at), "line": entry.line} for entry in log],
        "children": children_summary(job) if has_children else None,
        "version_warning": version_warning(job),
    }


def version_warning(job: Job) -> str | None:
    """Why a job that is not over may never run on: workers run, none with its kind's version."""
    if job.status in TERMINAL or not job.kind_version or not version_unserved(job.kind, job.kind_version):
        return None
    return _("No running worker has version %(version)s of kind %(kind)s.") % {
        "version": job.kind_version,
        "kind": job.kind,
    }


#: How many of its latest completed steps ``live_summary`` names.
RECENT_STEPS = 3


def live_summary(job: Job) -> dict[str, Any]:
    """``describe()`` for a screen that refreshes itself, in a few indexed queries however big the job.

    The same keys for the job itself, its current and next step; ``completed_steps`` holds only
    the latest ``RECENT_STEPS`` (``completed_count`` says how many there are), and ``children``
    only the counts (``total``, ``by_status``, ``overall``). No steps list, log or result.
    """
    steps = JobStep.objects.filter(job_id=job.pk, phase=job.phase)
    # Per state: how many steps, and the first and last position (``durajobs_step_order`` finds each).
    states = {
        state: (number, first, last)
        for state, number, first, last in steps.values_list("state")
        .annotate(Count("id"), Min("position"), Max("position"))
        .order_by()
    }
    active = [states[state][1] for state in ACTIVE_STEP_STATES if state in states]
    position = min(active) if active else states.get(StepState.PENDING, (0, None, None))[1]
    current = following = None
    if position is not None:
        current = steps.filter(position=position, state__in=(*ACTIVE_STEP_STATES, StepState.PENDING)).first()
        following = steps.filter(position__gt=position).order_by("position").first()
    completed, _first, last_done = states.get(StepState.DONE, (0, None, None))
    recent = []
    if completed:
        done = steps.filter(state=StepState.DONE, position__lte=last_done).order_by("-position")
        recent = list(done[:RECENT_STEPS])[::-1]
    counts = Counter(
        dict(Job.objects.filter(parent_id=job.pk).values_list("status").annotate(n=Count("id")).order_by())
    )
    total = sum(counts.values())
    steps_total = sum(number for number, _first, _last in states.values())
    return {
        **_facts(job, completed, steps_total),
        "current_step": step_summary(current, job.status) if current else None,
        "completed_steps": [step_summary(step, job.status) for step in recent],
        "completed_count": completed,
        "next_step": step_summary(following, job.status) if following else None,
        **_outcome(job),
        "children": {"total": total, "by_status": dict(counts), "overall": overall(counts)}
        if total
        else None,
        "version_warning": version_warning(job),
    }


def overall(counts: Counter[str]) -> str:
    """How a family is doing: ``none``, ``done``, ``partial``, ``failed`` or ``running``."""
    total = sum(counts.values())
    done = counts[Status.DONE]
    unsuccessful = sum(counts[status] for status in SETTLED_UNSUCCESSFULLY)
    if total == 0:
        return "none"
    if done == total:
        return "done"
    if done and unsuccessful:
        return "partial"
    if unsuccessful == total:
        return "failed"
    return "running"


def children_summary(parent: Job | int) -> dict[str, Any]:
    """Per-target results of a parent's children; a partial failure never reads as success."""
    parent_id = to_job_id(parent, _("The parent"))
    return summary_of_children(children_of(parent_id))


def summary_of_children(children: list[Job]) -> dict[str, Any]:
    """``children_summary()`` of the children as loaded, oldest first."""
    counts = Counter(child.status for child in children)
    return {
        "total": len(children),
        "by_status": {status: count for status, count in counts.items() if count},
        "overall": overall(counts),
        "children": [
            {
                "id": child.pk,
                "label": child.label,
                "status": child.status,
                "subject": redact(child.subject),
                "error": child.error or None,
                "attempt": child.attempt,
                "next_run_at": _iso(child.next_run_at),
            }
            for child in children
        ],
    }
