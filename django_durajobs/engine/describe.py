"""Screen summaries: ``describe(job)`` and ``children_summary(parent)``, JSON-ready and redacted.

``describe()`` is ``describe_view()`` of what ``store.load_job_view()`` read, a function of those
values that makes no query; ``children_summary()`` likewise of ``store.children_of()``."""

from __future__ import annotations

from collections import Counter
from collections.abc import Mapping, Sequence
from datetime import datetime, timedelta
from functools import cache, partial
from typing import Any

from django.utils import timezone
from django.utils.translation import gettext as _

from ..conf import get_setting
from ..family import overall, shown_wait_reason
from ..models import Job, JobStep
from ..redaction import redact
from ..registry import has_revert
from ..status import (
    EXTERNAL_WAITS,
    TERMINAL,
    WAITING,
    Phase,
    Status,
    StepState,
    current_position,
)
from ..store import (
    JobView,
    LiveView,
    children_counts,
    children_of,
    database_now,
    held_back_reasons,
    load_job_view,
    load_live_view,
    step_counts,
)
from ..transitions import HELD_STATUSES, Trigger, allows
from ..values import to_job_id
from .moments import in_words
from .progress import progress_of


def _iso(moment: datetime | None) -> str | None:
    return moment.isoformat() if moment else None


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


def waiting_for(job: Job, children: Mapping[str, int] | None, held_back: str | None) -> str | None:
    """What a screen shows the job waits for: what it said (a parent waiting for its children, by
    ``children``: how many in each status as read with it, ``family.shown_wait_reason``), that it
    resumes after an interruption, or the limit that holds it back now (``held_back``)."""
    return shown_wait_reason(job, children) or resuming_reason(job) or held_back


def _eta_unknown_reason(job: Job, now: datetime, children: Mapping[str, int] | None) -> str | None:
    if job.eta_at:
        return None
    if job.status in TERMINAL:
        return _("The job has ended.")
    if job.interrupted:
        return _("%(reason)s: next for a free worker, after its last finished step.") % {
            "reason": resuming_reason(job)
        }
    if job.status == Status.QUEUED:
        if job.next_run_at and job.next_run_at > now:
            return _("Scheduled to run again %(when)s.") % {"when": in_words(job.next_run_at, now)}
        return _("Waiting for a worker to pick it up.")
    if job.status == Status.NEEDS_USER and job.on_deadline and job.next_run_at:
        return _("Waiting for a person's decision, answered by itself %(when)s.") % {
            "when": in_words(job.next_run_at, now)
        }
    if job.status == Status.NEEDS_USER:
        return _("Waiting for a person's decision.")
    if job.status == Status.PAUSED:
        return _("Paused until an operator resumes it.")
    if job.status in WAITING:
        return _("Depends on an outside event: %(reason)s") % {
            "reason": shown_wait_reason(job, children) or job.status
        }
    return _("The job has not reported an ETA.")


def is_stale(job: Job, now: datetime) -> bool:
    """Running (or reverting) under a lease that has expired at ``now`` (the database's clock, as
    ``recover()`` judges it): its worker is probably gone."""
    if job.status not in HELD_STATUSES or not job.locked_at:
        return False
    return now - job.locked_at > timedelta(seconds=get_setting("LEASE_SECONDS"))


def _facts(
    job: Job, steps_done: int, steps_total: int, now: datetime, children: Mapping[str, int] | None
) -> dict[str, Any]:
    """What a screen shows of the job's own row, in ``describe()``'s order up to its steps; ``now``
    on the application's clock, ``children``: how many in each status (None if not read)."""
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
        "eta_unknown_reason": _eta_unknown_reason(job, now, children),
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


def _outcome(
    job: Job, held_back: str | None, database_clock: datetime, children: Mapping[str, int] | None
) -> dict[str, Any]:
    """What a screen shows of the job's wait, question, error and allowed operations; ``held_back``:
    why a limit holds it back, ``database_clock``: the database's now, which judges its lease,
    ``children``: how many in each status (None if not read)."""
    can = partial(allows, phase=job.phase, status=job.status)
    return {
        "wait_reason": waiting_for(job, children, held_back),
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
        "stale": is_stale(job, database_clock),
        "interrupted": job.interrupted,
    }


def row_summaries(jobs: list[Job]) -> list[dict[str, Any]]:
    """``describe()``'s keys of each job's own row, for a list of jobs: no steps, log, result or
    children; the progress follows the steps, counted for all the jobs in one query. Each ``job``
    as read (annotated with ``database_now``, its staleness costs no query); what holds them back
    is counted once for all, and so are the children of those that wait for theirs (their wait
    reason says how many are open)."""
    counts = step_counts([job.pk for job in jobs])
    held = held_back_reasons(jobs)
    parents = [job.pk for job in jobs if job.waits_for_children]
    families = children_counts(parents) if parents else {}
    now = timezone.now()
    read_now = cache(database_now)  # read once, if a job was read without it
    return [
        {
            **_facts(job, *counts.get((job.pk, job.phase), (0, 0)), now, families.get(job.pk)),
            **_outcome(
                job, held.get(job.pk), getattr(job, "database_now", None) or read_now(), families.get(job.pk)
            ),
        }
        for job in jobs
    ]


def describe(job: Job | int) -> dict[str, Any]:
    """Everything a screen shows about a job, from a fresh read.

    >>> describe(job)["current_step"]
    {'id': 'upload', 'title': 'Upload files', 'state': 'running', ...}
    """
    return describe_view(load_job_view(job))


def describe_view(view: JobView) -> dict[str, Any]:
    """``describe()`` of a job as ``view`` holds it: a function of those values, with no query."""
    job = view.job
    steps = sorted(view.steps, key=lambda step: (step.phase != Phase.RUN, step.position))
    summaries = [step_summary(step, job.status) for step in steps]  # each step's result redacted once
    active = [index for index, step in enumerate(steps) if step.phase == job.phase]
    first_by_state: dict[str, int] = {}
    for index in active:
        first_by_state.setdefault(steps[index].state, steps[index].position)
    position = current_position(first_by_state)
    current = next((i for i in active if steps[i].position == position), None)
    following = active[active.index(current) + 1] if current is not None and current != active[-1] else None
    done = sum(1 for i in active if steps[i].state == StepState.DONE)
    children = Counter(child.status for child in view.children)
    return {
        **_facts(job, done, len(active), view.now, children),
        "current_step": dict(summaries[current]) if current is not None else None,
        "completed_steps": [dict(summaries[i]) for i in active if steps[i].state == StepState.DONE],
        "next_step": dict(summaries[following]) if following is not None else None,
        "steps": summaries,
        **_outcome(job, view.held_back, view.database_now, children),
        "result": redact(job.result),
        "log": [{"at": _iso(entry.at), "line": entry.line} for entry in view.log],
        "children": family_summary(view.children) if view.children else None,
        "version_warning": version_warning(job, view.version_unserved),
    }


def version_warning(job: Job, unserved: bool) -> str | None:
    """Why a job that is not over may never run on: workers run, none with its kind's version
    (``unserved``, from ``store.job_version_unserved``)."""
    if job.status in TERMINAL or not job.kind_version or not unserved:
        return None
    return _("No running worker has version %(version)s of kind %(kind)s.") % {
        "version": job.kind_version,
        "kind": job.kind,
    }


def live_summary(job: Job) -> dict[str, Any]:
    """``describe()`` for a screen that refreshes itself, in a few indexed queries however big the job.

    The same keys for the job itself, its current and next step; ``completed_steps`` holds only
    the latest ``RECENT_STEPS`` (``completed_count`` says how many there are), and ``children``
    only the counts (``total``, ``by_status``, ``overall``). No steps list, log or result.
    """
    return live_summary_view(load_live_view(job))


def live_summary_view(view: LiveView) -> dict[str, Any]:
    """``live_summary()`` of a job as ``view`` holds it: a function of those values, with no query."""
    job, counts = view.job, view.children
    total = sum(counts.values())
    return {
        **_facts(job, view.completed, view.steps_total, view.now, counts),
        "current_step": step_summary(view.current, job.status) if view.current else None,
        "completed_steps": [step_summary(step, job.status) for step in view.recent],
        "completed_count": view.completed,
        "next_step": step_summary(view.following, job.status) if view.following else None,
        **_outcome(job, view.held_back, view.database_now, counts),
        "children": {"total": total, "by_status": dict(counts), "overall": overall(counts)}
        if total
        else None,
        "version_warning": version_warning(job, view.version_unserved),
    }


def children_summary(parent: Job | int) -> dict[str, Any]:
    """Per-target results of a parent's children; a partial failure never reads as success."""
    return family_summary(children_of(to_job_id(parent, _("The parent"))))


def family_summary(children: Sequence[Job]) -> dict[str, Any]:
    """``children_summary()`` of the children as read, oldest first: a function of them, with no query."""
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
