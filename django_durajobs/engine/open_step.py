"""A step ``JobContext.open_step`` opened: what its later parts need, sync or async; and the step
a checkpoint started ahead of its run."""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from django.utils import timezone
from django.utils.translation import gettext_lazy

from ..clock import monotonic
from ..conf import get_setting
from ..models import JobStep
from ..status import StepState
from ..values import label, to_json

if TYPE_CHECKING:
    from .ports import RunStore

RESULT_OF_STEP = gettext_lazy("The result of step %(step)s")
RESULT_OF_THE_JOB = gettext_lazy("The job's result")


def step_result(value: Any, step_id: str | None = None) -> Any:
    """A step's (or, without ``step_id``, the run's) result as it is stored, or ``JobError``."""
    return to_json(
        value,
        what=label(RESULT_OF_STEP, {"step": repr(step_id)}) if step_id else RESULT_OF_THE_JOB,
        code="unserializable_result",
        max_bytes=get_setting("MAX_RESULT_BYTES"),
        setting="MAX_RESULT_BYTES",
    )


@dataclass(frozen=True, slots=True)
class OpenStep:
    """A step ``JobContext.open_step`` started (or, ``replayed``, found done), with its timeout
    in seconds and when it must be over, on ``time.monotonic()``."""

    step: JobStep
    seconds: float | None
    ends: float | None = None
    replayed: bool = False
    span: Any = None  # its OpenTelemetry span (django_durajobs.telemetry), or None

    @property
    def result(self) -> Any:
        return self.step.result


#: How long a cancel or pause request read with a checkpoint still counts as read at the next
#: step's start: past it (the run did other work between its steps), the start reads it again.
STOP_READ_LATELY = 0.05


def running_fields() -> dict[str, Any]:
    """What a step's row says once it runs."""
    return {
        "state": StepState.RUNNING,
        "started_at": timezone.now(),
        "ended_at": None,
        "detail": "",
        "error": "",
    }


class StartedAhead:
    """The step a checkpoint marked running with it (``store/checkpoints.py``), before the run
    opened it: one statement per step instead of two. Put back to pending when the run ends
    without opening it. The lease knows it too: a worker giving the job up puts it back."""

    def __init__(self, lease: RunStore) -> None:
        self._lease = lease
        self.step: JobStep | None = None
        self._since = 0.0
        self._after: dict[str, JobStep] = {}
        self._after_of: dict[str, JobStep] | None = None
        #: Steps started ahead that the run never opened, back to pending: for its outcome to write.
        self.put_back: list[JobStep] = []

    def successor(self, steps: dict[str, JobStep], done: JobStep) -> JobStep | None:
        """The pending step whose row follows ``done``'s: the one the run most likely opens next."""
        if self._after_of is not steps:  # read once per set of rows: no walk per step
            ordered = sorted(steps.values(), key=lambda step: step.position)
            self._after = {step.step_id: after for step, after in zip(ordered, ordered[1:], strict=False)}
            self._after_of = steps
        following = self._after.get(done.step_id)
        return following if following is not None and following.state == StepState.PENDING else None

    def started(self, step: JobStep, since: float | None = None) -> None:
        """``step`` was marked running with a write that read the stop requests ``since`` (by default now)."""
        self.step, self._since = step, monotonic() if since is None else since
        self._lease.step_started_ahead = step.step_id

    @property
    def read_lately(self) -> bool:
        """Whether the stop requests read with the checkpoint still count for the step's start."""
        return monotonic() - self._since <= STOP_READ_LATELY

    def taken(self) -> None:
        """The run opened it, or another step instead."""
        self.step = self._lease.step_started_ahead = None

    def end(self) -> None:
        """The run is over: a step started ahead and never opened goes back to pending."""
        if self.step is not None:
            self.step.state, self.step.started_at = StepState.PENDING, None
            self.put_back.append(self.step)
            self.step = self._lease.step_started_ahead = None
