"""Workers and their database, in-process: connection hygiene, NOTIFY on commit, the models'
checks against the database in use.

A worker thread keeps a healthy connection and replaces a broken or aged one; a lost session is
``database_trouble``; an enqueue that rolls back notifies nobody. What the statements read (their
plans) is in ``tests/integration/test_query_plans.py``; the worker processes that lose their
database are in ``tests/e2e/test_database_workers.py``.
"""

from __future__ import annotations

import threading
from collections import Counter
from contextlib import contextmanager

import pytest
from django.core import checks
from django.db import DatabaseError, InterfaceError, OperationalError, connection, transaction
from django.db.backends.signals import connection_created

from django_durajobs import Job, Status, enqueue
from django_durajobs.signals import job_changed
from django_durajobs.store import NOTIFY_CHANNEL, claim, database_trouble
from django_durajobs.worker import Worker, WorkerOptions, refresh_connection
from tests.helpers import wait_for
from tests.job_rows import statuses
from tests.sessions import end_own_session, needs_sessions
from tests.testapp.kinds_database import KIND

# 1. Connection hygiene in-process ---------------------------------------------------------------


@contextmanager
def conn_max_age(seconds):
    """Set the connection's ``CONN_MAX_AGE`` (a fresh connection picks it up); restore it after."""
    before = connection.settings_dict["CONN_MAX_AGE"]
    connection.close()
    connection.settings_dict["CONN_MAX_AGE"] = seconds
    try:
        yield
    finally:
        connection.settings_dict["CONN_MAX_AGE"] = before
        connection.close()


def fresh_connection():
    connection.close()
    connection.ensure_connection()
    return connection.connection


@pytest.mark.django_db(transaction=True)
def test_refresh_keeps_a_healthy_connection_even_with_conn_max_age_zero():
    """CONN_MAX_AGE 0 means "per request" to Django; a worker must not reconnect for every job."""
    with conn_max_age(0):
        raw = fresh_connection()
        refresh_connection()
        assert connection.connection is raw
        assert Job.objects.count() == 0
        refresh_connection()
        assert connection.connection is raw


@pytest.mark.django_db(transaction=True)
def test_refresh_closes_a_connection_past_a_positive_conn_max_age():
    """A positive CONN_MAX_AGE is honoured: kept while young, closed once it is older than that."""
    with conn_max_age(60):
        raw = fresh_connection()
        refresh_connection()
        assert connection.connection is raw
    with conn_max_age(0.3):
        raw = fresh_connection()

        def closed():
            refresh_connection()
            return connection.connection is None

        wait_for(closed, timeout=10, message="the connection to be closed past its age")
        assert Job.objects.count() == 0  # a new connection
        assert connection.connection is not None and connection.connection is not raw


@pytest.mark.django_db(transaction=True)
def test_refresh_closes_a_broken_connection(db_vendor):
    """A session the server ended: the next query fails, and refresh_connection() drops the connection."""
    needs_sessions(db_vendor)
    with conn_max_age(0):
        fresh_connection()
        end_own_session()
        with pytest.raises((OperationalError, InterfaceError)):
            Job.objects.count()
        assert connection.errors_occurred and not connection.is_usable()

        refresh_connection()

        assert connection.connection is None
        assert Job.objects.count() == 0  # and the next query reconnects


@pytest.mark.django_db(transaction=True)
def test_a_session_lost_inside_a_transaction_is_database_trouble(db_vendor):
    """A claim whose session the server ended is the database's trouble, not a job's error."""
    needs_sessions(db_vendor)
    enqueue(KIND)
    fresh_connection()
    end_own_session()
    try:
        with pytest.raises((OperationalError, InterfaceError)) as lost:
            claim("database-test-claimer")
        assert database_trouble(lost.value)
    finally:
        connection.close()


@pytest.mark.django_db(transaction=True)
def test_refresh_keeps_a_healthy_connection_after_a_failed_query():
    """A query error that left the connection working (a job's bad SQL) is no reason to reconnect."""
    with conn_max_age(0):
        raw = fresh_connection()
        with pytest.raises(DatabaseError), connection.cursor() as cursor:
            cursor.execute("SELECT no_such_column FROM durajobs_job")
        assert connection.errors_occurred and connection.is_usable()

        refresh_connection()

        assert connection.connection is raw


def connections_opened_by_a_job_thread(jobs: int) -> int:
    """Run ``jobs`` jobs with an in-process burst worker of one job thread; count its new connections."""
    job_ids = [enqueue(KIND)[0].pk for _ in range(jobs)]
    opened = []

    def count(sender, connection, **kwargs):
        opened.append(threading.current_thread().name)

    connection_created.connect(count)
    try:
        worker = Worker(WorkerOptions(concurrency=1, burst=True, poll_interval=0.1))
        # Not in the main thread, so the worker installs no signal handlers in the test process.
        thread = threading.Thread(target=worker.run, name="test-worker")
        thread.start()
        thread.join(60)
    finally:
        connection_created.disconnect(count)
    assert not thread.is_alive()
    assert statuses(job_ids) == {Status.DONE: jobs}
    return Counter(opened)["durajobs-job-0"]


@pytest.mark.django_db(transaction=True)
def test_a_worker_thread_does_not_reconnect_for_every_job():
    """With CONN_MAX_AGE 0, a job thread that runs eight jobs connects no more often than for one."""
    assert connection.settings_dict["CONN_MAX_AGE"] == 0
    for_one = connections_opened_by_a_job_thread(1)
    for_eight = connections_opened_by_a_job_thread(8)
    assert 1 <= for_one == for_eight


# 2. job_changed and NOTIFY only when the enqueue commits ---------------------------------------


@pytest.mark.django_db(transaction=True)
def test_a_rolled_back_enqueue_notifies_nobody(db_vendor):
    """PostgreSQL: an enqueue rolled back sends no NOTIFY and no job_changed; a committed one sends both."""
    if db_vendor != "postgresql":
        pytest.skip("LISTEN/NOTIFY is PostgreSQL's")
    changes = []

    def record(sender, job, previous_status, status, **kwargs):
        changes.append((job.pk, previous_status, status))

    listener = connection.Database.connect(**connection.get_connection_params(), autocommit=True)
    job_changed.connect(record)
    try:
        listener.execute(f"LISTEN {NOTIFY_CHANNEL}")

        class Undo(Exception):
            pass

        with pytest.raises(Undo), transaction.atomic():
            enqueue(KIND, queue="database-rolled-back")
            raise Undo
        assert list(listener.notifies(timeout=0.3, stop_after=1)) == []
        assert changes == []

        with transaction.atomic():
            job = enqueue(KIND, queue="database-committed")[0]
            assert list(listener.notifies(timeout=0.3, stop_after=1)) == []  # not before the commit
            assert changes == []
        notes = list(listener.notifies(timeout=10, stop_after=1))
        assert [(note.channel, note.payload) for note in notes] == [(NOTIFY_CHANNEL, "database-committed")]
        assert changes == [(job.pk, None, Status.QUEUED)]
    finally:
        job_changed.disconnect(record)
        listener.close()


# 3. The models' checks against the database in use ---------------------------------------------


@pytest.mark.django_db
def test_the_models_pass_the_database_checks_of_the_database_in_use():
    """Django 6 runs these before every management command: MariaDB would warn of the partial index.
    They ask the database what it supports, so they belong with the database."""
    messages = checks.run_checks(databases=["default"], tags=[checks.Tags.models])
    assert [(message.id, message.obj) for message in messages] == []
