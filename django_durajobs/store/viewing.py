"""What a screen shows of one job, read at once: ``describe()`` (``engine/describe.py``) is a
function of a ``JobView`` and makes no query of its own. A few queries, however many steps, log
lines and children the job has: the job with the database's clock, its steps, its latest log
lines, its children; and, only when they can matter, the workers (is its version served) and
the limits (what holds it back). ``live_summary()``, for a screen that refreshes itself, is a
function of a ``LiveView``: the steps counted, and only the few rows it names read."""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass
from datetime import datetime

from django.db.models import Count, Max, Min
from django.utils import timezone
from django.utils.translation import gettext as _

from ..conf import get_setting
from ..errors import JobError
from ..models import Job, JobLog, JobStep
from ..status import CURRENT_STEP_STATES, TERMINAL, StepState, current_position
from ..values import to_job_id
from .database import DatabaseNow, database_now
from .family import children_counts, children_of
from .holding import held_back_reason
from .workers import version_unserved


@dataclass(frozen=True)
class JobView:
    """One job as read at one moment, everything ``describe()`` needs."""

    job: Job
    #: Its steps of both phases, in the database's order (phase, then position).
    steps: tuple[JobStep, ...]
    #: Its latest ``LOG_LINES_KEPT`` log lines, oldest first.
    log: tuple[JobLog, ...]
    #: Its children, oldest first, with ``store.family.CHILD_FIELDS`` only.
    children: tuple[Job, ...]
    #: The database's clock, which judges its lease.
    database_now: datetime
    #: The application's clock, which words its next run ("in 5 minutes").
    now: datetime
    #: Why a limit holds it back now, if one does.
    held_back: str | None
    #: Whether it has not ended, and workers run none of them with its version of its kind.
    version_unserved: bool


def load_job_view(job: Job | int) -> JobView:
    """A fresh read of the job and all ``describe()`` shows of it; ``job_not_found`` if it is gone."""
    pk = to_job_id(job)
    found = Job.objects.annotate(database_now=DatabaseNow()).filter(pk=pk).first()
    if found is None:
        raise JobError("job_not_found", _("Job %(job)s does not exist.") % {"job": pk})
    keep = get_setting("LOG_LINES_KEPT")
    return JobView(
        job=found,
        steps=tuple(JobStep.objects.filter(job_id=pk)),
        log=tuple(JobLog.objects.filter(job_id=pk).order_by("-id")[:keep])[::-1],
        children=children_of(pk),
        database_now=found.database_now,
        now=timezone.now(),
        held_back=held_back_reason(found),
        version_unserved=job_version_unserved(found, found.database_now),
    )


def job_version_unserved(job: Job, now: datetime | None = None) -> bool:
    """Whether a job that has not ended may never run on: workers run, none with its kind's
    version (no query for a job that has ended or has no version)."""
    if job.status in TERMINAL or not job.kind_version:
        return False
    return version_unserved(job.kind, job.kind_version, now)


#: How many of its latest completed steps a ``LiveView`` holds.
RECENT_STEPS = 3


@dataclass(frozen=True)
class LiveView:
    """One job as a self-refreshing screen needs it: read in a few indexed queries, however many
    steps and children it has."""

    job: Job
    #: Its steps in its phase: how many in all, and how many done.
    steps_total: int
    completed: int
    current: JobStep | None
    following: JobStep | None
    #: Its latest ``RECENT_STEPS`` done steps, oldest first.
    recent: tuple[JobStep, ...]
    #: Its children, counted per status.
    children: Counter[str]
    database_now: datetime
    now: datetime
    held_back: str | None
    version_unserved: bool


def load_live_view(job: Job) -> LiveView:
    """What ``live_summary()`` shows of ``job`` (as read): its steps counted per state, the
    current, next and latest done ones, its children counted."""
    steps = JobStep.objects.filter(job_id=job.pk, phase=job.phase)
    # Per state: how many steps, and the first and last position (``durajobs_step_order`` finds each).
    states = {
        state: (number, first, last)
        for state, number, first, last in steps.values_list("state")
        .annotate(Count("id"), Min("position"), Max("position"))
        .order_by()
    }
    position = current_position({state: first for state, (_number, first, _last) in states.items()})
    current = following = None
    if position is not None:
        current = steps.filter(position=position, state__in=(*CURRENT_STEP_STATES, StepState.PENDING)).first()
        following = steps.filter(position__gt=position).order_by("position").first()
    completed, _first, last_done = states.get(StepState.DONE, (0, None, None))
    recent: tuple[JobStep, ...] = ()
    if completed:
        done = steps.filter(state=StepState.DONE, position__lte=last_done).order_by("-position")
        recent = tuple(done[:RECENT_STEPS])[::-1]
    clock = getattr(job, "database_now", None) or database_now()
    return LiveView(
        job=job,
        steps_total=sum(number for number, _first, _last in states.values()),
        completed=completed,
        current=current,
        following=following,
        recent=recent,
        children=children_counts([job.pk]).get(job.pk, Counter()),
        database_now=clock,
        now=timezone.now(),
        held_back=held_back_reason(job),
        version_unserved=job_version_unserved(job, clock),
    )
