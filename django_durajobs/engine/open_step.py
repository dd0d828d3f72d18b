"""A step ``JobContext.open_step`` opened: what its later parts need, sync or async."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from ..models import JobStep


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
