"""Workers through a connection pooler in transaction mode (PgBouncer), with the default settings.

Run against scripts/pgbouncer's PgBouncer (skipped on a direct connection, but for the last test)::

    scripts/pgbouncer start 6433
    DATABASE_URL=postgres://postgres@127.0.0.1:6433/h33 \\
        DURAJOBS_TEST_LISTEN_DATABASE=postgres://postgres@127.0.0.1:5432/h33 \\
        scripts/test tests/e2e/test_pooler.py --reuse-db

(``--reuse-db``: PgBouncer keeps server connections to the test database, so it cannot be
dropped at the end.)
"""

from __future__ import annotations

import statistics

import pytest
from django.conf import settings
from django.db import connection
from django.utils import timezone

from django_durajobs import Job, Status, enqueue
from django_durajobs.models import Worker
from django_durajobs.testing import run_job
from tests.helpers import log_of, stop_cleanly, wait_for

pytestmark = pytest.mark.django_db(transaction=True)

PREPARING_OFF = "cannot keep prepared statements"
POLLS = "does not hear the notifications"


def through_a_pooler() -> bool:
    """Whether the tests' own connection reaches PostgreSQL through a pooler: the server's
    process id is not the one the connection was given at login."""
    if connection.vendor != "postgresql":
        return False
    connection.ensure_connection()
    with connection.cursor() as cursor:
        cursor.execute("SELECT pg_backend_pid()")
        return cursor.fetchone()[0] != connection.connection.info.backend_pid


@pytest.fixture
def pooled(transactional_db) -> None:
    if not through_a_pooler():
        pytest.skip("needs PostgreSQL through PgBouncer")


def listens(proc) -> bool | None:
    """What the worker's row says of its wake-up, once it said (its self-check takes a second)."""
    row = Worker.objects.filter(pid=proc.pid).first()
    return None if row is None else row.listens


def run_jobs(count: int) -> list[Job]:
    jobs = [enqueue("lifecycle_quick")[0] for _ in range(count)]
    for job in jobs:
        wait_for(lambda job=job: Job.objects.get(pk=job.pk).status == Status.DONE, timeout=60)
    return [Job.objects.get(pk=job.pk) for job in jobs]


def test_with_the_default_settings_jobs_run_and_preparing_stops_with_one_warning(pooled, child_env, runjobs):
    """No job fails or retries because of the pooler; the worker says once that it prepares nothing."""
    worker = runjobs("--concurrency", "4", "--poll-interval", "0.2", env=child_env)
    jobs = run_jobs(40)
    stop_cleanly([worker])
    assert {(job.status, job.attempt) for job in jobs} == {(Status.DONE, 1)}
    assert log_of(worker).count(PREPARING_OFF) == 1, log_of(worker)
    assert "DURAJOBS['PREPARED_STATEMENTS']" in log_of(worker)


def test_without_a_listen_database_the_worker_says_it_polls(pooled, child_env, runjobs):
    env = {key: value for key, value in child_env.items() if key != "DURAJOBS_TEST_LISTEN_DATABASE"}
    worker = runjobs("--poll-interval", "0.5", env=env)
    wait_for(lambda: POLLS in log_of(worker), timeout=30, message="the worker's warning")
    assert "DURAJOBS['LISTEN_DATABASE']" in log_of(worker)
    assert listens(worker) is False
    assert all(job.status == Status.DONE for job in run_jobs(3))  # by polling
    stop_cleanly([worker])


@pytest.mark.skipif("listen" not in settings.DATABASES, reason="needs DURAJOBS_TEST_LISTEN_DATABASE")
def test_with_a_listen_database_an_idle_worker_starts_a_new_job_within_a_second(pooled, child_env, runjobs):
    """``--poll-interval 5``: only the notification, heard on the direct connection, can start
    each job within a second."""
    worker = runjobs("--poll-interval", "5", env=child_env)
    wait_for(lambda: listens(worker), timeout=30, message="the worker to listen")
    run_jobs(1)  # warm: its job thread is back in its idle wait
    latencies = []
    for _ in range(5):
        before = timezone.now()
        [job] = run_jobs(1)
        latencies.append((job.started_at - before).total_seconds())
    stop_cleanly([worker])
    print(f"through the pooler, enqueue to start: {sorted(round(latency, 3) for latency in latencies)} s")
    assert max(latencies) < 1, latencies
    assert statistics.median(latencies) < 0.5, latencies
    assert POLLS not in log_of(worker)


def test_on_a_direct_connection_the_worker_listens_and_prepares(child_env, runjobs, db_vendor):
    if db_vendor != "postgresql" or through_a_pooler():
        pytest.skip("needs a direct connection to PostgreSQL")
    worker = runjobs("--poll-interval", "5", env=child_env)
    wait_for(lambda: listens(worker), timeout=30, message="the worker to listen")
    run_jobs(2)
    stop_cleanly([worker])
    assert PREPARING_OFF not in log_of(worker)
    assert POLLS not in log_of(worker)


def test_on_a_direct_connection_the_hot_path_is_prepared(db_vendor):
    """The check that keeps a pooler from its prepared statements leaves a direct connection's on."""
    if db_vendor != "postgresql" or through_a_pooler():
        pytest.skip("needs a direct connection to PostgreSQL")
    run_job(enqueue("lifecycle_quick")[0])
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT count(*) FROM pg_prepared_statements WHERE statement LIKE %s", ["%durajobs_job%"]
        )
        assert cursor.fetchone()[0] > 0
