"""The one exception type callers of the public API handle."""

from __future__ import annotations


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


class LeaseLost(Exception):
    """This worker no longer owns the job: another worker took it over, or it was released."""
