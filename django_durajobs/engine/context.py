"""``ctx``: what a run (or a revert) uses to checkpoint steps and to say what it is waiting for."""

from __future__ import annotations

from collections.abc import Callable
from datetime import datetime, timedelta
from functools import cached_property
from typing import TYPE_CHECKING, Any, TypeVar

from django.db import transaction
from django.utils import timezone

from ..conf import get_setting
from ..errors import JobError, LeaseLost
from ..models import Job, JobStep
from ..registry import JobKind, name_problem
from ..status import EXTERNAL_WAITS, Phase, Status, StepState
from ..store import StepRowMissing, children_wait_reason, database_trouble, enqueue, open_children
from .describe import children_summary
from .redact import describe_exception, shown_text
from .values import check_message, short_repr, to_json

if TYPE_CHECKING:
    from ..store import Lease

T = TypeVar("T")


class Interrupt(BaseException):
    """Ends a run early without failing it.

    A ``BaseException``, like ``GeneratorExit``: a job's own ``except Exception`` must not
    swallow a wait or a cancellation.
    """

    step_state = StepState.PENDING
    detail = ""


class WaitInterrupt(Interrupt):
    step_state = StepState.WAITING

    def __init__(self, reason: str, resume_at: datetime | None, status: str) -> None:
        self.detail = reason
        self.resume_at = resume_at
        self.status = status


class WaitForChildrenInterrupt(WaitInterrupt):
    def __init__(self, reason: str) -> None:
        super().__init__(reason, None, Status.AWAITING_EXTERNAL)


class NeedsUserInterrupt(Interrupt):
    step_state = StepState.NEEDS_USER

    def __init__(self, message: str, actions: list[dict[str, Any]] | None) -> None:
        self.detail = message
        self.actions = actions


class RetryLaterInterrupt(Interrupt):
    def __init__(self, seconds: float, reason: str) -> None:
        self.seconds = seconds
        self.detail = reason


class CancelInterrupt(Interrupt):
    pass


def _moment(value: datetime | timedelta | None, name: str) -> datetime | None:
    if value is None:
        return None
    if isinstance(value, timedelta):
        try:
            return timezone.now() + value
        except OverflowError:
            raise JobError("invalid_input", f"{name} is past the last date a database stores.") from None
    if isinstance(value, datetime) and timezone.is_aware(value):
        return value
    raise JobError(
        "invalid_input", f"{name} must be a timezone-aware datetime or a timedelta, not {short_repr(value)}."
    )


#: An offered action's id becomes the job's ``resume_action`` when it is chosen.
ACTION_ID_MAX_LENGTH = Job._meta.get_field("resume_action").max_length


def _normalise_actions(actions: Any) -> list[dict[str, Any]] | None:
    """The offered actions as ``[{"id", "label", …}]``: at most ``MAX_ACTIONS``, each id unique and
    short enough to be chosen, each text a message's length at most."""
    if actions is None:
        return None
    actions = list(actions)
    limit = get_setting("MAX_ACTIONS")
    if len(actions) > limit:
        raise JobError(
            "invalid_input",
            f"{len(actions):,} actions are offered; the limit is {limit} (DURAJOBS['MAX_ACTIONS']).",
        )
    normalised: list[dict[str, Any]] = []
    for action in actions:
        entry = {"id": action, "label": action} if isinstance(action, str) else dict(action)
        action_id = entry.get("id")
        if not isinstance(action_id, str) or not action_id or len(action_id) > ACTION_ID_MAX_LENGTH:
            raise JobError(
                "invalid_input",
                f"Each offered action needs an id of 1 to {ACTION_ID_MAX_LENGTH} characters, "
                f"not {short_repr(action)}.",
            )
        if any(known["id"] == action_id for known in normalised):
            raise JobError("invalid_input", f"The action {action_id!r} is offered twice.")
        entry.setdefault("label", action_id)
        for key, text in entry.items():
            if isinstance(text, str):
                check_message(text, f"The action {action_id!r}'s {key}")
        normalised.append(entry)
    return to_json(normalised, what="The offered actions")


def step_result(value: Any, step_id: str | None = None) -> Any:
    """A step's (or, without ``step_id``, the run's) result as it is stored, or ``JobError``."""
    return to_json(
        value,
        what=f"The result of step {step_id!r}" if step_id else "The job's result",
        code="unserializable_result",
        max_bytes=get_setting("MAX_RESULT_BYTES"),
        setting="MAX_RESULT_BYTES",
    )


class JobContext:
    """Passed to a kind's ``run(job, ctx)`` and ``revert(job, ctx)``."""

    def __init__(self, lease: Lease, kind: JobKind, *, reverting: bool) -> None:
        self._lease = lease
        self.kind = kind
        self.job: Job = lease.job
        self.reverting = reverting
        self.phase = Phase.REVERT if reverting else Phase.RUN
        self.interrupted_step: JobStep | None = None
        self.resume_action: str | None = self.job.resume_action or None
        self.resume_data: Any = self.job.resume_data
        self.logged = False  # whether this run wrote log lines (the log may need trimming)
        self._steps_from_rows = False  # whether self.steps was read from the database

    @cached_property
    def first_run(self) -> bool:
        """Whether this is the job's first claim: the claim set both timestamps to its own time."""
        return self.job.started_at == self.job.updated_at

    @cached_property
    def steps(self) -> dict[str, JobStep]:
        """This phase's checkpoints, as of when the run first meets a step (a job without steps never).

        On a first run nothing but the enqueue has written them, so they are the kind's declared
        steps, all pending, and need not be read.
        """
        if self.first_run and not self._steps_from_rows:
            declared = self.kind.steps if self.phase == Phase.RUN else ()
            return {
                step_id: JobStep(
                    job_id=self.job.pk, phase=self.phase, position=position, step_id=step_id, title=title
                )
                for position, (step_id, title) in enumerate(declared)
            }
        self._steps_from_rows = True
        rows = JobStep.objects.filter(job_id=self.job.pk, phase=self.phase).order_by("position")
        return {step.step_id: step for step in rows}

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

    def step(self, step_id: str, fn: Callable[[], T], title: str | None = None, atomic: bool = False) -> T:
        """Run ``fn`` once for this job and return its result; on replay, return the stored result.

        ``atomic=True`` runs ``fn`` and the checkpoint in one transaction, so a step whose effects
        are writes to this database happens exactly once.
        """
        problem = name_problem(step_id, "A step id")
        if problem:
            raise JobError("invalid_input", problem)
        step = self.steps.get(step_id)
        if step is not None and step.state == StepState.DONE:
            return step.result
        create = step is None
        if create:
            self._check_room_for_a_step()
            # The last step known is the last by position: rows are read in that order, and
            # new ones are appended.
            position = next(reversed(self.steps.values())).position + 1 if self.steps else 0
            step = JobStep(
                job_id=self.job.pk,
                phase=self.phase,
                position=position,
                step_id=step_id,
                title=shown_text(title or step_id, 255),
            )
            self.steps[step_id] = step
        try:
            started = self._lease.start_step(
                step,
                create=create,
                state=StepState.RUNNING,
                started_at=timezone.now(),
                ended_at=None,
                detail="",
                error="",
            )
        except StepRowMissing:
            if self._steps_from_rows:
                raise LeaseLost(f"Step {step_id!r} of job {self.job.pk} has no row.") from None
            # The kind's declaration changed since this job was enqueued: go by its rows instead.
            self._steps_from_rows = True
            del self.steps
            return self.step(step_id, fn, title=title, atomic=atomic)
        if not started and not self.reverting:  # a step boundary is where a cancel request is seen
            raise CancelInterrupt()
        try:
            if atomic:
                with transaction.atomic():
                    result = step_result(fn(), step_id)
                    self._done(step, result)
            else:
                result = step_result(fn(), step_id)
                self._done(step, result)
        except Interrupt as interrupt:
            self.interrupted_step = step
            self._lease.save_step(step, state=interrupt.step_state, detail=interrupt.detail)
            raise
        except Exception as exc:
            if isinstance(exc, LeaseLost) or database_trouble(exc):
                raise
            self._lease.save_step(
                step, state=StepState.FAILED, ended_at=timezone.now(), error=describe_exception(exc)
            )
            raise
        return result

    def _check_room_for_a_step(self) -> None:
        limit = get_setting("MAX_STEPS")
        if len(self.steps) >= limit:
            raise JobError(
                "invalid_input",
                f"Job {self.job.pk} already has {len(self.steps):,} steps; the limit is {limit:,} "
                "(DURAJOBS['MAX_STEPS']).",
            )

    def _done(self, step: JobStep, result: Any) -> None:
        self._lease.save_step(step, state=StepState.DONE, ended_at=timezone.now(), result=result)

    # Visible state -----------------------------------------------------------------------------

    def log(self, line: Any) -> None:
        """Add a line to the job's log (redacted and shortened before it is stored)."""
        self._lease.log(line)
        self.logged = True

    def progress(self, pct: float) -> None:
        if isinstance(pct, bool) or not isinstance(pct, (int, float)) or pct != pct:
            raise JobError("invalid_input", f"Progress must be a number from 0 to 100, not {pct!r}.")
        self._lease.renew(progress=max(0, min(100, round(pct))))

    def eta(self, at: datetime | timedelta | None) -> None:
        self._lease.renew(eta_at=_moment(at, "The ETA"))

    # Leaving the run early ---------------------------------------------------------------------

    def _no_waiting_in_revert(self, what: str) -> None:
        if self.reverting:
            raise JobError("invalid_input", f"A revert cannot {what}; it runs to its end or fails.")

    def wait_external(
        self,
        reason: str,
        resume_at: datetime | timedelta | None = None,
        status: str = Status.AWAITING_EXTERNAL,
    ) -> None:
        """Park the job until ``resume()`` is called or ``resume_at`` comes; the run is re-entered then."""
        self._no_waiting_in_revert("wait for an outside event")
        self.check_cancel()
        if status not in EXTERNAL_WAITS:
            allowed = ", ".join(sorted(EXTERNAL_WAITS))
            raise JobError(
                "invalid_input", f"{status!r} is not a waiting status a run can choose; use one of {allowed}."
            )
        raise WaitInterrupt(
            shown_text(check_message(str(reason), "The wait reason")), _moment(resume_at, "resume_at"), status
        )

    def wait_for_children(self) -> dict[str, Any]:
        """Return the children summary once every child job has settled; until then, wait.

        The job sleeps in ``awaiting_external`` (a revert stays ``reverting``) and is woken by
        the child that settles last; the re-entered run gets here again and receives the summary.
        """
        self.check_cancel()
        still_open, total = open_children(self.job.pk)
        if still_open:
            raise WaitForChildrenInterrupt(children_wait_reason(still_open, total))
        return children_summary(self.job)

    def enqueue_child(self, kind: str, key: str, **kwargs: Any) -> Job:
        """Create a child job once, however often this line runs: its idempotency key is derived
        from this job and ``key`` (the target, such as a server name)."""
        child, _ = enqueue(kind, parent=self.job, idempotency_key=f"child:{self.job.pk}:{key}", **kwargs)
        return child

    def needs_user(self, message: str, actions: Any = None) -> None:
        """Stop until a person answers; ``actions`` (ids, or ``{"id", "label"}`` dicts) become buttons."""
        self._no_waiting_in_revert("wait for a person's decision")
        self.check_cancel()
        raise NeedsUserInterrupt(
            shown_text(check_message(str(message), "The question")), _normalise_actions(actions)
        )

    def retry_later(self, seconds: float | timedelta, reason: str | None = None) -> None:
        """Run again in ``seconds``; this is not a failure and uses no attempt."""
        if isinstance(seconds, timedelta):
            seconds = seconds.total_seconds()
        if isinstance(seconds, bool) or not isinstance(seconds, (int, float)) or not seconds >= 0:
            raise JobError(
                "invalid_input",
                f"retry_later needs a delay of zero seconds or more, not {short_repr(seconds)}.",
            )
        try:
            timezone.now() + timedelta(seconds=seconds)
        except OverflowError:
            raise JobError(
                "invalid_input",
                f"retry_later's delay of {seconds:g} s is past the last date a database stores.",
            ) from None
        self.check_cancel()
        raise RetryLaterInterrupt(float(seconds), shown_text(check_message(str(reason or ""), "The reason")))

    def check_cancel(self) -> None:
        """Stop here if an operator asked to cancel (done automatically at every step boundary)."""
        if not self.reverting and self._lease.cancel_requested():
            raise CancelInterrupt()
