"""Helpers for testing your own job kinds with the real engine and your real test database.

Nothing is mocked: ``run_job`` claims and runs jobs through the code ``manage.py runjobs`` runs,
so checkpoints, retries, waits, questions and children behave as in production::

    from django_durajobs.testing import answer, assert_steps_ran, clock, run_job

    def test_refund_asks_then_pays(db):
        job, _ = refund_order.enqueue(subject={"order": 7})
        assert run_job(job).status == "needs_user"
        assert answer(job, "approve").status == "done"
        assert_steps_ran(job, ["check", "pay"])

Time: a job scheduled for later (a retry's backoff, ``ctx.retry_later``, a timed
``ctx.wait_external``) runs only once the test moves the clock with ``clock()``, which needs
time-machine (``pip install 'django-durajobs[testing]'``). The engine decides what is due with
Python's clock (``timezone.now()``, passed to the claim as a parameter), while leases are judged
by the database server's clock (``DatabaseNow``), which no test can move. So moving the clock
forward makes retries and timed waits due on every database, and never makes a lease look
expired: to test a lost worker, backdate the job's ``locked_at`` and call ``recover()``. A
clock moved inside a step (or between two) also moves the clock timeouts are judged on, so a
step or a job passes its ``timeout`` without a test waiting for it.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from datetime import datetime, timedelta
from typing import Any

from django.db.models import QuerySet
from django.utils import timezone

from . import clock as run_clock
from .draining import drain
from .models import Job, JobStep
from .ops import get_job, resume
from .status import EXTERNAL_WAITS, TERMINAL, WAITING, Phase, StepState

__all__ = ["Clock", "answer", "assert_steps_ran", "clock", "run_job", "step_states"]

#: Waiting statuses that only a person's resume, retry or cancel ends (no clock wakes them).
RESUMED_BY_SOMEONE = WAITING - EXTERNAL_WAITS
#: More runs than any test of one job needs; a job that still has not come to rest loops.
DEFAULT_MAX_RUNS = 100


def run_job(job: Job | int, *, max_runs: int = DEFAULT_MAX_RUNS) -> Job:
    """Run ``job`` in this thread until it comes to rest, and return its fresh row.

    At rest means that nothing more happens to it until someone acts or the clock moves: it is
    done, failed, cancelled or reverted, waits for a person, an outside event or an operator,
    or is queued for later. Each due claim runs through ``drain()``, one job at a time, as a
    worker would, so a parent that waits for its children runs them too (and any other job
    due meanwhile). Raises ``AssertionError`` when the job is still not at rest after
    ``max_runs`` runs.
    """
    current = get_job(job)
    runs = 0
    while not _at_rest(current):
        if runs >= max_runs:
            raise AssertionError(
                f"Job {current.pk} ({current.kind}) is still {current.status} after {max_runs} runs:\n"
                f"{_steps_table(current)}"
            )
        ran = drain(max_jobs=1)
        current = get_job(current.pk)
        if not ran:  # nothing is due: what the job waits for needs someone else
            break
        runs += ran
    return current


def answer(
    job: Job | int,
    action: str,
    data: Any = None,
    *,
    by: Any = None,
    run: bool = True,
    max_runs: int = DEFAULT_MAX_RUNS,
) -> Job:
    """Answer the question ``job`` asks (``ctx.needs_user``) with ``action``, as a person would.

    The job is resumed by ``by`` (a user, or a name for its log) with ``action`` and ``data``
    (``ctx.resume_action``, ``ctx.resume_data``) and, with ``run``, run on to its next rest
    (``run_job``). An action the job does not offer raises ``JobError("invalid_input")``, as in
    the admin.
    """
    resumed = resume(job, by=by, action=action, data=data)
    return run_job(resumed, max_runs=max_runs) if run else resumed


def step_states(job: Job | int, *, phase: str = Phase.RUN) -> list[tuple[str, str]]:
    """The job's steps as ``(step id, state)`` pairs in their order; ``phase="revert"`` for its revert's."""
    return list(_steps(job, phase).values_list("step_id", "state"))


def assert_steps_ran(job: Job | int, expected: Sequence[str], *, phase: str = Phase.RUN) -> None:
    """Assert that exactly the steps ``expected`` ran to their end, in the job's step order.

    A finished step is checkpointed and never runs again, so each of them ran once. The
    message of a failed assertion lists every step with its state (and error), to show what ran.
    """
    current = get_job(job)
    finished = [step_id for step_id, state in step_states(current, phase=phase) if state == StepState.DONE]
    if finished != list(expected):
        raise AssertionError(
            f"Job {current.pk} ({current.kind}, {current.status}): expected the {phase} steps "
            f"{list(expected)} to have run, but {finished} did:\n{_steps_table(current, phase)}"
        )


class Clock:
    """The clock the engine reads, held by time-machine while a test runs; see ``clock()``."""

    def __init__(self, traveller: Any) -> None:
        self._traveller = traveller

    def now(self) -> datetime:
        """The current moment as the engine sees it (``timezone.now()``)."""
        return timezone.now()

    def move(self, by: timedelta | float) -> datetime:
        """Move the clock forward by ``by`` (a timedelta or seconds); returns the new moment."""
        delta = by if isinstance(by, timedelta) else timedelta(seconds=by)
        if delta < timedelta(0):
            raise ValueError(f"The clock moves forward only, not by {delta}.")
        self._traveller.shift(delta)
        run_clock.move(delta.total_seconds())  # the clock a run's timeouts are judged on
        return timezone.now()

    def move_to(self, at: datetime) -> datetime:
        """Move the clock forward to ``at`` (a job's ``next_run_at``, say); returns it."""
        return self.move(at - timezone.now())


@contextmanager
def clock(start: datetime | None = None, *, tick: bool = False) -> Iterator[Clock]:
    """Hold the engine's clock at ``start`` (now by default) until the block ends.

    The clock stands still unless ``tick`` (so stored times are exact) and moves with
    ``Clock.move``; a job whose time comes is then run by ``run_job``::

        with clock() as now:
            assert run_job(job).status == "queued"  # its first try failed; retried in 30 s
            now.move(30)
            assert run_job(job).status == "done"
    """
    try:
        import time_machine
    except ImportError as missing:
        raise ImportError(
            "django_durajobs.testing.clock() moves the clock with time-machine: "
            "pip install 'django-durajobs[testing]' (or time-machine)."
        ) from missing
    with time_machine.travel(start or timezone.now(), tick=tick) as traveller:
        yield Clock(traveller)


def _at_rest(job: Job) -> bool:
    """Whether nothing happens to ``job`` until someone acts or the clock moves."""
    if job.status in TERMINAL or job.status in RESUMED_BY_SOMEONE:
        return True
    if job.waits_for_children:
        return False  # its children run meanwhile
    # Queued, a revert, or waiting for an outside event: at rest until its time comes, if ever.
    if job.next_run_at is None:
        return job.status in WAITING
    return job.next_run_at > timezone.now()


def _steps(job: Job | int, phase: str) -> QuerySet[JobStep]:
    return JobStep.objects.filter(job_id=job.pk if isinstance(job, Job) else job, phase=phase).order_by(
        "position"
    )


def _steps_table(job: Job, phase: str = Phase.RUN) -> str:
    """One line per step: its id, its state and any error, for an assertion's message."""
    rows = [
        f"  {step.step_id}: {step.state}{f' ({step.error})' if step.error else ''}"
        for step in _steps(job, phase)
    ]
    return "\n".join(rows) or "  (no steps)"
