"""What a run needs of the store: the lease on its job, every write fenced by it, and the few
reads a run makes.

The runner and ``ctx`` go through nothing else on the way from a claim to an outcome, so a run
is the same on the database (``store.Lease``) and in memory (``testing_store.MemoryLease``),
and the runner's stages are tested without a database. What a run does to other jobs (a
parent's revert undoes its done children through ``ops``) is outside it.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from contextlib import AbstractContextManager
from typing import Any, Protocol, Self

from ..models import Event, Job, JobStep


class RunStore(Protocol):
    """A worker's hold on one claimed job: a write raises ``LeaseLost`` once the job is no
    longer held (taken over, released), and changes nothing."""

    #: The job as claimed; the run changes its fields only where it writes them too.
    job: Job
    worker_id: str
    #: When (on ``clock.monotonic()``) the job was claimed: what the claim read is as of then.
    claimed_at: float
    #: When (on ``clock.monotonic()``) the run, or its step in flight, is past its timeout.
    deadline: float | None
    #: The step whose timeout ``deadline`` is, while it runs.
    timed_step: str | None
    #: The step marked running ahead of the run (by the claim or a checkpoint), until the run opens it.
    step_started_ahead: str | None

    def start_step(self, step: JobStep, *, create: bool, **fields: Any) -> str | None:
        """Mark ``step`` running (inserted when ``create``); None once it is, or (nothing written)
        ``"cancel"`` or ``"pause"`` when an operator asked to stop the job. ``StepRowMissing``
        when a step not to be created has no row."""
        ...

    def save_step(
        self, step: JobStep, *, then_start: tuple[JobStep, dict[str, Any]] | None = None, **fields: Any
    ) -> bool:
        """Checkpoint ``fields`` on ``step``; with ``then_start`` (a pending step and what marks it
        running), start that step in the same write unless an operator asked to stop the job:
        whether it did."""
        ...

    def stop_requested(self) -> str | None:
        """``"cancel"`` or ``"pause"`` when an operator asked for it (a cancel wins), else None."""
        ...

    def renew(self, **fields: Any) -> None:
        """Keep the lease, and set ``fields`` (progress, eta…) on the job."""
        ...

    def log(self, line: Any) -> None:
        """Add a line to the job's log."""
        ...

    def finish(
        self,
        fields: dict[str, Any],
        steps: Iterable[JobStep] = (),
        log_line: str | None = None,
        trim: bool = True,
        then_claim: Callable[[], bool] | None = None,
        if_running: bool = False,
    ) -> Self | None:
        """Write the run's outcome (a transition's fields), the steps it changed (with
        ``if_running``, each only where its row still says running) and its log line, and give
        the job up; the worker's next job when ``then_claim()`` and one was claimed with it."""
        ...

    def steps(self, phase: str) -> list[JobStep]:
        """The job's checkpoints of ``phase``, by position."""
        ...

    def open_children(self) -> tuple[int, int]:
        """``(still open, total)`` child jobs of the job."""
        ...

    def children(self) -> list[Job]:
        """The job's children, oldest first, with what a summary of them shows."""
        ...

    def enqueue_child(self, kind: str, idempotency_key: str, **options: Any) -> Job:
        """A child of the job, created once for ``idempotency_key``."""
        ...

    def sent_event(self, name: str) -> Event | None:
        """The event ``name`` once it was sent; None until then."""
        ...

    def step_transaction(self) -> AbstractContextManager[Any]:
        """What an ``atomic=True`` step runs in, with its checkpoint."""
        ...
