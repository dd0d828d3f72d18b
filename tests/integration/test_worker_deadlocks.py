"""A worker's write that InnoDB makes a deadlock's victim, with real deadlocks on MariaDB.

Workers meet in the claim, and when they start together. A finish that also claims the next job
may lose a deadlock to another worker's claim or finish (seen in the proving ground's restarts on
MariaDB), and InnoDB then rolls back the finish's whole transaction. The finish is made again
without the claim; a write that keeps losing gives its job back, to resume after its last finished
step, and the worker's thread goes on. A worker whose registration loses one (workers starting
together, seen in CI's event race on MariaDB) registers again.

Each deadlock here is real: a rival transaction that changed many rows holds a row the worker's
transaction then asks for, and waits for the job row the worker's transaction holds. InnoDB rolls
back the transaction that changed fewer rows: the worker's.
"""

from __future__ import annotations

import logging
import threading

import pytest
from django.db import OperationalError, connection, transaction
from django.db.backends.signals import connection_created
from django.utils import timezone

from django_durajobs import Job, Status, enqueue
from django_durajobs.models import JobLog
from django_durajobs.models import Worker as WorkerRow
from django_durajobs.store import register_worker
from django_durajobs.store.database import DEADLOCK_TRIES
from django_durajobs.worker import Worker, WorkerOptions
from tests.testapp.kinds_database import KIND, TWO_STEPS, effect_name
from tests.testapp.models import SideEffect

pytestmark = [
    pytest.mark.django_db(transaction=True),
    pytest.mark.skipif(connection.vendor != "mysql", reason="InnoDB's deadlocks: MySQL/MariaDB"),
]

RIVAL_ROWS = 50  # what the rival changes, so that InnoDB picks the worker's transaction


def lose_a_deadlock(cursor, held_job_id: int, pivot_id: int) -> None:
    """Make the transaction open on ``cursor`` (it holds the row of job ``held_job_id``) a real
    deadlock's victim; raises the ``OperationalError`` it lost with."""
    rival_holds = threading.Event()
    rival: dict[str, object] = {}

    def hold_then_wait() -> None:
        try:
            with transaction.atomic():
                SideEffect.objects.filter(pk=pivot_id).update(created_at=timezone.now())
                SideEffect.objects.bulk_create(SideEffect(name=f"rival-{n}") for n in range(RIVAL_ROWS))
                rival_holds.set()
                rival["got_the_job_row"] = Job.objects.select_for_update().filter(pk=held_job_id).exists()
                transaction.set_rollback(True)
        except Exception as exc:  # noqa: BLE001 -- reported by the assertion below
            rival["error"] = exc
        finally:
            rival_holds.set()
            connection.close()

    thread = threading.Thread(target=hold_then_wait, name="rival")
    thread.start()
    assert rival_holds.wait(30)
    try:
        cursor.execute(f"SELECT id FROM {SideEffect._meta.db_table} WHERE id = %s FOR UPDATE", [pivot_id])
    finally:
        thread.join(60)
    raise AssertionError(f"the worker's transaction was not the deadlock's victim: {rival}")


class LostDeadlocks:
    """Makes the statement of the job's finish that contains ``statement`` (before it runs, or
    after) lose a deadlock, ``times`` times; installed on each connection a job thread opens."""

    def __init__(
        self, job: Job, pivot: SideEffect, statement: str, *, after_it: bool, times: int = 1
    ) -> None:
        self.job, self.pivot, self.statement = job, pivot, statement
        self.after_it, self.times = after_it, times
        self.finishing = False
        self.lost: list[int] = []  # the MySQL error code of each deadlock lost

    def install(self, sender, connection, **kwargs) -> None:
        if threading.current_thread().name.startswith("durajobs-job"):
            connection.execute_wrappers.append(self)

    def __call__(self, execute, sql, params, many, context):
        losing = self.finishing and self.statement in sql and len(self.lost) < self.times
        if losing and not self.after_it:
            self._lose(context)
        result = execute(sql, params, many, context)
        if losing and self.after_it:
            self._lose(context)
        if sql.startswith(f"INSERT INTO `{SideEffect._meta.db_table}`") and params[0] == self.last_effect:
            self.finishing = True  # the job's last step has run: what comes next is its finish
        return result

    @property
    def last_effect(self) -> str:
        return effect_name(self.job.pk, TWO_STEPS[-1])

    def _lose(self, context) -> None:
        try:
            lose_a_deadlock(context["cursor"], self.job.pk, self.pivot.pk)
        except OperationalError as exc:
            self.lost.append(exc.__cause__.args[0])
            raise


def run_worker_with(deadlocks: LostDeadlocks) -> Worker:
    connection_created.connect(deadlocks.install)
    try:
        worker = Worker(WorkerOptions(concurrency=1, burst=True, poll_interval=0.1))
        thread = threading.Thread(target=worker.run, name="test-worker")
        thread.start()
        thread.join(120)
    finally:
        connection_created.disconnect(deadlocks.install)
    assert not thread.is_alive()
    return worker


def effects(job: Job) -> list[str]:
    names = [effect_name(job.pk, step) for step in TWO_STEPS]
    return sorted(SideEffect.objects.filter(name__in=names).values_list("name", flat=True))


def test_a_finish_whose_next_claim_lost_a_deadlock_is_made_again_without_it(caplog):
    pivot = SideEffect.objects.create(name="pivot")
    (first, _), (second, _) = enqueue(KIND, subject={}), enqueue(KIND, subject={})
    deadlocks = LostDeadlocks(first, pivot, "SKIP LOCKED", after_it=False)
    with caplog.at_level(logging.WARNING, logger="django_durajobs"):
        worker = run_worker_with(deadlocks)

    assert deadlocks.lost == [1213]
    assert not worker.crashed
    for job in (first, second):
        job.refresh_from_db()
        assert (job.status, job.worker_losses) == (Status.DONE, 0)
        assert effects(job) == sorted(effect_name(job.pk, step) for step in TWO_STEPS)
    assert not [record for record in caplog.records if record.levelno >= logging.ERROR]


def test_a_run_whose_write_lost_a_deadlock_gives_its_job_back_and_its_thread_goes_on(caplog):
    pivot = SideEffect.objects.create(name="pivot")
    (first, _), (second, _) = enqueue(KIND, subject={}), enqueue(KIND, subject={})
    # After the finish's fenced update of the job, on every try.
    deadlocks = LostDeadlocks(first, pivot, "SET `locked_by` = ''", after_it=True, times=DEADLOCK_TRIES)
    with caplog.at_level(logging.WARNING, logger="django_durajobs"):
        worker = run_worker_with(deadlocks)

    assert deadlocks.lost == [1213] * DEADLOCK_TRIES
    assert not worker.crashed
    messages = [record.getMessage() for record in caplog.records]
    assert any(f"Job {first.pk} interrupted: its write was a deadlock's victim" in m for m in messages)
    assert not any("crashed" in message for message in messages)
    second.refresh_from_db()
    assert second.status == Status.DONE  # the same thread ran it after
    first.refresh_from_db()
    assert (first.status, first.worker_losses) == (Status.QUEUED, 1)
    lines = list(JobLog.objects.filter(job=first).values_list("line", flat=True))
    assert any("resumes after its last finished step" in line for line in lines), lines

    assert not run_worker_with(LostDeadlocks(first, pivot, "", after_it=True, times=0)).crashed
    first.refresh_from_db()
    assert first.status == Status.DONE
    # Its steps ran once: it resumed after its last finished step.
    assert effects(first) == sorted(effect_name(first.pk, step) for step in TWO_STEPS)


def test_a_worker_whose_registration_lost_a_deadlock_registers_again():
    pivot = SideEffect.objects.create(name="pivot")
    held, _ = enqueue(KIND, subject={})
    lost: list[int] = []

    def lose_at_the_insert(execute, sql, params, many, context):
        if sql.startswith(f"INSERT INTO `{WorkerRow._meta.db_table}`") and not lost:
            cursor = context["cursor"]
            # Inside the registration's transaction: it holds a job's row, as a finish would.
            cursor.execute(f"SELECT id FROM {Job._meta.db_table} WHERE id = %s FOR UPDATE", [held.pk])
            try:
                lose_a_deadlock(cursor, held.pk, pivot.pk)
            except OperationalError as exc:
                lost.append(exc.__cause__.args[0])
                raise
        return execute(sql, params, many, context)

    with connection.execute_wrapper(lose_at_the_insert):
        register_worker("host:1:registered", ["default"], 2)

    assert lost == [1213]
    row = WorkerRow.objects.get(worker_id="host:1:registered")
    assert (row.queues, row.concurrency) == (["default"], 2)
