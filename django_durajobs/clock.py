"""The clock a run's timeouts are judged on: this process's monotonic clock, never a query.

``testing.clock()`` moves it forward with the wall clock, so a test passes a timeout without
waiting for it; a monotonic clock never goes back, so what it was moved by stays.
"""

from __future__ import annotations

import time

_moved_by = 0.0


def monotonic() -> float:
    """``time.monotonic()``, plus what tests moved the clock forward by."""
    return time.monotonic() + _moved_by


def move(seconds: float) -> None:
    """Move the clock forward by ``seconds`` (``testing.Clock.move``)."""
    global _moved_by
    if seconds < 0:
        raise ValueError(f"A monotonic clock moves forward only, not by {seconds} s.")
    _moved_by += seconds
