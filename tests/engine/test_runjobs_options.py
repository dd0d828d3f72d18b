"""``manage.py runjobs`` refuses invalid options before it starts, with a message naming the option."""

from __future__ import annotations

import pytest
from django.core.management import CommandError, call_command


@pytest.mark.parametrize(
    "args, message",
    [
        (["--concurrency", "0"], "--concurrency must be at least 1."),
        (["--poll-interval", "0"], "--poll-interval must be a positive number of seconds."),
        (["--poll-interval", "-1"], "--poll-interval must be a positive number of seconds."),
        (["--grace", "-1"], "--grace cannot be negative."),
        (["--worker-id", "a:b"], "--worker-id must be a non-empty name without '@' or ':'."),
        (["--worker-id", "a@b"], "--worker-id must be a non-empty name without '@' or ':'."),
        (["--worker-id", " "], "--worker-id must be a non-empty name without '@' or ':'."),
    ],
)
def test_runjobs_refuses_invalid_options(args, message):
    """Invalid options stop ``runjobs`` before it starts, with a message naming the option."""
    with pytest.raises(CommandError) as refused:
        call_command("runjobs", *args)
    assert str(refused.value) == message
