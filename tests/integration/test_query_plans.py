"""What the statements of the hot path and of housekeeping read, held by their plans on the
database in use: a claim reads only due jobs, from the due index, however many finished jobs
there are, and past none of the jobs a full limit holds back nor of another queue's backlog; a
wake pass reads the due timed waits alone; a parent's children and the jobs ended lately come
from their own indexes; a prune unlinks reruns without reading every job; a checkpoint reads its
two step rows alone, however many steps its job has.
"""

from __future__ import annotations

import re
from datetime import timedelta

import pytest
from django.db import connection, transaction
from django.db.models import Model
from django.test.utils import CaptureQueriesContext
from django.utils import timezone

from django_durajobs import Job, JobStep, Status, enqueue, enqueue_many
from django_durajobs.engine.open_step import running_fields
from django_durajobs.status import StepState
from django_durajobs.store import claim, delete_jobs, lift_stale_lanes, wake_due_waits
from django_durajobs.store.checkpoints import checkpoint_and_start
from django_durajobs.store.claiming import ClaimRequest
from django_durajobs.store.family import children_of, open_children
from django_durajobs.store.holding import current_limits, held_now
from django_durajobs.store.limiting import claim_limited
from django_durajobs.store.overview import throughput
from tests.factories import insert_copies
from tests.testapp.kinds_database import KIND, TWO_STEPS

LIMITED_KIND = "limits_backup"  # one job at a time per server (tests/testapp/kinds_concurrency.py)

# Claim cost with many finished jobs -------------------------------------------------------

FINISHED_ROWS = 100_000
DUE_BACKLOG = 20_000
CLAIMS = 30


def analyze(model: type[Model] = Job) -> None:
    """What autovacuum (or InnoDB's automatic statistics) soon does in production."""
    table = connection.ops.quote_name(model._meta.db_table)
    with connection.cursor() as cursor:
        if connection.vendor == "mysql":
            cursor.execute(f"ANALYZE TABLE {table}")
            cursor.fetchall()
        else:
            cursor.execute(f"ANALYZE {table}")


class _Undo(Exception):
    pass


def claim_plan(queues: list[str] | None = None) -> str:
    """EXPLAIN of the statement ``claim()`` (of ``queues``) runs to find and lock a queued job
    (taken from a real claim, which is rolled back)."""
    locking = "FOR UPDATE SKIP LOCKED" if connection.vendor != "sqlite" else "LIMIT 1)"
    try:
        with CaptureQueriesContext(connection) as captured, transaction.atomic():
            claim("database-test-planner", queues=queues)
            raise _Undo
    except _Undo:
        pass
    statements = [query["sql"] for query in captured]
    # A claim may first look for due jobs under limits (the test app has limited kinds); the
    # statement that took the job is the last one that looked for a queued job.
    statement = [sql for sql in statements if locking in sql and "'queued'" in sql][-1]
    return explained(statement)


def rerun_unlink_plan(job_id: int) -> str:
    """EXPLAIN of the statement with which ``delete_jobs()`` (a prune's batch) unlinks the reruns of
    the jobs it deletes (taken from a real delete, which is rolled back)."""
    try:
        with CaptureQueriesContext(connection) as captured, transaction.atomic():
            delete_jobs([job_id])
            raise _Undo
    except _Undo:
        pass
    return explained(next(query["sql"] for query in captured if "rerun_of" in query["sql"]))


def wake_plan() -> str:
    """EXPLAIN of the statement ``wake_due_waits()`` runs to find the due timed waits (taken from
    a real pass, which is rolled back)."""
    try:
        with CaptureQueriesContext(connection) as captured, transaction.atomic():
            wake_due_waits()
            raise _Undo
    except _Undo:
        pass
    return explained(next(query["sql"] for query in captured if query["sql"].startswith("SELECT")))


def explained(statement: str) -> str:
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


def uses_index(plan: str, name: str = "durajobs_due") -> bool:
    if connection.vendor == "mysql":
        return any(row[5] == name for row in mysql_plan_rows(plan))
    return bool(re.search(rf"(?:using|on|INDEX) {name}\b", plan))


def sorts_the_due_jobs(plan: str) -> bool:
    """The claim's ORDER BY is not the index's order, so the database sorts what it read."""
    if connection.vendor == "mysql":
        return "Using filesort" in plan
    return bool(re.search(r"\bSort\b|TEMP B-TREE FOR ORDER BY", plan))


def claim_several() -> None:
    """Queue CLAIMS jobs, then claim CLAIMS times: each claim gets a job.

    How long a claim takes is bench/run.py's to measure; these tests hold the plan that keeps it
    flat."""
    for _ in range(CLAIMS):
        enqueue(KIND)
    for _ in range(CLAIMS):
        assert claim("database-test-claimer") is not None


@pytest.mark.serial
@pytest.mark.django_db(transaction=True)
def test_claiming_ignores_finished_jobs_however_many():
    """100,000 finished jobs: the claim query reads none of them."""
    claim_several()

    template = enqueue(KIND)[0]
    Job.objects.filter(pk=template.pk).update(status=Status.DONE)
    insert_copies(template, FINISHED_ROWS)
    analyze()
    assert Job.objects.filter(status=Status.DONE).count() == FINISHED_ROWS + 1

    plan = claim_plan()
    assert not reads_every_row(plan), plan
    claim_several()


@pytest.mark.django_db(transaction=True)
def test_a_backlog_of_due_jobs_is_claimed_from_the_due_index():
    """20,000 due jobs, a tenth of them interrupted work: a claim takes the most urgent in the
    index's own order instead of sorting them all (the test app has limited kinds, so the claim of
    the others may read their lane of it, ``durajobs_plain_due``: with no job under limits, the
    two are alike)."""

    template = enqueue(KIND)[0]
    insert_copies(template, DUE_BACKLOG)
    queued = Job.objects.filter(status=Status.QUEUED).values_list("pk", flat=True)
    Job.objects.filter(pk__in=[pk for pk in queued if pk % 10 == 0]).update(interrupted=True)
    analyze()

    plan = claim_plan()
    assert uses_index(plan) or uses_index(plan, "durajobs_plain_due"), plan
    assert not reads_every_row(plan), plan
    assert not sorts_the_due_jobs(plan), plan
    claim_several()


@pytest.mark.django_db(transaction=True)
def test_a_claim_reads_past_none_of_the_jobs_a_full_limit_holds_back(db_vendor):
    """20,000 due jobs of one concurrency key, more urgent and older than a job no limit applies
    to, held back while one of them runs: the claim of the other job reads ``durajobs_plain_due``,
    where jobs enqueued under limits are apart. Through ``durajobs_due`` it read past all of them
    (11 ms a claim on PostgreSQL, 27 times the empty table)."""
    holder = enqueue(LIMITED_KIND, subject={"server": 1}, priority=100)[0]
    assert holder.under_limits
    assert claim("database-test-holder").job.pk == holder.pk
    held = enqueue(LIMITED_KIND, subject={"server": 1}, priority=100)[0]
    Job.objects.filter(pk=held.pk).update(next_run_at=timezone.now() - timedelta(hours=1))
    insert_copies(held, DUE_BACKLOG)
    plain = enqueue(KIND)[0]
    assert not plain.under_limits
    analyze()

    plan = claim_plan()
    assert uses_index(plan, "durajobs_plain_due"), plan
    assert not sorts_the_due_jobs(plan), plan
    # The count of held jobs (the claim under limits makes it while a limit is full) reads the
    # few running jobs in an index led by the status, not every job (SQLite scanned durajobs_kind).
    with CaptureQueriesContext(connection) as captured:
        held_now(connection)
    [count] = [query["sql"] for query in captured]
    plan = explained(count)
    assert db_vendor == "mysql" or uses_index(plan) or uses_index(plan, "durajobs_queue_due"), plan
    assert not reads_every_row(plan), plan
    lease = claim("database-test-worker")
    assert lease is not None and lease.job.pk == plain.pk
    assert claim("database-test-worker") is None

    # A worker's look for jobs a lifted limit left in that lane reads the lane (or, on
    # PostgreSQL, the few jobs of the kinds no limit applies to), not the backlog in durajobs_due.
    with CaptureQueriesContext(connection) as captured:
        assert lift_stale_lanes() == 0  # all of them are of a limited kind
    [look] = [query["sql"] for query in captured if query["sql"].startswith("SELECT")]
    plan = explained(look)
    assert db_vendor != "sqlite" or uses_index(plan, "durajobs_plain_due"), plan
    assert not uses_index(plan, "durajobs_due"), plan
    assert not reads_every_row(plan), plan


@pytest.mark.django_db(transaction=True)
def test_a_claim_under_limits_reads_past_none_of_a_full_keys_backlog(db_vendor):
    """20,000 due jobs of a full concurrency key, more urgent and older than a job of another key:
    the claim under limits reads the first jobs in claim order (its window), then the lanes of
    ``durajobs_limited_due`` one seek each, never the backlog. Through ``durajobs_due`` it read past
    all of them at every look: 38 ms behind 100,000 on SQLite, 34 ms on PostgreSQL."""
    if db_vendor == "mysql":
        pytest.skip("MariaDB/MySQL keep the plain pick (store/limited_pick.py says why)")
    holder = enqueue(LIMITED_KIND, subject={"server": 1}, priority=100)[0]
    assert claim("database-test-holder").job.pk == holder.pk
    held = enqueue(LIMITED_KIND, subject={"server": 1}, priority=100)[0]
    Job.objects.filter(pk=held.pk).update(next_run_at=timezone.now() - timedelta(hours=1))
    insert_copies(held, DUE_BACKLOG)
    other = enqueue(LIMITED_KIND, subject={"server": 2})[0]
    analyze()

    with CaptureQueriesContext(connection) as captured:
        lease = claim("database-test-worker")
    assert lease is not None and lease.job.pk == other.pk
    statements = [query["sql"] for query in captured]
    # The first pick, made without counting what is held, may find the full key's job, which the
    # take then refuses; the pick after the count is the one that passes over the backlog.
    window = [sql for sql in statements if "durajobs_window" in sql and not sql.startswith("WITH")][-1]
    plan = explained(window)
    assert not reads_every_row(plan), plan
    lanes = [sql for sql in statements if sql.startswith("WITH RECURSIVE")][-1]
    plan = explained(lanes)
    assert uses_index(plan, "durajobs_limited_due"), plan
    assert not uses_index(plan), plan  # durajobs_due: in claim order, past the whole backlog
    assert not reads_every_row(plan), plan


@pytest.mark.django_db(transaction=True)
def test_a_look_under_limits_reads_past_none_of_the_due_jobs_without_limits(db_vendor):
    """20,000 due jobs of a kind without limits before a job under limits, and no limit full: the
    look for jobs under limits (a worker's, once a second) reads its window and the lanes, as
    behind a full key. The plain pick read ``durajobs_due`` past all of them, where PostgreSQL's
    generic plan of it stayed whatever the kinds: 667 ms a look behind 964,608 (a worker's burst
    through them ran at 160 jobs/s); SQLite 14 ms behind 20,000."""
    if db_vendor == "mysql":
        pytest.skip("MariaDB/MySQL keep the plain pick (store/limited_pick.py says why)")
    plain = enqueue(KIND)[0]
    Job.objects.filter(pk=plain.pk).update(next_run_at=timezone.now() - timedelta(hours=1))
    insert_copies(plain, DUE_BACKLOG)
    limited = enqueue(LIMITED_KIND, subject={"server": 1})[0]
    analyze()

    request = ClaimRequest("database-test-worker", "database-test-token")
    with CaptureQueriesContext(connection) as captured:
        found = claim_limited(connection, Status.QUEUED, request, current_limits())
    assert found is not None and found.pk == limited.pk
    statements = [query["sql"] for query in captured]
    [window] = [sql for sql in statements if "durajobs_window" in sql and not sql.startswith("WITH")]
    assert not reads_every_row(explained(window))
    [lanes] = [sql for sql in statements if sql.startswith("WITH RECURSIVE")]
    plan = explained(lanes)
    assert uses_index(plan, "durajobs_limited_due"), plan
    assert not reads_every_row(plan), plan


@pytest.mark.django_db(transaction=True)
def test_a_worker_of_one_queue_claims_past_another_queues_backlog_without_reading_it():
    """20,000 jobs of another queue due before the job: a worker of the job's queue (``runjobs
    --queue``) reads its queue's part of ``durajobs_queue_due``, in claim order. Through
    ``durajobs_due`` it read past all of them first: 60 ms a claim behind 100,000 on PostgreSQL,
    against half a millisecond."""
    busy = enqueue(KIND, queue="busy")[0]
    Job.objects.filter(pk=busy.pk).update(next_run_at=timezone.now() - timedelta(hours=1))
    insert_copies(busy, DUE_BACKLOG)
    own = enqueue(KIND, queue="own")[0]
    analyze()

    plan = claim_plan(queues=["own"])
    assert uses_index(plan, "durajobs_queue_due"), plan
    assert not sorts_the_due_jobs(plan), plan
    lease = claim("database-test-worker", queues=["own"])
    assert lease is not None and lease.job.pk == own.pk


@pytest.mark.django_db(transaction=True)
def test_a_wake_pass_reads_the_due_timed_waits_alone(db_vendor):
    """20,000 jobs in a timed wait that is not over, two that are: the wake pass reads
    ``durajobs_timed`` from its first entry to the first not due (MariaDB/MySQL may read
    ``durajobs_due`` by status instead), and wakes the longest overdue first."""
    now = timezone.now()
    later, soon, sooner = (enqueue(KIND)[0] for _ in range(3))
    for job, moment in ((later, now + timedelta(days=1)), (soon, now), (sooner, now - timedelta(minutes=1))):
        Job.objects.filter(pk=job.pk).update(status=Status.AWAITING_EXTERNAL, next_run_at=moment)
    insert_copies(later, DUE_BACKLOG)
    analyze()

    plan = wake_plan()
    assert db_vendor == "mysql" or uses_index(plan, "durajobs_timed"), plan
    assert not reads_every_row(plan), plan
    assert wake_due_waits(limit=1) == 1
    assert Job.objects.get(pk=sooner.pk).status == Status.QUEUED
    assert wake_due_waits() == 1
    assert Job.objects.get(pk=soon.pk).status == Status.QUEUED
    assert Job.objects.filter(status=Status.AWAITING_EXTERNAL).count() == DUE_BACKLOG + 1


@pytest.mark.django_db(transaction=True)
def test_a_parents_children_and_the_jobs_ended_lately_are_read_from_their_own_indexes():
    """20,000 top-level jobs that ended a day ago, and a parent with two children, one of which
    ended now: a child's settle (which children of its parent are open), the parent's children and
    the console's throughput each read their index, although ``durajobs_parent``,
    ``durajobs_parent_status`` hold the children alone and ``durajobs_ended`` the ended jobs alone
    (every job on MariaDB/MySQL): a top-level job writes no entry into the first two, nor a job
    still open into the last, as it is claimed and as it ends."""
    now = timezone.now()
    ended = enqueue(KIND)[0]
    Job.objects.filter(pk=ended.pk).update(status=Status.DONE, ended_at=now - timedelta(days=1))
    insert_copies(ended, DUE_BACKLOG)
    parent, open_child, done_child = (enqueue(KIND)[0] for _ in range(3))
    Job.objects.filter(pk__in=[open_child.pk, done_child.pk]).update(parent_id=parent.pk)
    Job.objects.filter(pk=done_child.pk).update(status=Status.DONE, ended_at=now)
    analyze()

    reads = {
        "durajobs_parent_status": lambda: open_children(parent.pk) == (1, 2),
        "durajobs_parent": lambda: (
            [child.pk for child in children_of(parent.pk)] == [open_child.pk, done_child.pk]
        ),
        "durajobs_ended": lambda: sum(minute.done for minute in throughput(now)) == 1,
    }
    for index, read in reads.items():
        with CaptureQueriesContext(connection) as captured:
            assert read()
        [statement] = [query["sql"] for query in captured]
        plan = explained(statement)
        assert uses_index(plan, index), plan
        assert not reads_every_row(plan), plan


@pytest.mark.django_db(transaction=True)
def test_a_prune_unlinks_reruns_through_durajobs_rerun_of_without_reading_every_job():
    """20,000 jobs, none of them a rerun: unlinking the reruns of a deleted batch reads the partial
    index of the reruns (MariaDB/MySQL: the whole index), not the job table. With an index of
    every job, whose entries are nearly all NULL, SQLite's planner read every job instead, once
    per batch: pruning a million jobs went four times slower per job than pruning 100,000."""
    template = enqueue(KIND)[0]
    Job.objects.filter(pk=template.pk).update(status=Status.DONE, ended_at=timezone.now())
    insert_copies(template, DUE_BACKLOG)
    analyze()

    plan = rerun_unlink_plan(template.pk)
    assert uses_index(plan, "durajobs_rerun_of"), plan
    assert not reads_every_row(plan), plan


@pytest.mark.django_db(transaction=True)
def test_a_checkpoint_reads_two_step_rows_however_many_steps_its_job_has():
    """Among 2,000 jobs of two steps, one of 5,000: the checkpoint that marks one of its steps done
    and starts the next finds the two rows through the unique index of (job, phase, step). Written
    as "this step, or that one if pending", SQLite's planner read every step of the job instead
    once it had statistics: a job's checkpoints would have cost as the square of its steps."""
    enqueue_many(KIND, [{} for _ in range(2000)])
    big = enqueue(KIND)[0]
    Job.objects.filter(pk=big.pk).update(status=Status.RUNNING, lease_token="its-lease")
    more = [
        JobStep(job=big, position=position, step_id=f"more-{position}", title="More", state=StepState.PENDING)
        for position in range(len(TWO_STEPS), 5000)
    ]
    JobStep.objects.bulk_create(more, batch_size=500)
    analyze(Job)
    analyze(JobStep)
    done, following = JobStep.objects.filter(job=big).order_by("position")[:2]

    with CaptureQueriesContext(connection) as captured:
        finished = {"state": StepState.DONE, "ended_at": timezone.now(), "result": None}
        checkpoint_and_start(connection, big.pk, "its-lease", (done, finished), (following, running_fields()))
    plan = explained(captured[-1]["sql"])

    unique = (
        "sqlite_autoindex_django_durajobs_jobstep_1"
        if connection.vendor == "sqlite"
        else "durajobs_step_unique"
    )
    assert uses_index(plan, unique), plan
    assert not uses_index(plan, "durajobs_step_order"), plan
