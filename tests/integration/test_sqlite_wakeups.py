"""SQLite: an idle worker starts a job enqueued by another connection within milliseconds, not
at its next poll (it watches ``PRAGMA data_version``)."""

from __future__ import annotations

import threading
import time

import pytest
from django.db import connection

from django_durajobs import Job, Status, enqueue
from django_durajobs.worker import Worker, WorkerOptions

pytestmark = pytest.mark.django_db(transaction=True)

POLL_SECONDS = 60.0  # far longer than the test waits: only a wake-up can start the job in time


def wait_done(job: Job, within: float) -> float:
    """Seconds until ``job`` is done; fails past ``within``."""
    started = time.monotonic()
    while Job.objects.get(pk=job.pk).status != Status.DONE:
        assert time.monotonic() - started < within, f"job {job.pk} not done within {within} s"
        time.sleep(0.005)
    return time.monotonic() - started


def test_an_idle_worker_wakes_on_a_commit_by_another_connection(db_vendor):
    if db_vendor != "sqlite" or connection.is_in_memory_db():
        pytest.skip("the change counter of an SQLite file")
    worker = Worker(WorkerOptions(concurrency=1, poll_interval=POLL_SECONDS))
    thread = threading.Thread(target=worker.run, name="test-worker")  # no signal handlers here
    first, _ = enqueue("states_basic")
    thread.start()
    try:
        wait_done(first, within=30)  # the worker ran it, looked for more and went idle
        time.sleep(0.2)
        second, _ = enqueue("states_basic")
        assert wait_done(second, within=5) < 5
    finally:
        worker.stop()
        thread.join(30)
    assert not thread.is_alive() and not worker.crashed
