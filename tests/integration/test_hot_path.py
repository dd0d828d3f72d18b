"""The hot path: claim, checkpoint and finish as few kept statements, with the guarantees intact.

- A finish can claim the worker's next job in the same statement; it never does when the job
  was no longer ours, when the worker is stopping, or when pending reverts are due a look.
- A first run takes its steps from the kind's declaration instead of reading them, and goes by
  the rows when the declaration changed since the enqueue.
- On PostgreSQL only claims and steps marked running skip waiting for the disk (the crash test
  is ``test_database_workers.test_workers_ride_out_a_postgresql_restart[immediate]``), and only these
  statements are prepared.
- Whoever watches the queries (``CaptureQueriesContext``, ``DEBUG``) sees these statements too.
- What the kept statements write and read is what the ORM writes and reads (empty values written
  as literals, instances built without ``__init__``), and a finish that fails half-way leaves
  nothing behind, also in the bare transaction it takes on SQLite.
- Log ids grow without SQLite's ``AUTOINCREMENT``; lease tokens differ in a forked process.
"""

from __future__ import annotations

import cProfile
import os
import pstats
from datetime import UTC, datetime
from zoneinfo import ZoneInfo

import pytest
from django.db import DatabaseError, connection
from django.db.models.signals import post_init
from django.test import override_settings
from django.test.utils import CaptureQueriesContext

from django_durajobs import Job, JobStep, Status, drain, enqueue, enqueue_many, store
from django_durajobs.engine.runner import execute
from django_durajobs.registry import job, unregister
from django_durajobs.signals import job_changed
from django_durajobs.status import StepState
from django_durajobs.store import claiming, sql

pytestmark = pytest.mark.django_db(transaction=True)


@pytest.fixture
def queue(request):
    """A queue of this test's own, so that claims see only its jobs."""
    return f"hot-{request.node.name}"[:100]


@pytest.fixture
def revert_lookup_not_due(monkeypatch):
    """As just after a claim looked for pending reverts: a finish may then claim a successor."""
    monkeypatch.setattr(claiming, "_next_revert_lookup", float("inf"))


def claim_in(queue, worker_id="hot-worker"):
    lease = store.claim(worker_id, queues=[queue])
    assert lease is not None
    return lease


# Finishing and claiming the next job at once ---------------------------------------------------


def test_a_finish_claims_the_most_urgent_next_job_of_the_same_queues(queue, revert_lookup_not_due):
    first, _ = enqueue("states_basic", queue=queue)
    later, _ = enqueue("states_basic", queue=queue)
    urgent, _ = enqueue("states_basic", queue=queue, priority=10)
    enqueue("states_basic", queue=f"{queue}-other", priority=100)
    lease = claim_in(queue)
    assert lease.job.pk == urgent.pk
    changes = []

    def record(sender, job, previous_status, status, **kwargs):
        changes.append((job.pk, previous_status, status))

    job_changed.connect(record)
    try:
        ran = execute(lease, then_claim=lambda: True)
    finally:
        job_changed.disconnect(record)

    assert ran.status == Status.DONE
    successor = ran.next_lease
    assert successor is not None and successor.job.pk == first.pk
    row = Job.objects.get(pk=first.pk)
    assert (row.status, row.attempt, row.locked_by, row.lease_token) == (
        Status.RUNNING,
        1,
        "hot-worker",
        successor.token,
    )
    assert changes == [(urgent.pk, Status.RUNNING, Status.DONE), (first.pk, Status.QUEUED, Status.RUNNING)]
    ran = execute(successor, then_claim=lambda: True)
    assert ran.status == Status.DONE and ran.next_lease.job.pk == later.pk
    last = execute(ran.next_lease, then_claim=lambda: True)
    assert last.status == Status.DONE and last.next_lease is None  # nothing left in these queues


def test_a_finish_claims_interrupted_work_before_older_work_not_started(queue, revert_lookup_not_due):
    """The claim a finish makes in the same statement orders as every claim: a job its stopping
    worker handed back goes before a job due earlier that has not started."""
    running, _ = enqueue("states_basic", queue=queue)
    interrupted, _ = enqueue("states_basic", queue=queue)
    lease, stopping = claim_in(queue), claim_in(queue, "hot-stopping-worker")
    assert (lease.job.pk, stopping.job.pk) == (running.pk, interrupted.pk)
    store.release(stopping.job, "stopping")
    older, _ = enqueue("states_basic", queue=queue)
    Job.objects.filter(pk=older.pk).update(next_run_at=running.next_run_at)

    ran = execute(lease, then_claim=lambda: True)

    assert ran.status == Status.DONE and ran.next_lease.job.pk == interrupted.pk
    assert ran.next_lease.job.interrupted is False
    assert Job.objects.get(pk=interrupted.pk).interrupted is False


def test_a_finish_claims_nothing_when_the_worker_stops_claiming(queue, revert_lookup_not_due):
    enqueue("states_basic", queue=queue)
    waiting, _ = enqueue("states_basic", queue=queue)
    lease = claim_in(queue)

    ran = execute(lease, then_claim=lambda: False)

    assert ran.status == Status.DONE and ran.next_lease is None
    assert Job.objects.get(pk=waiting.pk).status == Status.QUEUED


def test_a_finish_whose_lease_was_lost_claims_nothing(queue, revert_lookup_not_due):
    taken, _ = enqueue("states_basic", queue=queue)
    untouched, _ = enqueue("states_basic", queue=queue)
    stale = claim_in(queue)
    Job.objects.filter(pk=taken.pk).update(lease_token="someone-else")

    ran = execute(stale, then_claim=lambda: True)

    assert ran.status is None and ran.next_lease is None
    assert Job.objects.get(pk=untouched.pk).status == Status.QUEUED
    assert Job.objects.get(pk=taken.pk).status == Status.RUNNING  # left to its new owner


def test_a_finish_leaves_the_next_claim_to_claim_when_pending_reverts_are_due(queue, monkeypatch):
    """A busy queue must not hide pending reverts: claim() looks for them first now and then."""
    enqueue("states_basic", queue=queue)
    waiting, _ = enqueue("states_basic", queue=queue)
    lease = claim_in(queue)
    monkeypatch.setattr(claiming, "_next_revert_lookup", 0.0)

    ran = execute(lease, then_claim=lambda: True)

    assert ran.status == Status.DONE and ran.next_lease is None
    assert Job.objects.get(pk=waiting.pk).status == Status.QUEUED


@job("hot_fails", title="Hot path: fails")
def hot_fails(job, ctx):
    raise ValueError("disk full")


def test_a_failure_outcome_also_claims_the_next_job(queue, revert_lookup_not_due):
    """Outcomes other than done take a transaction of several statements; the claim joins it."""
    failing, _ = enqueue("hot_fails", queue=queue, priority=5)
    following, _ = enqueue("states_basic", queue=queue)
    lease = claim_in(queue)
    assert lease.job.pk == failing.pk

    ran = execute(lease, then_claim=lambda: True)

    assert ran.status == Status.FAILED
    assert ran.next_lease is not None and ran.next_lease.job.pk == following.pk
    assert Job.objects.get(pk=following.pk).status == Status.RUNNING


# Steps of a first run --------------------------------------------------------------------------


@pytest.fixture
def redeclared():
    """A kind that a test declares anew (as a new release would) between enqueue and run."""
    name = "hot_redeclared"
    ran: list[str] = []

    def declare(steps):
        unregister(name)

        @job(name, steps=steps)
        def run(job, ctx):
            for step_id in steps:
                ctx.step(step_id, lambda step_id=step_id: ran.append(step_id))

    yield declare, ran
    unregister(name)


def steps_by_position(job_id):
    return list(JobStep.objects.filter(job_id=job_id).order_by("position").values_list("step_id", "state"))


def test_a_first_run_writes_its_declared_steps_without_reading_them(queue):
    job_row, _ = enqueue("states_basic", queue=queue)
    lease = claim_in(queue)

    with CaptureQueriesContext(connection) as statements:
        assert execute(lease).status == Status.DONE

    step_table = connection.ops.quote_name(JobStep._meta.db_table)
    assert not [
        query for query in statements if query["sql"].startswith("SELECT") and step_table in query["sql"]
    ]
    assert all(state == StepState.DONE for _, state in steps_by_position(job_row.pk))


def test_a_run_after_the_declaration_changed_goes_by_the_jobs_own_steps(redeclared, queue):
    declare, ran = redeclared
    declare(["fetch", "store"])
    job_row, _ = enqueue("hot_redeclared", queue=queue)
    declare(["fetch", "check", "store"])  # a release added a step meanwhile

    assert execute(claim_in(queue)).status == Status.DONE

    assert ran == ["fetch", "check", "store"]
    assert steps_by_position(job_row.pk) == [
        ("fetch", StepState.DONE),
        ("store", StepState.DONE),
        ("check", StepState.DONE),  # appended when first met, after the steps the job had
    ]


def test_a_run_after_a_step_was_dropped_from_the_declaration_leaves_that_step_alone(redeclared, queue):
    declare, ran = redeclared
    declare(["fetch", "store"])
    job_row, _ = enqueue("hot_redeclared", queue=queue)
    declare(["store"])

    assert execute(claim_in(queue)).status == Status.DONE

    assert ran == ["store"]
    assert steps_by_position(job_row.pk) == [("fetch", StepState.PENDING), ("store", StepState.DONE)]


# Waiting for the disk, and prepared statements (PostgreSQL) ------------------------------------


def statements_of_a_run(queue):
    enqueue("states_basic", queue=queue)  # two steps
    with CaptureQueriesContext(connection) as captured:
        drain()
    return [query["sql"] for query in captured]


def test_only_claims_and_steps_marked_running_skip_waiting_for_the_disk(db_vendor, queue):
    if db_vendor != "postgresql":
        pytest.skip("synchronous_commit is PostgreSQL's")
    statements = statements_of_a_run(queue)
    job_table, step_table = Job._meta.db_table, JobStep._meta.db_table

    claims = [
        sql for sql in statements if sql.startswith(f'WITH claimed AS (UPDATE "{job_table}" SET "status"')
    ]
    step_writes = [sql for sql in statements if sql.startswith(f'UPDATE "{step_table}"')]
    finishes = [sql for sql in statements if sql.startswith("WITH finished")]
    # The claim, which starts the first step; its checkpoint, which starts the second; the second's
    # checkpoint.
    assert claims and finishes and len(step_writes) == 2
    assert f'started AS (UPDATE "{step_table}"' in claims[0]
    no_flush = "synchronous_commit"
    assert all(no_flush in sql for sql in claims)
    assert not any(no_flush in sql for sql in step_writes + finishes)


def test_statements_in_a_transaction_wait_for_the_disk(db_vendor, queue):
    """Inside a caller's transaction the setting would cover the caller's own writes too."""
    if db_vendor != "postgresql":
        pytest.skip("synchronous_commit is PostgreSQL's")
    from django.db import transaction

    enqueue("states_basic", queue=queue)
    with CaptureQueriesContext(connection) as captured, transaction.atomic():
        drain()
    assert not any("synchronous_commit" in query["sql"] for query in captured)


def prepared_statements() -> list[str]:
    with connection.cursor() as cursor:
        cursor.execute("SELECT statement FROM pg_prepared_statements")
        return [row[0] for row in cursor.fetchall()]


def test_only_the_hot_path_statements_are_prepared(db_vendor, queue):
    if db_vendor != "postgresql" or connection.Database.__name__ != "psycopg":
        pytest.skip("prepared statements are psycopg 3's, on PostgreSQL")
    connection.close()  # a fresh session, with nothing prepared yet
    for _ in range(10):
        list(Job.objects.filter(queue=queue))  # the ORM's own queries: Django prepares none

    enqueue_many("states_basic", [{"queue": queue} for _ in range(3)])
    assert drain() == 3

    prepared = prepared_statements()
    job_table = Job._meta.db_table
    assert any(sql.startswith(f'WITH claimed AS (UPDATE "{job_table}" SET "status"') for sql in prepared)
    assert any(sql.startswith("WITH finished") for sql in prepared)
    assert not any(sql.startswith("SELECT") and f'"{job_table}"."queue"' in sql for sql in prepared)


@override_settings(DURAJOBS={"PREPARED_STATEMENTS": False})
def test_prepared_statements_can_be_turned_off_for_a_pooler(db_vendor, queue):
    if db_vendor != "postgresql":
        pytest.skip("prepared statements are PostgreSQL's")
    connection.close()
    enqueue_many("states_basic", [{"queue": queue} for _ in range(3)])

    assert drain() == 3

    assert prepared_statements() == []
    assert set(Job.objects.filter(queue=queue).values_list("status", flat=True)) == {Status.DONE}


def test_watched_queries_see_the_hot_path(queue):
    """CaptureQueriesContext (and DEBUG) see the claim, the checkpoints and the finish."""
    statements = statements_of_a_run(queue)
    job_table = connection.ops.quote_name(Job._meta.db_table)
    step_table = connection.ops.quote_name(JobStep._meta.db_table)

    # Two steps: the first marked running (on PostgreSQL by the claim), its checkpoint marking the
    # second, the second's.
    step_writes = sum(sql.startswith(f"UPDATE {step_table}") for sql in statements)
    assert step_writes == (2 if connection.vendor == "postgresql" else 3)
    finished = [sql for sql in statements if sql.startswith(("WITH finished", f"UPDATE {job_table}"))]
    assert any('"locked_by" = ' in sql.replace("`", '"') for sql in finished)


def test_a_heartbeat_does_not_call_a_just_finished_job_lost(queue, caplog):
    """From the start of recording an outcome until its thread moves on, a lease is still listed as held."""
    from django_durajobs.worker import Worker

    enqueue("states_basic", queue=queue)
    taken, _ = enqueue("states_basic", queue=queue)
    worker = Worker()
    finished = claim_in(queue, worker.worker_id)
    assert execute(finished).status == Status.DONE
    stalled = claim_in(queue, worker.worker_id)
    assert stalled.job.pk == taken.pk
    Job.objects.filter(pk=taken.pk).update(lease_token="someone-else")  # taken over meanwhile
    worker._held = {1: finished, 2: stalled}

    with caplog.at_level("WARNING", logger="django_durajobs.worker"):
        worker._heartbeat()

    warned = [record.getMessage() for record in caplog.records if "lease lost" in record.getMessage()]
    assert warned == [f"Job {taken.pk}: lease lost to another worker; its thread will abandon it"]


# As the ORM writes and reads ----------------------------------------------------------------


def test_a_claimed_job_is_the_job_the_orm_reads(queue):
    enqueue("states_basic", subject={"host": "web-1", "ports": [80, 443]}, queue=queue, label="Web")
    lease = claim_in(queue)

    read = Job.objects.get(pk=lease.job.pk)
    fields = [field.attname for field in Job._meta.concrete_fields]
    if connection.vendor == "mysql":  # set by the server's clock, which a claim there does not read back
        fields.remove("locked_at")
    claimed = {name: getattr(lease.job, name) for name in fields}
    assert claimed == {name: getattr(read, name) for name in fields}
    assert (lease.job._state.adding, lease.job._state.db) == (False, "default")
    lease.job.label = "Renamed"
    lease.job.save(update_fields=["label"])  # an instance like any other
    assert Job.objects.get(pk=read.pk).label == "Renamed"


def test_init_receivers_see_claimed_jobs(queue):
    """Without receivers a claim builds the instance directly; with one, as the ORM does."""
    enqueue("states_basic", queue=queue)
    seen = []

    def record(sender, instance, **kwargs):
        seen.append(instance.pk)

    post_init.connect(record, sender=Job)
    try:
        lease = claim_in(queue)
    finally:
        post_init.disconnect(record, sender=Job)
    assert seen == [lease.job.pk]


def stored(pk: int, columns: list[str]) -> dict:
    """Each column's stored value and whether it is SQL NULL, read past the ORM."""
    quote = connection.ops.quote_name
    selected = ", ".join(f"{quote(column)}, {quote(column)} IS NULL" for column in columns)
    with connection.cursor() as cursor:
        cursor.execute(f"SELECT {selected} FROM {quote(Job._meta.db_table)} WHERE id = %s", [pk])
        row = cursor.fetchone()
    return {column: (row[2 * index], bool(row[2 * index + 1])) for index, column in enumerate(columns)}


def test_a_finish_stores_empty_values_as_the_orm_would(queue):
    """None and "" go into the statement as literals where that stores the same; a JSON field's
    None stays whatever the field makes of it."""
    finished, _ = enqueue("states_basic", queue=queue, priority=1)
    updated, _ = enqueue("states_basic", queue=queue)
    Job.objects.filter(pk__in=[finished.pk, updated.pk]).update(
        error="boom", wait_reason="later", result={"x": 1}, resume_data=[1], eta_at=finished.created_at
    )
    outcome = {
        "status": Status.FAILED,
        "error": "",
        "wait_reason": "",
        "result": None,
        "resume_data": None,
        "eta_at": None,
        "parent_id": None,
    }
    lease = claim_in(queue)
    assert lease.job.pk == finished.pk
    lease.finish(dict(outcome), trim=False)
    Job.objects.filter(pk=updated.pk).update(locked_by="", lease_token="", locked_at=None, **outcome)

    columns = ["status", "error", "wait_reason", "result", "resume_data", "eta_at", "parent_id", "locked_by"]
    assert stored(finished.pk, columns) == stored(updated.pk, columns)
    assert stored(finished.pk, ["error"])["error"] == ("", False)


@pytest.fixture
def failing_log(db_vendor):
    """A trigger that makes storing the log line "Done." fail, as a full disk would."""
    table = connection.ops.quote_name("django_durajobs_joblog")
    create, drop = {
        "sqlite": (
            [
                f"CREATE TRIGGER durajobs_test_log_full BEFORE INSERT ON {table} WHEN NEW.line = 'Done.' "
                "BEGIN SELECT RAISE(ABORT, 'log full'); END"
            ],
            ["DROP TRIGGER durajobs_test_log_full"],
        ),
        "postgresql": (
            [
                "CREATE FUNCTION durajobs_test_log_full() RETURNS trigger AS $$ BEGIN "
                "IF NEW.line = 'Done.' THEN RAISE EXCEPTION 'log full'; END IF; RETURN NEW; END $$ "
                "LANGUAGE plpgsql",
                f"CREATE TRIGGER durajobs_test_log_full BEFORE INSERT ON {table} "
                "FOR EACH ROW EXECUTE FUNCTION durajobs_test_log_full()",
            ],
            [f"DROP TRIGGER durajobs_test_log_full ON {table}", "DROP FUNCTION durajobs_test_log_full()"],
        ),
        "mysql": (
            [
                f"CREATE TRIGGER durajobs_test_log_full BEFORE INSERT ON {table} FOR EACH ROW "
                "BEGIN IF NEW.line = 'Done.' THEN SIGNAL SQLSTATE '45000' SET MESSAGE_TEXT = 'log full'; "
                "END IF; END"
            ],
            ["DROP TRIGGER durajobs_test_log_full"],
        ),
    }[db_vendor]
    with connection.cursor() as cursor:
        for statement in create:
            cursor.execute(statement)
    yield
    with connection.cursor() as cursor:
        for statement in drop:
            cursor.execute(statement)


def test_a_finish_that_fails_half_way_leaves_nothing_behind(queue, failing_log, revert_lookup_not_due):
    running, _ = enqueue("states_basic", queue=queue, priority=1)
    waiting, _ = enqueue("states_basic", queue=queue)
    # As a job that ran before (its first run, done without a word, would write no line at all).
    Job.objects.filter(pk=running.pk).update(started_at=datetime(2026, 1, 1, tzinfo=UTC))
    lease = claim_in(queue)

    with pytest.raises(DatabaseError):
        execute(lease, then_claim=lambda: True)

    assert not connection.in_atomic_block
    if connection.vendor == "sqlite":
        assert not connection.connection.in_transaction
    job = Job.objects.get(pk=running.pk)
    assert (job.status, job.lease_token) == (Status.RUNNING, lease.token)  # still ours, to finish again
    assert not job.log_lines.filter(line="Done.").exists()
    assert Job.objects.get(pk=waiting.pk).status == Status.QUEUED  # its claim was undone with the rest


@pytest.mark.parametrize(
    "moment",
    [
        pytest.param(datetime(2026, 12, 1, 9, 30, 5, 123456, tzinfo=UTC), id="UTC"),
        pytest.param(datetime(2026, 12, 1, 9, 30, 5, tzinfo=UTC), id="UTC, whole second"),
        pytest.param(datetime(2026, 12, 1, 9, 30, 5, 7, tzinfo=ZoneInfo("Europe/Vienna")), id="another zone"),
        pytest.param(None, id="None"),
    ],
)
def test_moments_go_to_and_come_from_the_driver_as_django_converts_them(moment):
    db = connection
    written = sql.prepared_datetime(db, moment)
    assert written == db.ops.adapt_datetimefield_value(moment)
    if db.vendor in ("sqlite", "mysql") and moment is not None:
        naive = datetime.fromisoformat(written)  # what the driver hands back
        field = Job._meta.get_field("created_at")
        assert sql.read_moment(naive, field.get_col(Job._meta.db_table), db) == moment
        assert sql.read_moment(naive, None, db) == db.ops.convert_datetimefield_value(naive, None, db)


def test_log_line_ids_grow_without_sqlites_autoincrement(queue):
    """On SQLite the log's ids are a plain ``INTEGER PRIMARY KEY``: no ``sqlite_sequence`` row to
    rewrite per line; a new line still sorts after every line of its job, also after a trim."""
    job, _ = enqueue("states_basic", queue=queue)
    for number in range(5):
        store.append_log(job.pk, f"line {number}")
    if connection.vendor == "sqlite":
        with connection.cursor() as cursor:
            cursor.execute("SELECT sql FROM sqlite_master WHERE name = 'django_durajobs_joblog'")
            assert "AUTOINCREMENT" not in cursor.fetchone()[0].upper()
    with override_settings(DURAJOBS={"LOG_LINES_KEPT": 2}):
        store.trim_log(job.pk)
    store.append_log(job.pk, "after the trim")
    lines = list(job.log_lines.order_by("id").values_list("line", flat=True))
    assert lines == ["line 3", "line 4", "after the trim"]


@pytest.mark.filterwarnings(
    "ignore:This process .* is multi-threaded:DeprecationWarning"
)  # the child only draws tokens
def test_a_forked_worker_draws_lease_tokens_of_its_own():
    """Tokens come from a generator per process, seeded again in a forked child (``runjobs``
    started by a forking supervisor must not repeat its parent's tokens)."""
    read_end, write_end = os.pipe()
    pid = os.fork()
    if pid == 0:  # the child: its next tokens, then out without running any cleanup
        os.write(write_end, " ".join(store.new_token() for _ in range(3)).encode())
        os._exit(0)
    os.close(write_end)
    parents = {store.new_token() for _ in range(3)}
    with os.fdopen(read_end) as pipe:
        childs = set(pipe.read().split())
    os.waitpid(pid, 0)
    assert len(childs) == 3 and all(len(token) == 32 for token in childs)
    assert not parents & childs


def test_the_steps_of_a_job_translate_nothing_until_a_message_is_shown(queue):
    """What each step's checks name in their error messages (its id, its timeout, its result) is
    translated only if a message is made: the one text a two-step job translates is its "Done."."""
    job, _ = enqueue("states_basic", queue=queue)
    profile = cProfile.Profile()
    assert profile.runcall(drain) == 1
    translations = sum(
        calls
        for (path, _line, function), (_primitive, calls, *_times) in pstats.Stats(profile).stats.items()
        if function == "gettext" and path.endswith(os.path.join("translation", "trans_real.py"))
    )
    job.refresh_from_db()
    assert job.status == Status.DONE
    assert translations == 1
