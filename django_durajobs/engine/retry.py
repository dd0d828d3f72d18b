"""The retry decision: after a run raised, is it tried again (when), or does it fail (with what code)?

One pure function of the exception, the kind, the try that failed and the clock, so every case is
tested without a database. The attempts themselves are counted by the transitions table: a claim
counts a try, a wait or a release gives it back, a retry allows one more.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime, timedelta

from ..conf import get_setting
from ..registry import JobKind


@dataclass(frozen=True)
class RetryAt:
    """Queue the job again at ``at``; ``code`` stays visible as its last error's."""

    at: datetime
    delay: timedelta
    code: str


@dataclass(frozen=True)
class FailWith:
    code: str


def is_retryable(kind: JobKind, exc: BaseException) -> bool:
    """An exception marked ``retryable = True``, or one the kind's ``retryable`` predicate accepts."""
    if getattr(exc, "retryable", False) is True:
        return True
    return bool(kind.retryable and kind.retryable(exc))


def backoff(kind: JobKind, attempt: int) -> timedelta:
    """Delay before the next try after try number ``attempt`` failed.

    ``min(max, base * 2 ** (attempt - 1))``: with the defaults (30 s, 1 h) that is
    30 s, 60 s, 120 s, … 3600 s. The kind's ``backoff_base``/``backoff_max`` win over settings.
    """
    base = kind.backoff_base if kind.backoff_base is not None else get_setting("BACKOFF_BASE_SECONDS")
    cap = kind.backoff_max if kind.backoff_max is not None else get_setting("BACKOFF_MAX_SECONDS")
    return timedelta(seconds=min(cap, base * 2 ** max(attempt - 1, 0)))


def decide(
    exc: BaseException, kind: JobKind, attempt: int, max_attempts: int, now: datetime, *, reverting: bool
) -> RetryAt | FailWith:
    """What follows try number ``attempt`` (of ``max_attempts``) raising ``exc``.

    A revert is never retried on its own: an operator retries or reverts it again. The code is the
    exception's own ``code`` when it has a non-empty one (not ``SystemExit``'s: that is its message).
    """
    own = getattr(exc, "code", None) if not isinstance(exc, SystemExit) else None
    code = own if isinstance(own, str) and own else None
    if not reverting and attempt < max_attempts and is_retryable(kind, exc):
        delay = backoff(kind, attempt)
        return RetryAt(now + delay, delay, code or "transient")
    return FailWith(code or ("revert_failed" if reverting else "failed"))
