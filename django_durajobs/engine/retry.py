"""Retry policy: exponential backoff, capped."""

from __future__ import annotations

from datetime import timedelta

from ..conf import get_setting
from ..registry import JobKind


def backoff(kind: JobKind, attempt: int) -> timedelta:
    """Delay before the next try after try number ``attempt`` failed.

    ``min(max, base * 2 ** (attempt - 1))``: with the defaults (30 s, 1 h) that is
    30 s, 60 s, 120 s, … 3600 s. The kind's ``backoff_base``/``backoff_max`` win over settings.
    """
    base = kind.backoff_base if kind.backoff_base is not None else get_setting("BACKOFF_BASE_SECONDS")
    cap = kind.backoff_max if kind.backoff_max is not None else get_setting("BACKOFF_MAX_SECONDS")
    return timedelta(seconds=min(cap, base * 2 ** max(attempt - 1, 0)))
