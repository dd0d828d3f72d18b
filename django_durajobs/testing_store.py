"""A store in memory: jobs, steps, log lines and events as plain Python objects, for running the
runner's stages with no database (tests/engine/).

``MemoryLease`` is the engine's ``RunStore`` (``engine/ports.py``), as ``store.Lease`` is on the
database: every write is fenced by the lease token (``LeaseLost`` once the job is another's),
and every change of a job's state is a transition of ``transitions.py``, decided as the
operations decide it (``ops/deciding.py``). The rows are unsaved model instances; each side
(the store, a lease, a reader) has copies of its own, as each has rows read from the database.

What is the database's alone is not here: concurrent workers, limits, fair shares, the next
claim made with a finish, a parent woken when its children settle, the children an operation
changes with their parent, and the operations' log lines in the words of their buttons.
"""

from __future__ import annotations

import itertools
from collections import Counter
from collections.abc import Callable, Iterable
from contextlib import AbstractContextManager, nullcontext
from datetime import datetime
from typing import Any, TypeVar

from django.db.models import Model
from django.utils import timezone

from .clock import monotonic
from .conf import get_setting
from .engine.runner import Ran, execute
from .errors import LeaseLost
from .family import still_open
from .models import Event, Job, JobStep
from .ops.deciding import DECISIONS, Decision
from .status import Phase, Status, StepState
from .store import StepRowMissing, new_token
from .store.enqueuing import EnqueueOptions, _checked_fields
from .store.lease import outcome_of_step
from .store.log import clean_log_line
from .store.waking import timed_wake
from .transitions import (
    ATTEMPT_COUNTED,
    ATTEMPT_GIVEN_BACK,
    NOW_IF_UNSET,
    ONE_MORE_TRY,
    WAKES_BY_ITSELF,
    Marker,
    Trigger,
    transition,
)
from .values import to_event_name, to_event_payload

__all__ = ["MemoryLease", "MemoryStore"]

M = TypeVar("M", bound=Model)


def due(job: Job, now: datetime) -> bool:
    """Whether the job's ``next_run_at`` has come, as the claim's condition has it."""
    return job.next_run_at is not None and job.next_run_at <= now


def copied(row: M) -> M:
    """Another instance with the same field values: what a second read of the row returns."""
    return type(row)(**{field.attname: getattr(row, field.attname) for field in row._meta.concrete_fields})


class MemoryStore:
    """Job rows in memory, written as the database store writes them."""

    def __init__(self) -> None:
        self.jobs: dict[int, Job] = {}
        self.step_rows: dict[int, list[JobStep]] = {}
        self.log_lines: dict[int, list[str]] = {}
        self.events: dict[str, Event] = {}
        self._ids = itertools.count(1)

    # What a person or a program does -----------------------------------------------------------

    def enqueue(self, kind: str, subject: Any = None, *, parent_id: int | None = None, **options: Any) -> Job:
        """A new queued job with its kind's declared steps, checked as ``enqueue()`` checks it;
        the job already enqueued with the same ``idempotency_key``, if any."""
        key = options.get("idempotency_key")
        for job in self.jobs.values():
            if key is not None and job.idempotency_key == key:
                return copied(job)
        now = timezone.now()
        definition, fields = _checked_fields(kind, now, EnqueueOptions(subject=subject, **options))
        job = Job(id=next(self._ids), created_at=now, updated_at=now, **{**fields, "parent_id": parent_id})
        self.jobs[job.pk] = job
        self.step_rows[job.pk] = [
            JobStep(job_id=job.pk, phase=Phase.RUN, position=position, step_id=step_id, title=title)
            for position, (step_id, title) in enumerate(definition.step_rows())
        ]
        self.log_lines[job.pk] = []
        return copied(job)

    def operate(self, job_id: int, operation: str, by: Any = None, **arguments: Any) -> None:
        """Resume, retry, pause, cancel or revert the job, as its operation decides for it."""
        self.change(
            self.jobs[job_id], DECISIONS[operation](self.jobs[job_id], timezone.now(), by, **arguments)
        )

    def send_event(self, name: str, payload: Any = None) -> bool:
        """Store the event and queue the jobs waiting for it; False when it was sent before."""
        name = to_event_name(name)
        if name in self.events:
            return False
        self.events[name] = Event(name=name, payload=to_event_payload(payload))
        for job in list(self.jobs.values()):
            if job.waits_for_event == name and job.status == Status.AWAITING_EXTERNAL:
                self.change(job, (transition(Trigger.EVENT_SENT, job.phase).values(timezone.now()), ""))
        return True

    def wake_due_waits(self) -> int:
        """Queue each job whose timed wait is over, and answer each question past its deadline."""
        now = timezone.now()
        woken = 0
        for job in [job for job in self.jobs.values() if job.status in WAKES_BY_ITSELF and due(job, now)]:
            woken_by_time = timed_wake(job, now)
            if woken_by_time is None:  # a question with no on_deadline action waits for a person
                continue
            self.change(job, woken_by_time)
            woken += 1
        return woken

    def take_over(self, job_id: int) -> None:
        """Another worker holds the job now: whatever its earlier lease writes is refused."""
        self.jobs[job_id].lease_token = new_token()
        self.jobs[job_id].locked_by = "another worker"

    # Claiming, and what a test reads -----------------------------------------------------------

    def claim(self, worker_id: str = "memory") -> MemoryLease | None:
        """The most urgent due job (by priority, work handed back first, then when it came due),
        claimed as ``Trigger.CLAIM`` says; None when nothing is due."""
        now = timezone.now()
        candidates = [
            job
            for job in self.jobs.values()
            if job.status in (Status.QUEUED, Status.REVERTING)
            and due(job, now)
            and not job.waits_for_children
        ]
        if not candidates:
            return None
        job = min(candidates, key=lambda row: (-row.priority, not row.interrupted, row.next_run_at, row.pk))
        token = new_token()
        fields = transition(Trigger.CLAIM, job.phase, job.status).values(now)
        self.apply(job, {**fields, "locked_by": worker_id, "locked_at": now, "lease_token": token})
        return MemoryLease(self, copied(job), worker_id, token)

    def run_next(self, worker_id: str = "memory") -> Ran[MemoryLease] | None:
        """Run the next due job to its next state, its due waits woken first, as ``drain()``
        runs one; None when nothing is due."""
        self.wake_due_waits()
        lease = self.claim(worker_id)
        return None if lease is None else execute(lease)

    def job(self, job_id: int) -> Job:
        return copied(self.jobs[job_id])

    def steps(self, job_id: int, phase: str = Phase.RUN) -> list[JobStep]:
        rows = [step for step in self.step_rows[job_id] if step.phase == phase]
        return [copied(step) for step in sorted(rows, key=lambda step: step.position)]

    def log(self, job_id: int) -> list[str]:
        return list(self.log_lines[job_id])

    def children(self, parent_id: int) -> list[Job]:
        rows = [job for job in self.jobs.values() if job.parent_id == parent_id]
        return [copied(job) for job in sorted(rows, key=lambda job: (job.created_at, job.pk))]

    # Writing -----------------------------------------------------------------------------------

    def change(self, job: Job, decision: Decision, trim: bool = True) -> None:
        """Apply a decision (a transition's fields, a log line) to the job."""
        fields, line = decision
        self.apply(job, fields)
        if line:
            self.log_lines[job.pk].append(clean_log_line(line))
        if trim:
            del self.log_lines[job.pk][: -get_setting("LOG_LINES_KEPT")]

    @staticmethod
    def apply(job: Job, fields: dict[str, Any]) -> None:
        """Set ``fields``, the row markers worked out from the row as it was (as SQL does)."""
        now = timezone.now()
        markers: dict[Marker, Callable[[str], Any]] = {
            ATTEMPT_COUNTED: lambda _name: job.attempt + 1,
            ATTEMPT_GIVEN_BACK: lambda _name: max(job.attempt - 1, 0),
            ONE_MORE_TRY: lambda _name: max(job.max_attempts, job.attempt + 1),
            NOW_IF_UNSET: lambda name: getattr(job, name) or now,
        }
        values = {
            name: markers[value](name) if isinstance(value, Marker) else value
            for name, value in {"updated_at": now, **fields}.items()
        }
        for name, value in values.items():
            setattr(job, name, value)


class MemoryLease:
    """A hold on one job of a ``MemoryStore``, fenced by its token as ``store.Lease`` is."""

    def __init__(self, store: MemoryStore, job: Job, worker_id: str, token: str) -> None:
        self.store = store
        self.job = job
        self.worker_id = worker_id
        self.token = token
        self.finishing = False
        self.claimed_at = monotonic()
        self.deadline: float | None = None
        self.timed_step: str | None = None
        self.step_started_ahead: str | None = None

    def _held(self) -> Job:
        """The job's row, while it is this lease's; else ``LeaseLost``."""
        row = self.store.jobs.get(self.job.pk)
        if row is None or row.lease_token != self.token:
            raise LeaseLost(f"Job {self.job.pk} is no longer held by {self.worker_id}.")
        return row

    def _row_of(self, step: JobStep) -> JobStep | None:
        rows = self.store.step_rows[self.job.pk]
        return next((row for row in rows if (row.phase, row.step_id) == (step.phase, step.step_id)), None)

    def renew(self, **fields: Any) -> None:
        self.store.apply(self._held(), {"locked_at": timezone.now(), **fields})

    def stop_requested(self) -> str | None:
        row = self._held()
        return "cancel" if row.cancel_requested else "pause" if row.pause_requested else None

    def start_step(self, step: JobStep, *, create: bool, **fields: Any) -> str | None:
        for name, value in fields.items():
            setattr(step, name, value)
        stop = self.stop_requested()
        if stop is not None:
            return stop
        if create:
            self.store.step_rows[self.job.pk].append(copied(step))
            return None
        row = self._row_of(step)
        if row is None:
            raise StepRowMissing(step.step_id)
        for name, value in fields.items():
            setattr(row, name, value)
        return None

    def save_step(
        self, step: JobStep, *, then_start: tuple[JobStep, dict[str, Any]] | None = None, **fields: Any
    ) -> bool:
        for name, value in fields.items():
            setattr(step, name, value)
        self._held()
        row = self._row_of(step)
        if row is None:
            raise LeaseLost(f"Step {step.step_id!r} of job {self.job.pk} has no row.")
        for name, value in fields.items():
            setattr(row, name, value)
        if then_start is None:
            return False
        following, started = then_start
        next_row = self._row_of(following)
        if next_row is None or next_row.state != StepState.PENDING or self.stop_requested() is not None:
            return False
        for name, value in started.items():
            setattr(following, name, value)
            setattr(next_row, name, value)
        return True

    def log(self, line: Any) -> None:
        self.renew()
        self.store.log_lines[self.job.pk].append(clean_log_line(line))

    def finish(
        self,
        fields: dict[str, Any],
        steps: Iterable[JobStep] = (),
        log_line: str | None = None,
        trim: bool = True,
        then_claim: Callable[[], bool] | None = None,
        if_running: bool = False,
    ) -> MemoryLease | None:
        """Apply the outcome and give the job up; no next job is claimed with it."""
        self.finishing = True
        row = self._held()
        for step in steps:
            stored = self._row_of(step)
            if stored is None or (if_running and stored.state != StepState.RUNNING):
                continue
            for name, value in outcome_of_step(step).items():
                setattr(stored, name, value)
        given_up = {"locked_by": "", "locked_at": None, "lease_token": ""}
        self.store.change(row, ({**fields, **given_up}, log_line or ""), trim)
        return None

    def steps(self, phase: str) -> list[JobStep]:
        return self.store.steps(self.job.pk, phase)

    def open_children(self) -> tuple[int, int]:
        children = self.store.children(self.job.pk)
        return still_open(Counter(child.status for child in children)), len(children)

    def children(self) -> list[Job]:
        return self.store.children(self.job.pk)

    def enqueue_child(self, kind: str, idempotency_key: str, **options: Any) -> Job:
        return self.store.enqueue(kind, parent_id=self.job.pk, idempotency_key=idempotency_key, **options)

    def sent_event(self, name: str) -> Event | None:
        return self.store.events.get(name)

    def step_transaction(self) -> AbstractContextManager[Any]:
        """Nothing to roll back: a step's writes to memory are the test's own."""
        return nullcontext()
