"""The one exception type callers of the public API handle."""

from __future__ import annotations

import asyncio

from django.utils.translation import gettext as _


def install_command(extra: str) -> str:
    """The command that installs an optional extra, quoted: zsh reads unquoted brackets as a pattern."""
    return f'pip install "django-durajobs[{extra}]"'


class JobError(Exception):
    """A refused call or a failed job, with a stable machine-readable ``code``.

    >>> raise JobError("job_not_resumable", "Job 7 is done; only waiting jobs can be resumed.")
    """

    def __init__(self, code: str, message: str | None = None, *, retryable: bool = False) -> None:
        super().__init__(message or code)
        self.code = code
        self.message = message or code
        self.retryable = retryable

    def __str__(self) -> str:
        return self.message


class JobTimeout(JobError, TimeoutError):
    """A job or a step ran past its timeout: ``code`` is ``"timeout"``.

    A ``TimeoutError`` too, so a kind's ``retryable=lambda exc: isinstance(exc, TimeoutError)``
    retries it like any other timeout.
    """

    def __init__(self, message: str) -> None:
        super().__init__("timeout", message)


class LeaseLost(Exception):
    """This worker no longer owns the job: another worker took it over, or it was released."""


class EventTimeout(JobTimeout):
    """``ctx.wait_for_event(name, timeout=…)`` timed out before the event was sent.

    The run may catch it and go on; uncaught, the job fails with ``error_code="timeout"``.
    A re-entered run gets it again at the same wait, so it takes the same way as before.
    """

    def __init__(self, name: str, nth: int = 1) -> None:
        super().__init__(_("The wait for event %(name)s timed out.") % {"name": name})
        self.event_name = name
        #: Which of the run's waits for this name it was (1 for the first).
        self.nth = nth


def raised_by_the_job(raised: BaseException) -> bool:
    """Whether the job's code raised ``raised``, for its run to record: any exception, a
    ``KeyboardInterrupt`` or ``SystemExit`` too (a job that raised one would otherwise be picked
    up again for ever), but not the cancelling of an async job's task by its worker."""
    return not isinstance(raised, (asyncio.CancelledError, GeneratorExit))
