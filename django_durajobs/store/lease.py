"""Claiming a job, and the lease a worker then holds on it: every write it makes is fenced by
the lease token."""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable
from contextlib import AbstractContextManager
from dataclasses import replace
from typing import Any

from django.db import transaction
from django.db.backends.base.base import BaseDatabaseWrapper
from django.utils import timezone

from ..clock import monotonic
from ..conf import get_setting, jobs_database
from ..errors import LeaseLost
from ..models import Event, Job, JobStep
from ..status import Status, StepState
from ..transitions import DUE_STATUSES
from . import set_lists, sql
from .changes import changed_to, notify_due, written
from .checkpoints import checkpoint_and_start
from .claiming import ClaimRequest, claim_one, claim_order, reverts_looked_for_lately
from .database import DatabaseNow, made_despite_deadlocks, new_token, no_flush, step_transaction
from .enqueuing import enqueue
from .events import sent_event
from .fairness import KEYLESS, claim_fairly, fairness_in_force, turns_due
from .family import children_of, open_children
from .finishing import finish_in_one_statement
from .holding import current_limits, plain_claim
from .limiting import claim_limited, claim_under_limits, limited_found_lately
from .log import append_log, trim_log


def claim(worker_id: str, queues: Iterable[str] | None = None) -> Lease | None:
    """Take the most urgent due job (or pending revert) for ``worker_id``; None when nothing is due.

    PostgreSQL and MySQL/MariaDB lock the candidate row with ``SKIP LOCKED`` so concurrent
    workers pass over each other; SQLite, which locks the whole database, uses an update that
    is conditional on the status the candidate was read with. While any limit is in force, jobs
    under limits are claimed as ``limiting.py`` says, passing over those a limit holds back.
    """
    db = sql.database()
    request = ClaimRequest(worker_id, new_token(), tuple(queues or ()))
    limits = current_limits()
    order = claim_order()
    # Jobs under limits are looked for first as often as pending reverts, and while they are found.
    limited_first = limits is not None and (order[0] == Status.REVERTING or limited_found_lately())
    fair = fairness_in_force()
    for status in order:
        job = claim_limited(db, status, request, limits) if limits and limited_first else None
        if job is None and fair and status == Status.QUEUED:  # of kinds and queues no limit applies to
            job = claim_fairly(db, request, limits)
        if job is None:
            if limits is None:
                job = claim_one(db, status, request)
            else:
                job = claim_under_limits(db, status, request, limits, limited_too=not limited_first)
        if job is not None:
            break
    else:
        return None
    if job.status == Status.RUNNING:
        changed_to(job, Status.QUEUED, Status.RUNNING)
    return Lease(job, request)


def heartbeat(leases: Iterable[Lease]) -> list[Lease]:
    """Renew the leases of running jobs; returns those that are no longer ours."""
    lost = []
    for lease in leases:
        if not Job.objects.filter(pk=lease.job.pk, lease_token=lease.token).update(locked_at=DatabaseNow()):
            lost.append(lease)
    return lost


def outcome_of_step(step: JobStep) -> dict[str, Any]:
    """What a run's outcome writes of a step it changed: its state and detail, and no start when
    it is pending again (started ahead, never opened)."""
    fields = {"state": step.state, "detail": step.detail}
    return fields if step.state != StepState.PENDING else {**fields, "started_at": None}


class StepRowMissing(Exception):
    """A step taken to be in the database is not there: its job's steps must be read again."""


class Lease:
    """A worker's hold on one claimed job. Each write is fenced by the lease token.

    When another worker has taken the job over (this one stalled past its lease) or the job was
    released, the write changes nothing and ``LeaseLost`` is raised: the stale worker abandons
    the job instead of overwriting its new owner's work.
    """

    def __init__(self, job: Job, request: ClaimRequest) -> None:
        self.job = job
        #: Who claimed it, with which token, from which queues: the next job is claimed by the same.
        self.request = request
        self.worker_id = request.worker_id
        self.token = request.token
        #: When (on ``clock.monotonic()``) the job was claimed: what the claim read is as of then.
        self.claimed_at = monotonic()
        #: Its outcome is being recorded, or was: whether the lease was lost is then its job
        #: thread's to tell (a heartbeat meanwhile finds the token already cleared).
        self.finishing = False
        #: When (on ``clock.monotonic()``) the run is past its timeout, or its step in flight past
        #: its own: a worker then gives the job up, whatever its thread is doing. None: no timeout.
        self.deadline: float | None = None
        #: The step whose timeout ``deadline`` is, while it runs.
        self.timed_step: str | None = None
        #: The step marked running ahead of the run (by the claim or a checkpoint) that the run
        #: has not opened yet: a job given up meanwhile puts it back to pending.
        self.step_started_ahead: str | None = None
        self._renewed = time.monotonic()
        self._lines_untrimmed = 0  # log lines added since the log was last trimmed

    def _lost(self) -> LeaseLost:
        return LeaseLost(f"Job {self.job.pk} is no longer held by {self.worker_id}.")

    def _update_job(self, db: BaseDatabaseWrapper, values: dict[str, Any]) -> tuple[sql.Statement, list[Any]]:
        """The fenced ``UPDATE`` of the job to ``values``, and its parameters."""
        assignments, params = set_lists.assignments(db, Job, values)

        def update() -> str:
            quote = db.ops.quote_name
            return (
                f"UPDATE {sql.table(db, Job)} SET {assignments.sql} "
                f"WHERE {quote('id')} = %s AND {quote('lease_token')} = %s"
            )

        return sql.statement(db, ("update job", assignments), update), [*params, self.job.id, self.token]

    def _update_step(
        self,
        db: BaseDatabaseWrapper,
        step: JobStep,
        fields: dict[str, Any],
        *,
        start: bool = False,
        if_running: bool = False,
    ) -> int:
        """Write ``fields`` to ``step`` if the job is still ours (with ``if_running``, and the step's
        row still says running); a start also needs no cancel or pause request (and, outside a
        transaction, need not wait for the disk: see ``no_flush``).

        The step is found by job, phase and step id, so a step taken from its kind's
        declaration (``JobContext.steps``) needs no id. Returns the number of rows changed.
        """
        assignments, params = set_lists.assignments(db, JobStep, fields)
        flush = no_flush(db) if start else ""

        def update() -> str:
            quote = db.ops.quote_name
            not_cancelled = (
                f" AND {quote('cancel_requested')} = %s AND {quote('pause_requested')} = %s" if start else ""
            )
            running = f" AND {quote('state')} = %s" if if_running else ""
            return (
                f"UPDATE {sql.table(db, JobStep)} SET {assignments.sql} "
                f"WHERE {quote('job_id')} = %s AND {quote('phase')} = %s "
                f"AND {quote('step_id')} = %s{running} "
                f"AND EXISTS (SELECT 1 FROM {sql.table(db, Job)} "
                f"WHERE {quote('id')} = %s AND {quote('lease_token')} = %s{not_cancelled}){flush}"
            )

        params += [self.job.id, step.phase, step.step_id]
        params += [StepState.RUNNING, self.job.id, self.token] if if_running else [self.job.id, self.token]
        if start:
            params += [False, False]
        statement = sql.statement(db, ("update step", assignments, start, flush, if_running), update)
        return sql.run(db, statement, params)

    def renew(self, **fields: Any) -> None:
        """Heartbeat (and optionally set progress/eta); raises ``LeaseLost`` when no longer ours."""
        db = sql.database()
        update, params = self._update_job(
            db, {"locked_at": DatabaseNow(), "updated_at": timezone.now(), **fields}
        )
        if not sql.run(db, update, params):
            raise self._lost()
        self._renewed = time.monotonic()

    def _renew_if_due(self) -> None:
        """Renew on a checkpoint when no heartbeat thread did lately (``drain()`` has none)."""
        if time.monotonic() - self._renewed >= get_setting("HEARTBEAT_SECONDS"):
            self.renew()

    def start_step(self, step: JobStep, *, create: bool, **fields: Any) -> str | None:
        """Mark a step running, fenced; None once it is, or (nothing written) the operator's
        request that stops the job here: ``"cancel"`` or ``"pause"``.

        Raises ``StepRowMissing`` when ``step`` (not to be created) has no row.
        """
        for name, value in fields.items():
            setattr(step, name, value)
        self._renew_if_due()
        if create:
            with transaction.atomic(using=jobs_database()):
                stop = self.stop_requested()
                if stop is None:
                    step.save(force_insert=True)
                return stop
        if self._update_step(sql.database(), step, fields, start=True):
            return None
        stop = self.stop_requested()  # raises LeaseLost when that was the reason
        if stop is None:
            raise StepRowMissing(step.step_id)
        return stop

    def stop_requested(self) -> str | None:
        """``"cancel"`` or ``"pause"`` when an operator asked for it (a cancel wins), else None;
        raises ``LeaseLost`` when the job is no longer ours."""
        db = sql.database()

        def select() -> str:
            quote = db.ops.quote_name
            return (
                f"SELECT {quote('cancel_requested')}, {quote('pause_requested')} FROM {sql.table(db, Job)} "
                f"WHERE {quote('id')} = %s AND {quote('lease_token')} = %s"
            )

        rows = sql.fetch(db, sql.statement(db, ("stop requested",), select), [self.job.pk, self.token])
        if not rows:
            raise self._lost()
        cancel, pause = rows[0]
        return "cancel" if cancel else "pause" if pause else None

    def save_step(
        self, step: JobStep, *, then_start: tuple[JobStep, dict[str, Any]] | None = None, **fields: Any
    ) -> bool:
        """Checkpoint a step row; one statement, fenced by the lease token. With ``then_start`` (a
        pending step, and what marks it running), the same statement starts that step too,
        unless a cancel or pause is asked for (``store/checkpoints.py``): whether it did."""
        for name, value in fields.items():
            setattr(step, name, value)
        db = sql.database()
        if then_start is None:
            if not self._update_step(db, step, fields):
                raise self._lost()
            return False
        self._renew_if_due()
        changed = checkpoint_and_start(db, self.job.id, self.token, (step, fields), then_start)
        if not changed:
            raise self._lost()
        following, started = then_start
        for name, value in started.items() if changed == 2 else ():
            setattr(following, name, value)
        return changed == 2

    def log(self, line: Any) -> None:
        """Add a line; a run that keeps logging has its log trimmed as it goes, so the job never
        holds more than a tenth over ``LOG_LINES_KEPT`` lines."""
        with transaction.atomic(using=jobs_database()):
            self.renew()
            append_log(self.job.pk, line)
            self._lines_untrimmed += 1
            if self._lines_untrimmed > get_setting("LOG_LINES_KEPT") // 10:
                trim_log(self.job.pk)
                self._lines_untrimmed = 0

    def steps(self, phase: str) -> list[JobStep]:
        """The job's checkpoints of ``phase``, by position."""
        return list(JobStep.objects.filter(job_id=self.job.pk, phase=phase).order_by("position"))

    def open_children(self) -> tuple[int, int]:
        return open_children(self.job.pk)

    def children(self) -> list[Job]:
        return list(children_of(self.job.pk))

    def enqueue_child(self, kind: str, idempotency_key: str, **options: Any) -> Job:
        return enqueue(kind, parent=self.job, idempotency_key=idempotency_key, **options)[0]

    def sent_event(self, name: str) -> Event | None:
        return sent_event(name)

    def step_transaction(self) -> AbstractContextManager[Any]:
        return step_transaction()

    def finish(
        self,
        fields: dict[str, Any],
        steps: Iterable[JobStep] = (),
        log_line: str | None = None,
        trim: bool = True,
        then_claim: Callable[[], bool] | None = None,
        if_running: bool = False,
    ) -> Lease | None:
        """Apply the run's outcome and give the job up, fenced: nothing is written if it is no longer ours.
        With ``if_running``, each of ``steps`` only where its row still says running.

        When ``then_claim()`` says so, the same statement (or transaction) also claims this
        worker's next queued job, and returns its lease: a worker that keeps busy pays one round
        trip per job for claiming and finishing, not two. Not when pending reverts are due to be
        looked for: ``claim()`` looks for those (and jobs under limits) first. The next job is one
        that no limit applies to. The finish of a job under a limit wakes idle workers (on
        PostgreSQL): a job it held back may start.
        """
        self.finishing = True
        db = sql.database()
        now = timezone.now()
        fields = written(fields)
        status = fields["status"]
        due_at = fields.get("next_run_at")
        due_now = status in DUE_STATUSES and due_at is not None and due_at <= now
        update, params = self._update_job(
            db, {"locked_by": "", "locked_at": None, "lease_token": "", "updated_at": now, **fields}
        )
        steps = list(steps)
        limits = current_limits()
        kinds, passed_over, lane = plain_claim(limits)
        frees_a_limit = limits is not None and bool(limits.scopes(self.job))
        # Under fair shares, only while claims pass over the turns, and a job without a key.
        keyless = fairness_in_force()
        claiming = bool(
            then_claim
            and then_claim()
            and kinds
            and reverts_looked_for_lately()
            and not (keyless and turns_due())
        )
        next_request = replace(self.request, token=new_token()) if claiming else self.request
        notify = due_now or frees_a_limit
        in_one_statement = db.vendor == "postgresql" and not (steps or trim)

        def write(claiming: bool) -> Job | None:
            """The outcome, and with ``claiming`` the next job's claim: that job, or None."""
            next_claim = (kinds, passed_over, next_request, keyless, lane) if claiming else None
            if in_one_statement:  # the common case, a job done
                finished, claimed = finish_in_one_statement(
                    db, self.job.queue, update, params, (log_line, notify, now), next_claim
                )
                if not finished:
                    raise self._lost()
                return claimed
            with sql.transaction(db, statements_only=not trim):
                for step in steps:  # while the job is still ours: the update below gives it up
                    self._update_step(db, step, outcome_of_step(step), if_running=if_running)
                if not sql.run(db, update, params):
                    raise self._lost()
                if log_line:
                    append_log(self.job.id, log_line, db, now)
                if trim:
                    trim_log(self.job.pk)
                if notify:
                    notify_due(self.job.queue)
                if not claiming:
                    return None
                only_if = KEYLESS if keyless else ("", ())
                return claim_one(db, Status.QUEUED, next_request, now, kinds, passed_over, only_if, lane)

        # InnoDB may make the claim, meeting another worker's, a deadlock's victim, and with it the
        # whole transaction: the outcome is then written again, without the claim.
        claimed = made_despite_deadlocks(lambda first: write(claiming and first))
        changed_to(self.job, self.job.status, status, fields)
        if claimed is None:
            return None
        changed_to(claimed, Status.QUEUED, Status.RUNNING)
        return Lease(claimed, next_request)
