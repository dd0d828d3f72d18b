"""How a run (or a revert) ends short of its end without failing: a wait, a question, a retry
later, an operator's cancel or pause, each raised out of the job's own code by ``ctx`` and
caught by the runner."""

from __future__ import annotations

from datetime import datetime
from typing import Any

from ..status import Status, StepState


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

    def __init__(
        self,
        message: str,
        actions: list[dict[str, Any]] | None,
        deadline: datetime | None = None,
        on_deadline: str = "",
    ) -> None:
        self.detail = message
        self.actions = actions
        self.deadline = deadline
        self.on_deadline = on_deadline


class RetryLaterInterrupt(Interrupt):
    def __init__(self, seconds: float, reason: str) -> None:
        self.seconds = seconds
        self.detail = reason


class CancelInterrupt(Interrupt):
    """An operator's cancel, seen at a step boundary."""


class PauseInterrupt(Interrupt):
    """An operator's pause, seen at a step boundary."""


#: What ends a run when an operator asked for it (``Lease.stop_requested()``).
STOPS = {"cancel": CancelInterrupt, "pause": PauseInterrupt}
