"""Workers and their database: a restarted server, dropped sessions, connection hygiene, claim cost.

Workers run as real ``manage.py runjobs`` processes (kinds: ``tests/testapp/kinds_database.py``).
A worker that loses its database must keep running, reconnect once the database answers, give
the interrupted jobs back and finish them, and never re-run a finished step beyond the one
at-least-once repeat of the step in flight per lost worker (counted in ``Job.worker_losses``).
"""

from __future__ import annotations

import os
import re
import shutil
import statistics
import subprocess
import sys
import threading
import time
from collections import Counter
from contextlib import contextmanager

import pytest
from django.conf import settings
from django.db import DatabaseError, InterfaceError, OperationalError, connection, transaction
from django.db.backends.signals import connection_created
from django.test.utils import CaptureQueriesContext

from django_durajobs import Job, Status, enqueue
from django_durajobs.signals import job_changed
from django_durajobs.store import NOTIFY_CHANNEL, claim, database_trouble
from django_durajobs.worker import Worker, WorkerOptions, refresh_connection
from tests.helpers import REPO_ROOT, wait_for
from tests.testapp.kinds_database import TWO_STEPS, effect_name, go_file, started_markers
from tests.testapp.models import SideEffect

KIND = "database_two_steps"

#: Timing for the worker processes: interrupted jobs are given back within a second of the
#: database answering again (the housekeeping loop releases them every heartbeat).
WORKER_ENV = {"DURAJOBS_HEARTBEAT_SECONDS": "0.5", "DURAJOBS_LEASE_SECONDS": "30"}

ON_POSTGRESQL = settings.DATABASES["default"]["ENGINE"] == "django.db.backends.postgresql"

#: Worker log lines that show it noticed its database was gone.
LOST_DATABASE = re.compile(r"database unavailable|the database connection was lost")


# Helpers ---------------------------------------------------------------------------------------


@pytest.fixture
def runjobs(child_env, tmp_path):
    """Start ``manage.py runjobs`` processes on the test database; all are killed afterwards."""
    started = []

    def start(*args):
        log_path = tmp_path / f"runjobs-{len(started)}.log"
        log = log_path.open("w")
        proc = subprocess.Popen(
            [sys.executable, "-m", "django", "runjobs", "--poll-interval", "0.2", *args],
            env={**child_env, **WORKER_ENV},
            cwd=REPO_ROOT,
            stdout=log,
            stderr=subprocess.STDOUT,
        )
        proc.log_path = log_path
        started.append((proc, log))
        return proc

    yield start
    for proc, log in started:
        if proc.poll() is None:
            proc.kill()
        proc.wait(timeout=10)
        log.close()


def log_lines(proc) -> list[str]:
    return proc.log_path.read_text().splitlines()


def log_tail(proc, lines: int = 40) -> str:
    return "\n".join(log_lines(proc)[-lines:])


def finished_after_noticing(proc) -> list[str]:
    """The jobs a worker finished after it first logged that its database was gone."""
    lines = log_lines(proc)
    noticed = next((i for i, line in enumerate(lines) if LOST_DATABASE.search(line)), None)
    if noticed is None:
        return []
    return [line for line in lines[noticed + 1 :] if re.search(rf"Job \d+ \({KIND}\) done:", line)]


def ended(job_id) -> bool:
    return Job.objects.get(pk=job_id).is_terminal


def statuses(job_ids) -> Counter:
    return Counter(Job.objects.filter(pk__in=job_ids).values_list("status", flat=True))


def effect_counts(job_id) -> dict[str, int]:
    counts = Counter(SideEffect.objects.filter(name__startswith=f"{job_id}:").values_list("name", flat=True))
    return {step: counts[effect_name(job_id, step)] for step in TWO_STEPS}


def repeats_beyond_the_rule(job_ids) -> dict[int, tuple[dict[str, int], int]]:
    """Jobs with a step that never ran, or ran more than once per lost worker plus once."""
    counts: dict[int, Counter] = {job_id: Counter() for job_id in job_ids}
    for name in SideEffect.objects.values_list("name", flat=True):
        job_id, step = name.split(":")
        if int(job_id) in counts:
            counts[int(job_id)][step] += 1
    losses = dict(Job.objects.filter(pk__in=job_ids).values_list("pk", "worker_losses"))
    return {
        job_id: (dict(counts[job_id]), losses[job_id])
        for job_id in job_ids
        if any(not 1 <= counts[job_id][step] <= 1 + losses[job_id] for step in TWO_STEPS)
    }


def session_id(cursor) -> int:
    """The database's id of the session ``cursor`` belongs to."""
    postgresql = connection.vendor == "postgresql"
    cursor.execute("SELECT pg_backend_pid()" if postgresql else "SELECT CONNECTION_ID()")
    return cursor.fetchone()[0]


def other_sessions(cursor) -> list[int]:
    """Every other client session on the test database (the workers', in these tests)."""
    if connection.vendor == "postgresql":
        cursor.execute(
            "SELECT pid FROM pg_stat_activity WHERE datname = current_database() "
            "AND backend_type = 'client backend' AND pid <> pg_backend_pid()"
        )
    else:
        cursor.execute(
            "SELECT id FROM information_schema.processlist WHERE db = DATABASE() AND id <> CONNECTION_ID()"
        )
    return [row[0] for row in cursor.fetchall()]


def end_sessions(cursor, sessions) -> None:
    """End ``sessions`` the way a DBA (or a failover proxy) does, and wait until they are gone."""
    for session in sessions:
        try:
            if connection.vendor == "postgresql":
                cursor.execute("SELECT pg_terminate_backend(%s, 10000)", [session])
            else:
                cursor.execute(f"KILL CONNECTION {int(session)}")
        except DatabaseError:
            pass  # it ended by itself meanwhile

    def gone():
        if connection.vendor == "postgresql":
            cursor.execute("SELECT count(*) FROM pg_stat_activity WHERE pid = ANY(%s)", [list(sessions)])
        else:
            ids = ", ".join(str(int(session)) for session in sessions)
            cursor.execute(
                f"SELECT count(*) FROM information_schema.processlist WHERE id IN ({ids}) "
                "AND command <> 'Killed'"
            )
        return cursor.fetchone()[0] == 0

    wait_for(gone, timeout=15, message="the ended sessions to disappear")


def drop_worker_sessions() -> int:
    """From the test's own session, end every other session on the test database; returns how many."""
    with connection.cursor() as cursor:
        sessions = other_sessions(cursor)
        end_sessions(cursor, sessions)
    return len(sessions)


def end_own_session() -> None:
    """End the test's own session from a second connection, as the server would."""
    with connection.cursor() as cursor:
        mine = session_id(cursor)
    outside = connection.get_new_connection(connection.get_connection_params())
    try:
        with outside.cursor() as cursor:
            end_sessions(cursor, [mine])
    finally:
        outside.close()


def needs_sessions(db_vendor):
    if db_vendor == "sqlite":
        pytest.skip("SQLite has no server sessions that could be dropped")


# 1. PostgreSQL restarted while workers run ------------------------------------------------------

RESTART_JOBS = 160


def postgresql_version() -> str:
    versions = os.listdir("/etc/postgresql")
    assert len(versions) == 1, f"expected one PostgreSQL version under /etc/postgresql, found {versions}"
    return versions[0]


def restart_postgresql(mode: str) -> None:
    """``fast``: a clean restart. ``immediate``: as a crash, without flushing the write-ahead log,
    so the commits that did not wait for the disk (claims, steps marked running) may be lost."""
    subprocess.run(
        ["pg_ctlcluster", "--skip-systemctl-redirect", postgresql_version(), "main", "restart", "-m", mode],
        check=True,
        capture_output=True,
        timeout=120,
    )


@pytest.fixture
def postgresql_comes_back():
    """Whatever happens in the test, leave PostgreSQL running for everybody else on this machine."""
    yield
    ready = ["pg_isready", "-h", "127.0.0.1", "-t", "30"]
    if subprocess.run(ready, capture_output=True).returncode != 0:
        subprocess.run(
            ["pg_ctlcluster", "--skip-systemctl-redirect", postgresql_version(), "main", "start"],
            capture_output=True,
            timeout=120,
        )
        subprocess.run(ready, capture_output=True)


@pytest.mark.parametrize("mode", ["fast", "immediate"])
def test_workers_ride_out_a_postgresql_restart(db_vendor, runjobs, postgresql_comes_back, mode):
    """A restart mid-work, clean or as a crash: both workers live on, every job ends done, no
    finished step runs twice."""
    if db_vendor != "postgresql":
        pytest.skip("restarts the PostgreSQL server (pg_ctlcluster); the issue asks for PostgreSQL")
    if not shutil.which("pg_ctlcluster") or not os.path.isdir("/etc/postgresql"):
        pytest.skip("needs a local PostgreSQL cluster managed by pg_ctlcluster")
    # About 4 s of work for 4 threads, so the restart (after 20 jobs) always lands mid-work.
    job_ids = [enqueue(KIND, subject={"work_seconds": 0.05})[0].pk for _ in range(RESTART_JOBS)]
    workers = [runjobs("--concurrency", "2") for _ in range(2)]

    wait_for(
        lambda: statuses(job_ids)[Status.DONE] >= 20 or any(w.poll() is not None for w in workers),
        timeout=60,
        message="the workers to finish their first jobs",
    )
    assert all(w.poll() is None for w in workers), "\n\n".join(log_tail(w) for w in workers)
    before_restart = statuses(job_ids)[Status.DONE]

    restart_postgresql(mode)
    connection.close()  # the test's own session was cut as well

    assert statuses(job_ids)[Status.DONE] < RESTART_JOBS, "the restart did not land in the middle of the work"
    wait_for(
        lambda: (
            not Job.objects.filter(pk__in=job_ids).unfinished().exists()
            or any(w.poll() is not None for w in workers)
        ),
        timeout=90,
        message="every job to end",
    )
    assert [w.poll() for w in workers] == [None, None], "\n\n".join(log_tail(w) for w in workers)
    assert statuses(job_ids) == {Status.DONE: RESTART_JOBS}
    assert repeats_beyond_the_rule(job_ids) == {}
    for worker in workers:
        # Each noticed the restart and went on finishing jobs on a new connection.
        assert finished_after_noticing(worker), log_tail(worker, 200)
    print(f"done before the restart: {before_restart} of {RESTART_JOBS}")
    losses = Counter(Job.objects.filter(pk__in=job_ids).values_list("worker_losses", flat=True))
    print(f"worker losses (losses: jobs): {dict(losses)}")


# 2. A dropped connection ------------------------------------------------------------------------


def test_an_idle_worker_whose_sessions_are_dropped_reconnects_and_runs_the_next_job(db_vendor, runjobs):
    """Sessions ended under an idle worker: it logs, reconnects by itself and runs the next job."""
    needs_sessions(db_vendor)
    worker = runjobs("--concurrency", "1")
    warm_up = enqueue(KIND)[0]
    wait_for(lambda: ended(warm_up.pk) or worker.poll() is not None, timeout=30)
    assert worker.poll() is None, log_tail(worker)

    assert drop_worker_sessions() >= 2  # at least the job thread's and the housekeeping's
    wait_for(
        lambda: any(LOST_DATABASE.search(line) for line in log_lines(worker)) or worker.poll() is not None,
        timeout=30,
        message="the idle worker to notice its lost sessions",
    )

    job = enqueue(KIND)[0]
    wait_for(lambda: ended(job.pk) or worker.poll() is not None, timeout=30)
    assert worker.poll() is None, log_tail(worker)
    job.refresh_from_db()
    assert (job.status, job.worker_losses, job.attempt) == (Status.DONE, 0, 1)
    assert effect_counts(job.pk) == {"fetch": 1, "store": 1}
    assert any(f"Job {job.pk} ({KIND}) done:" in line for line in finished_after_noticing(worker))


def test_a_job_whose_session_is_dropped_mid_step_is_given_back_and_finished(db_vendor, runjobs, tmp_path):
    """Sessions ended while a step runs: the job goes back to the queue and the worker finishes it."""
    needs_sessions(db_vendor)
    worker = runjobs("--concurrency", "1")
    job = enqueue(KIND, subject={"dir": str(tmp_path), "hold_at": "store"})[0]
    wait_for(
        lambda: started_markers(tmp_path, job.pk, "store") or worker.poll() is not None,
        timeout=30,
        message="the step to start",
    )
    assert worker.poll() is None, log_tail(worker)

    assert drop_worker_sessions() >= 2
    go_file(tmp_path, job.pk).touch()

    wait_for(
        lambda: ended(job.pk) or worker.poll() is not None,
        timeout=30,
        message="the interrupted job to end",
    )
    assert worker.poll() is None, log_tail(worker)
    job.refresh_from_db()
    assert job.status == Status.DONE
    assert job.result == list(TWO_STEPS)
    assert job.worker_losses <= 1
    assert job.attempt == 1  # the interrupted try was handed back
    # The finished step never ran again; the step in flight at most once more per lost worker.
    counts = effect_counts(job.pk)
    assert counts["fetch"] == 1
    assert 1 <= counts["store"] <= 1 + job.worker_losses
    lines = log_lines(worker)
    assert any(f"Job {job.pk} interrupted: the database connection was lost" in line for line in lines), lines
    assert any(f"Job {job.pk} ({KIND}) done:" in line for line in finished_after_noticing(worker)), lines


# 3. Connection hygiene in-process ---------------------------------------------------------------


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


# 4. Claim cost with many finished jobs -------------------------------------------------------

FINISHED_ROWS = 100_000
DUE_BACKLOG = 20_000
CLAIMS = 30
DIGITS = " UNION ALL ".join(f"SELECT {digit} AS d" for digit in range(10))


def insert_copies(template: Job, copies: int) -> None:
    """Copy a job ``copies`` times (at most 100,000) in one INSERT … SELECT over cross-joined digits."""
    assert 0 < copies <= 100_000
    quote = connection.ops.quote_name
    table = quote(Job._meta.db_table)
    columns = [field.column for field in Job._meta.concrete_fields if not field.primary_key]
    digits = ", ".join(f"({DIGITS}) {quote(f'd{n}')}" for n in range(5))
    number = " + ".join(f"{10**n} * {quote(f'd{n}')}.d" for n in range(5))
    with connection.cursor() as cursor:
        cursor.execute(
            f"INSERT INTO {table} ({', '.join(quote(c) for c in columns)}) "
            f"SELECT {', '.join('t.' + quote(c) for c in columns)} FROM {table} t, {digits} "
            f"WHERE t.{quote('id')} = %s AND {number} < %s",
            [template.pk, copies],
        )


def analyze() -> None:
    """What autovacuum (or InnoDB's automatic statistics) soon does in production."""
    table = connection.ops.quote_name(Job._meta.db_table)
    with connection.cursor() as cursor:
        if connection.vendor == "mysql":
            cursor.execute(f"ANALYZE TABLE {table}")
            cursor.fetchall()
        else:
            cursor.execute(f"ANALYZE {table}")


class _Undo(Exception):
    pass


def claim_plan() -> str:
    """EXPLAIN of the statement ``claim()`` runs to find and lock a queued job (taken from a real
    claim, which is rolled back)."""
    locking = "FOR UPDATE SKIP LOCKED" if connection.vendor != "sqlite" else "LIMIT 1)"
    try:
        with CaptureQueriesContext(connection) as captured, transaction.atomic():
            claim("database-test-planner")
            raise _Undo
    except _Undo:
        pass
    statements = [query["sql"] for query in captured]
    [statement] = [sql for sql in statements if locking in sql and "'queued'" in sql]
    explain = "EXPLAIN QUERY PLAN " if connection.vendor == "sqlite" else "EXPLAIN "
    with connection.cursor() as cursor:
        cursor.execute(explain + statement)
        rows = cursor.fetchall()
    if connection.vendor == "mysql":
        return "\n".join(" ".join(str(cell) for cell in row) for row in rows)
    return "\n".join(str(row[-1]) for row in rows)


def mysql_plan_rows(plan: str) -> list[list[str]]:
    # EXPLAIN's columns: id select_type table type possible_keys key key_len ref rows Extra
    return [row.split() for row in plan.splitlines() if row.strip()]


def reads_every_row(plan: str) -> bool:
    """A sequential scan, or a walk through a whole index."""
    table = Job._meta.db_table
    if connection.vendor == "mysql":
        return any(row[2] == table and row[3] in ("ALL", "index") for row in mysql_plan_rows(plan))
    return bool(re.search(rf"Seq Scan on {table}\b|\bSCAN {table}\b", plan))


def uses_the_due_index(plan: str) -> bool:
    if connection.vendor == "mysql":
        return any(row[5] == "durajobs_due" for row in mysql_plan_rows(plan))
    return bool(re.search(r"(?:using|on|INDEX) durajobs_due\b", plan))


def median_claim_seconds() -> float:
    """Queue CLAIMS jobs, then time CLAIMS claims."""
    for _ in range(CLAIMS):
        enqueue(KIND)
    seconds = []
    for _ in range(CLAIMS):
        start = time.perf_counter()
        lease = claim("database-test-claimer")
        seconds.append(time.perf_counter() - start)
        assert lease is not None
    return statistics.median(seconds)


@pytest.mark.django_db(transaction=True)
def test_claiming_ignores_finished_jobs_however_many():
    """100,000 finished jobs: the claim query reads none of them, and a claim costs about the same."""
    nearly_empty = median_claim_seconds()

    template = enqueue(KIND)[0]
    Job.objects.filter(pk=template.pk).update(status=Status.DONE)
    insert_copies(template, FINISHED_ROWS)
    analyze()
    assert Job.objects.filter(status=Status.DONE).count() == FINISHED_ROWS + 1

    plan = claim_plan()
    assert not reads_every_row(plan), plan
    crowded = median_claim_seconds()
    print(
        f"\nmedian claim: {nearly_empty * 1000:.2f} ms nearly empty, {crowded * 1000:.2f} ms among "
        f"{FINISHED_ROWS} finished jobs\n{plan}"
    )
    assert crowded < 3 * nearly_empty + 0.001, (nearly_empty, crowded)


@pytest.mark.django_db(transaction=True)
def test_a_backlog_of_due_jobs_is_claimed_from_the_due_index():
    """20,000 due jobs: a claim takes the most urgent from ``durajobs_due`` instead of sorting them all."""
    nearly_empty = median_claim_seconds()

    template = enqueue(KIND)[0]
    insert_copies(template, DUE_BACKLOG)
    analyze()

    plan = claim_plan()
    backlog = median_claim_seconds()
    print(
        f"\nmedian claim: {nearly_empty * 1000:.2f} ms nearly empty, {backlog * 1000:.2f} ms with "
        f"{DUE_BACKLOG} due jobs\n{plan}"
    )
    assert uses_the_due_index(plan), plan
    assert not reads_every_row(plan), plan
    assert backlog < 3 * nearly_empty + 0.001, (nearly_empty, backlog)


# 5. job_changed and NOTIFY only when the enqueue commits ---------------------------------------


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
