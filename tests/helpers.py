"""Helpers for the test suite. Tests synchronise by polling a condition, never by bare sleeps."""

from __future__ import annotations

import time
from collections.abc import Callable
from pathlib import Path
from typing import TypeVar

T = TypeVar("T")

REPO_ROOT = Path(__file__).resolve().parent.parent


def wait_for(
    predicate: Callable[[], T],
    timeout: float = 30,
    interval: float = 0.05,
    message: str | None = None,
) -> T:
    """Call ``predicate`` until it returns something truthy, and return that value.

    Raises ``AssertionError`` when ``timeout`` seconds pass first; the message names the
    predicate (or says ``message``) and its last return value.
    """
    deadline = time.monotonic() + timeout
    while True:
        value = predicate()
        if value:
            return value
        if time.monotonic() >= deadline:
            what = message or getattr(predicate, "__name__", repr(predicate))
            raise AssertionError(f"timed out after {timeout}s waiting for {what} (last value: {value!r})")
        time.sleep(interval)
