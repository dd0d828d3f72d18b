"""``ctx``: what a run (or a revert) uses to checkpoint steps and to say what it is waiting for.

Over 400 lines: ``ctx``'s members are one documented surface; the step's own work is in
``open_step``.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable
from datetime import datetime, timedelta
from functools import cached_property
from typing import TYPE_CHECKING, Any, TypeVar

from asgiref.sync import iscoroutinefunction
from django.utils import timezone
from django.utils.translation import gettext as _
from django.utils.translation import gettext_lazy

from .. import telemetry
from ..clock import monotonic
from ..conf import get_setting
from ..errors import JobError, JobTimeout, LeaseLost, raised_by_the_job
from ..family import wait_reason as children_wait_reason
from ..models import Job, JobStep
from ..redaction import describe_exception, shown_text
from ..registry import JobKind, name_problem
from ..status import EXTERNAL_WAITS, Phase, Status, StepState
from ..store import StepRowMissing, database_trouble
from ..store.checkpoints import declared_steps
from ..transitions import Trigger, allows
from ..values import check_message, label, readable_id, short_repr, to_timeout
from .describe import family_summary
from .interrupts import (
    STOPS,
    Interrupt,
    NeedsUserInterrupt,
    RetryLaterInterrupt,
    WaitForChildrenInterrupt,
    WaitInterrupt,
)
from .open_step import OpenStep, StartedAhead, running_fields, step_result
from .waits import moment, offered_actions

if TYPE_CHECKING:
    from .ports import RunStore

T = TypeVar("T")

#: What the checks of every step name in their error messages (translated only then).
A_STEP_ID = gettext_lazy("A step id")
TIMEOUT_OF_STEP = gettext_lazy("Step %(step)s's timeout")


class JobContext:
    """Passed to a kind's ``run(job, ctx)`` and ``revert(job, ctx)``."""

    def __init__(self, lease: RunStore, kind: JobKind, *, reverting: bool) -> None:
        self._lease = lease
        self.kind = kind
        self.job: Job = lease.job
        self.reverting = reverting
        self.phase = Phase.REVERT if reverting else Phase.RUN
        self.interrupted_step: JobStep | None = None
        self.resume_action: str | None = self.job.resume_action or None
        self.resume_data: Any = self.job.resume_data
        self.logged = False  # whether this run wrote log lines (the log may need trimming)
        self.event_waits: Counter[str] = Counter()  # how often this run waited for each event
        self._steps_from_rows = False  # whether self.steps was read from the database
        self.started_ahead = StartedAhead(lease)
        self.span: Any = None  # the attempt's OpenTelemetry span (django_durajobs.telemetry), or None
        #: When this try is past the job's timeout, on ``clock.monotonic()``: counted from the
        #: claim (``claimed_at``).
        self.deadline = lease.claimed_at + self.job.timeout if self.job.timeout else None
        lease.deadline = self.deadline
        self.version: str = self.job.kind_version or kind.version
        if self.job.step_started_by_claim is not None and not reverting:
            self._started_by_the_claim(self.job.step_started_by_claim)

    @cached_property
    def first_run(self) -> bool:
        """Whether this is the job's first claim (the claim set both timestamps to its own time), and
        it is not a rerun, which starts with the checkpoints it reuses."""
        return self.job.started_at == self.job.updated_at and self.job.rerun_of_id is None

    @cached_property
    def steps(self) -> dict[str, JobStep]:
        """This phase's checkpoints, as of when the run first meets a step (a job without steps never).

        On a first run nothing but the enqueue has written them, so they are the kind's declared
        steps, all pending, and need not be read.
        """
        if self.first_run and not self._steps_from_rows:
            declared = self.kind.step_rows() if self.phase == Phase.RUN else []
            return {step.step_id: step for step in declared_steps(self.job.pk, self.phase, declared)}
        self._steps_from_rows = True
        return {step.step_id: step for step in self._lease.steps(self.phase)}

    def _started_by_the_claim(self, step_id: str) -> None:
        """The claim marked the first declared step running (``store/checkpoints.py``): the run
        finds it started ahead, as a checkpoint's successor."""
        step = self.steps.get(step_id)
        if step is not None and step.position == 0:
            step.state, step.started_at = StepState.RUNNING, self.job.updated_at
        else:  # the kind's declaration is not the one the job was enqueued with
            self.go_by_rows()
            step = self.steps.get(step_id)
        if step is not None:
            self.started_ahead.started(step, since=self._lease.claimed_at)

    def go_by_rows(self) -> None:
        """Read the checkpoints from their rows: the kind's declaration is not the job's."""
        self._steps_from_rows = True
        self.__dict__.pop("steps", None)

    def check_version(self) -> None:
        """Before a run: what ``on_version_change`` says when the job started under another version."""
        from .versions import check_version  # it builds on this module

        check_version(self.kind, self, self._lease)

    def steps_marked_by_an_earlier_run(self) -> list[JobStep]:
        """The checkpoints, when an earlier run may have marked one (a first run has none)."""
        return [] if self.first_run else list(self.steps.values())

    @property
    def attempt(self) -> int:
        return self.job.attempt

    @property
    def worker_id(self) -> str:
        return self._lease.worker_id

    # Steps -------------------------------------------------------------------------------------

    def step(
        self,
        step_id: str,
        fn: Callable[[], T],
        title: str | None = None,
        atomic: bool = False,
        timeout: float | timedelta | None = None,
    ) -> T:
        """Run ``fn`` once for this job and return its result; on replay, return the stored result.

        ``atomic=True`` runs ``fn`` and the checkpoint in one transaction, so a step whose effects
        are writes to this database happens exactly once. ``timeout`` (seconds or a timedelta):
        a step still running past it fails the try with ``error_code="timeout"``, and its result
        is not kept.
        """
        if iscoroutinefunction(fn):
            raise JobError(
                "invalid_input",
                _("Step %(step)s is an async function; only an async job (async def) can await it.")
                % {"step": repr(step_id)},
            )
        opened = self.open_step(step_id, title, timeout)
        if opened.replayed:
            return opened.result  # type: ignore[no-any-return]  # what fn returned, read back from JSON
        try:
            return self.run_step(opened, fn, atomic)
        except BaseException as raised:
            if raised_by_the_job(raised):
                self.step_raised(opened, raised)
            raise
        finally:
            self.step_over(opened)

    # The parts of a step, in their order; ``AsyncJobContext.step`` goes through the same ones.

    def open_step(self, step_id: str, title: str | None, timeout: float | timedelta | None) -> OpenStep:
        """The step's stored result when it is done; otherwise the step, marked running.

        Raises an ``Interrupt`` when an operator asked to stop the job here, and ``JobTimeout``
        when the try is past its timeout.
        """
        problem = name_problem(step_id, A_STEP_ID)
        if problem:
            raise JobError("invalid_input", problem)
        seconds = to_timeout(timeout, label(TIMEOUT_OF_STEP, {"step": repr(step_id)}))
        step = self.steps.get(step_id)
        if step is not None and step.state in (StepState.DONE, StepState.SKIPPED):
            return OpenStep(step, seconds, replayed=True)
        self._check_deadline()
        create = step is None
        if step is None:
            self._check_room_for_a_step()
            # The last step known is the last by position: rows are read in that order, and
            # new ones are appended.
            position = next(reversed(self.steps.values())).position + 1 if self.steps else 0
            step = JobStep(
                job_id=self.job.pk,
                phase=self.phase,
                position=position,
                step_id=step_id,
                title=shown_text(title or readable_id(step_id), 255),
            )
            self.steps[step_id] = step
        ahead = self.started_ahead.step
        if ahead is not None and step is ahead:
            stop = None if self.started_ahead.read_lately else self._lease.stop_requested()
            opened = self._started(step, step_id, seconds, stop)
            self.started_ahead.taken()  # after its timeout is the worker's to watch: no moment unwatched
            return opened
        if ahead is not None:  # the run goes another way than its declaration: that one waits again
            self.started_ahead.taken()
            self._lease.save_step(ahead, state=StepState.PENDING, started_at=None)
        try:
            stop = self._lease.start_step(step, create=create, **running_fields())
        except StepRowMissing:
            if self._steps_from_rows:
                raise LeaseLost(f"Step {step_id!r} of job {self.job.pk} has no row.") from None
            self.go_by_rows()  # the kind's declaration changed since this job was enqueued
            return self.open_step(step_id, title, timeout)
        return self._started(step, step_id, seconds, stop)

    def _started(self, step: JobStep, step_id: str, seconds: float | None, stop: str | None) -> OpenStep:
        if stop is not None and not self.reverting:  # where a cancel or pause request is seen
            raise STOPS[stop]()
        span = telemetry.start_step(self.span, self.job, step_id)
        opened = OpenStep(step, seconds, ends=self._step_deadline(seconds), span=span)
        if opened.ends is not None:  # the worker's to watch while fn runs
            self._lease.deadline, self._lease.timed_step = opened.ends, step_id
        return opened

    def run_step(self, opened: OpenStep, fn: Callable[[], T], atomic: bool = False) -> T:
        """Call ``fn`` and checkpoint its result (with ``atomic``, in one transaction)."""
        if atomic:
            with self._lease.step_transaction():
                return self.keep_result(opened, fn())
        return self.keep_result(opened, fn())

    def keep_result(self, opened: OpenStep, value: T) -> T:
        """Checkpoint what the step returned, unless it came past the step's deadline."""
        result: T = step_result(value, opened.step.step_id)
        self._refuse_late(opened.step.step_id, opened.ends, opened.seconds)
        following = None if self.reverting else self.started_ahead.successor(self.steps, opened.step)
        started = self._lease.save_step(
            opened.step,
            state=StepState.DONE,
            ended_at=timezone.now(),
            result=result,
            then_start=None if following is None else (following, running_fields()),
        )
        if started and following is not None:
            self.started_ahead.started(following)
        telemetry.end(opened.span, StepState.DONE)
        return result

    def step_raised(self, opened: OpenStep, raised: BaseException) -> None:
        """Record on the step why it did not finish: a wait, or a failure (not a lost lease or database)."""
        if isinstance(raised, Interrupt):
            self.interrupted_step = opened.step
            self._lease.save_step(opened.step, state=raised.step_state, detail=raised.detail)
            telemetry.end(opened.span, raised.step_state)
        elif not (isinstance(raised, LeaseLost) or database_trouble(raised)):
            telemetry.raised(opened.span, raised)
            self._lease.save_step(
                opened.step, state=StepState.FAILED, ended_at=timezone.now(), error=describe_exception(raised)
            )
            telemetry.end(opened.span, StepState.FAILED)

    def step_over(self, opened: OpenStep) -> None:
        """The step is no longer in flight: the worker watches the job's own deadline again."""
        telemetry.end(opened.span, "abandoned")  # unless it ended with its outcome already
        if opened.ends is not None:
            self._lease.deadline, self._lease.timed_step = self.deadline, None

    # Timeouts: judged on this process's monotonic clock, with no query --------------------------

    def _check_deadline(self) -> None:
        """At a step boundary: fail the try if it is past the job's timeout."""
        if self.deadline is not None and monotonic() >= self.deadline:
            raise JobTimeout(
                _("Job %(job)s ran past its timeout of %(seconds)s s.")
                % {"job": self.job.pk, "seconds": f"{self.job.timeout:g}"}
            )

    def _step_deadline(self, seconds: float | None) -> float | None:
        """When a step starting now must be over: its own timeout or the job's, whichever comes first."""
        if seconds is None:
            return self.deadline
        own = monotonic() + seconds
        return own if self.deadline is None else min(own, self.deadline)

    def _refuse_late(self, step_id: str, ends: float | None, seconds: float | None) -> None:
        """A step that returns past its deadline timed out: its result is not kept."""
        if ends is None or monotonic() < ends:
            return
        if ends == self.deadline:
            self._check_deadline()
        raise JobTimeout(
            _("Step %(step)s ran past its timeout of %(seconds)s s.")
            % {"step": repr(step_id), "seconds": f"{seconds:g}"}
        )

    def _check_room_for_a_step(self) -> None:
        limit = get_setting("MAX_STEPS")
        if len(self.steps) >= limit:
            raise JobError(
                "invalid_input",
                _("Job %(job)s already has %(count)s steps; the limit is %(limit)s (DURAJOBS['MAX_STEPS']).")
                % {"job": self.job.pk, "count": f"{len(self.steps):,}", "limit": f"{limit:,}"},
            )

    # Visible state -----------------------------------------------------------------------------

    def log(self, line: Any) -> None:
        """Add a line to the job's log (redacted and shortened before it is stored)."""
        self._lease.log(line)
        self.logged = True

    def progress(self, pct: float) -> None:
        if isinstance(pct, bool) or not isinstance(pct, (int, float)) or pct != pct:
            raise JobError(
                "invalid_input",
                _("Progress must be a number from 0 to 100, not %(value)s.") % {"value": repr(pct)},
            )
        self._lease.renew(progress=max(0, min(100, round(pct))))

    def eta(self, at: datetime | timedelta | None) -> None:
        self._lease.renew(eta_at=moment(at, gettext_lazy("The ETA")))

    # Leaving the run early ---------------------------------------------------------------------

    def _refuse_unless_allowed(self, trigger: Trigger, refusal: str) -> None:
        """A revert has no waiting states of its own (the transitions table has none): it gets ``refusal``."""
        if not allows(trigger, self.phase, Status.REVERTING if self.reverting else Status.RUNNING):
            raise JobError("invalid_input", refusal)

    def wait_external(
        self,
        reason: str,
        resume_at: datetime | timedelta | None = None,
        status: str = Status.AWAITING_EXTERNAL,
    ) -> None:
        """Park the job until ``resume()`` is called or ``resume_at`` comes; the run is re-entered then."""
        self._refuse_unless_allowed(
            Trigger.WAIT, _("A revert cannot wait for an outside event; it runs to its end or fails.")
        )
        self.check_cancel()
        if status not in EXTERNAL_WAITS:
            allowed = ", ".join(sorted(EXTERNAL_WAITS))
            raise JobError(
                "invalid_input",
                _("%(status)s is not a waiting status a run can choose; use one of %(allowed)s.")
                % {"status": repr(status), "allowed": allowed},
            )
        raise WaitInterrupt(
            shown_text(check_message(str(reason), _("The wait reason"))),
            moment(resume_at, "resume_at"),
            status,
        )

    def wait_for_children(self) -> dict[str, Any]:
        """Return the children summary once every child job has settled; until then, wait.

        The job sleeps in ``awaiting_external`` (a revert stays ``reverting``) and is woken by
        the child that settles last; the re-entered run gets here again and receives the summary.
        """
        self.check_cancel()
        still_open, total = self._lease.open_children()
        if still_open:
            raise WaitForChildrenInterrupt(children_wait_reason(still_open, total))
        return family_summary(self._lease.children())

    def wait_for_event(self, name: str, timeout: float | timedelta | None = None) -> Any:
        """The payload of the event ``name`` (``send_event``): at once if it was sent, else once it is.

        Until then the job waits in ``awaiting_external``. With a ``timeout`` (seconds or a
        timedelta), a wait not over by then raises ``EventTimeout``, which the run may catch.
        """
        from .events import wait_for_event  # it builds on this module

        self._refuse_unless_allowed(
            Trigger.WAIT_FOR_EVENT, _("A revert cannot wait for an event; it runs to its end or fails.")
        )
        self.check_cancel()
        return wait_for_event(self, self._lease, name, timeout)

    def enqueue_child(self, kind: str, key: str, **kwargs: Any) -> Job:
        """Create a child job once, however often this line runs: its idempotency key is derived
        from this job and ``key`` (the target, such as a server name)."""
        idempotency_key = f"child:{self.job.pk}:{key}"
        with telemetry.current(self.span):  # the child's attempts join this one's trace
            return self._lease.enqueue_child(kind, idempotency_key, **kwargs)

    def needs_user(
        self,
        message: str,
        actions: Any = None,
        deadline: datetime | timedelta | None = None,
        on_deadline: str | None = None,
    ) -> None:
        """Stop until a person answers; ``actions`` (ids, or ``{"id", "label"}`` dicts) become buttons.

        With a ``deadline`` (a datetime, or a timedelta from now), a question nobody answered by
        then is answered by itself with the offered action ``on_deadline``.
        """
        self._refuse_unless_allowed(
            Trigger.ASK, _("A revert cannot wait for a person's decision; it runs to its end or fails.")
        )
        offered = offered_actions(actions)
        at = moment(deadline, _("The deadline"))
        if (at is None) != (on_deadline is None):
            raise JobError(
                "invalid_input", _("A deadline needs an on_deadline action, and on_deadline a deadline.")
            )
        if on_deadline is not None and on_deadline not in [action["id"] for action in offered or ()]:
            raise JobError(
                "invalid_input",
                _("on_deadline must be one of the offered actions, not %(value)s.")
                % {"value": short_repr(on_deadline)},
            )
        self.check_cancel()
        raise NeedsUserInterrupt(
            shown_text(check_message(str(message), _("The question"))), offered, at, on_deadline or ""
        )

    def retry_later(self, seconds: float | timedelta, reason: str | None = None) -> None:
        """Run again in ``seconds``; this is not a failure and uses no attempt."""
        if isinstance(seconds, timedelta):
            seconds = seconds.total_seconds()
        if isinstance(seconds, bool) or not isinstance(seconds, (int, float)) or not seconds >= 0:
            raise JobError(
                "invalid_input",
                _("retry_later needs a delay of zero seconds or more, not %(value)s.")
                % {"value": short_repr(seconds)},
            )
        try:
            timezone.now() + timedelta(seconds=seconds)
        except OverflowError:
            raise JobError(
                "invalid_input",
                _("retry_later's delay of %(seconds)s s is past the last date a database stores.")
                % {"seconds": f"{seconds:g}"},
            ) from None
        self.check_cancel()
        raise RetryLaterInterrupt(
            float(seconds), shown_text(check_message(str(reason or ""), _("The reason")))
        )

    def check_cancel(self) -> None:
        """Stop here if an operator asked to cancel or to pause, or the try is past its timeout
        (done automatically at every step boundary, and before a wait)."""
        self._check_deadline()
        if not self.reverting:
            stop = self._lease.stop_requested()
            if stop is not None:
                raise STOPS[stop]()
