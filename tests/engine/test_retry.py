"""The retry decision, from values alone: no database."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest

from django_durajobs.engine.retry import FailWith, RetryAt, backoff, decide, is_retryable
from django_durajobs.errors import JobError
from django_durajobs.registry import JobKind

NOW = datetime(2026, 5, 6, 7, 8, 9, tzinfo=UTC)


def kind(**options) -> JobKind:
    return JobKind(name="retry_rules", run=lambda job, ctx: None, title="Retry rules", **options)


class Flaky(Exception):
    retryable = True


class Coded(Exception):
    retryable = True
    code = "upstream_down"


@pytest.mark.parametrize(("attempt", "delay"), [(1, 30), (2, 60), (3, 120), (7, 1920), (8, 3600), (50, 3600)])
def test_backoff_doubles_up_to_its_cap(attempt, delay, settings):
    settings.DURAJOBS = {"BACKOFF_BASE_SECONDS": 30, "BACKOFF_MAX_SECONDS": 3600}
    assert backoff(kind(), attempt) == timedelta(seconds=delay)


def test_the_kind_s_backoff_wins_over_the_settings():
    assert backoff(kind(backoff_base=2, backoff_max=5), 1) == timedelta(seconds=2)
    assert backoff(kind(backoff_base=2, backoff_max=5), 3) == timedelta(seconds=5)


def test_a_retryable_error_with_tries_left_is_retried_after_its_backoff():
    decision = decide(Flaky("dns"), kind(backoff_base=10), 2, 5, NOW, reverting=False)
    assert decision == RetryAt(NOW + timedelta(seconds=20), timedelta(seconds=20), "transient")


def test_the_last_try_fails():
    assert decide(Flaky("dns"), kind(), 5, 5, NOW, reverting=False) == FailWith("failed")


def test_an_error_s_own_code_is_kept_retried_or_failed():
    assert decide(Coded(), kind(), 1, 3, NOW, reverting=False).code == "upstream_down"
    assert decide(Coded(), kind(), 3, 3, NOW, reverting=False) == FailWith("upstream_down")
    assert decide(JobError("bad_target", "no"), kind(), 1, 3, NOW, reverting=False) == FailWith("bad_target")


def test_other_errors_fail_at_once_unless_the_kind_says_they_are_retryable():
    assert decide(ValueError(), kind(), 1, 3, NOW, reverting=False) == FailWith("failed")
    accepting = kind(retryable=lambda exc: isinstance(exc, ValueError))
    assert isinstance(decide(ValueError(), accepting, 1, 3, NOW, reverting=False), RetryAt)
    assert is_retryable(accepting, ValueError()) and not is_retryable(accepting, KeyError())


def test_a_revert_is_never_retried_on_its_own():
    assert decide(Flaky(), kind(), 1, 3, NOW, reverting=True) == FailWith("revert_failed")
    assert decide(Coded(), kind(), 1, 3, NOW, reverting=True) == FailWith("upstream_down")


def test_an_empty_or_odd_code_is_no_code():
    class Odd(Exception):
        code = 42

    class Empty(Exception):
        code = ""

    assert decide(Odd(), kind(), 1, 1, NOW, reverting=False) == FailWith("failed")
    assert decide(Empty(), kind(), 1, 1, NOW, reverting=False) == FailWith("failed")
