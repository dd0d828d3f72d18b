"""Idempotent enqueue: one key, one job, even when callers race on separate connections.

Also pins the defaults and the equivalent ways of calling enqueue: ``Kind.enqueue(...)``,
label from the kind's title (or name), ``subject={}``, ``parent=`` as a Job or an id.
"""

from __future__ import annotations

import threading

import pytest
from django.db import connection, transaction

from django_durajobs import Job, JobError, JobLog, JobStep, children_summary, enqueue
from django_durajobs.signals import job_changed
from tests.helpers import wait_for
from tests.testapp.kinds_inputs import inputs_other, inputs_plain

CALLERS = 8
ROUNDS = 10


def row_counts():
    return Job.objects.count(), JobStep.objects.count(), JobLog.objects.count()


def race(key: str) -> list:
    """CALLERS threads, each on its own connection, enqueue ``key`` at the same moment."""
    barrier = threading.Barrier(CALLERS, timeout=30)
    outcomes: list = [None] * CALLERS

    def call(index: int) -> None:
        try:
            barrier.wait()
            job, created = enqueue("inputs_plain", subject={"caller": index}, idempotency_key=key)
            outcomes[index] = (job.pk, created)
        except BaseException as exc:  # reported by the assertions below
            outcomes[index] = exc
        finally:
            connection.close()

    threads = [threading.Thread(target=call, args=(index,)) for index in range(CALLERS)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=60)
    assert not any(thread.is_alive() for thread in threads), "an enqueue call hung"
    return outcomes


@pytest.mark.django_db(transaction=True)
def test_concurrent_enqueues_with_one_key_create_exactly_one_job():
    """Eight callers at once, ten times over: one row per key, every caller gets its id, exactly one
    caller is told it created the job, the job's steps exist once, and the creation is announced once."""
    created_events = []
    lock = threading.Lock()

    def listening(sender, job, previous_status, status, **kwargs):
        if previous_status is None:
            with lock:
                created_events.append(job.pk)

    job_changed.connect(listening, dispatch_uid="inputs-idempotency-race")
    try:
        for round_ in range(ROUNDS):
            key = f"inputs-race-{round_}"
            outcomes = race(key)

            errors = [outcome for outcome in outcomes if isinstance(outcome, BaseException)]
            assert errors == [], f"round {round_}: {errors!r}"
            rows = list(Job.objects.filter(idempotency_key=key).values_list("pk", flat=True))
            assert len(rows) == 1, f"round {round_}: {len(rows)} rows for one key"
            assert {pk for pk, _ in outcomes} == {rows[0]}
            assert sum(created for _, created in outcomes) == 1
            assert JobStep.objects.filter(job_id=rows[0]).count() == 1
    finally:
        job_changed.disconnect(dispatch_uid="inputs-idempotency-race")

    assert Job.objects.count() == ROUNDS
    assert JobStep.objects.count() == ROUNDS  # no orphan steps left by a caller that lost the race
    assert sorted(created_events) == sorted(Job.objects.values_list("pk", flat=True))


@pytest.mark.django_db
def test_same_key_again_returns_the_existing_job_unchanged():
    """A second enqueue with the key returns the first job, created=False, and writes nothing: the
    first call's subject and label stay."""
    key = "inputs-deploy-7"
    first, created = enqueue("inputs_plain", subject={"site": 7}, label="Deploy 7", idempotency_key=key)
    before = row_counts()

    again, created_again = enqueue("inputs_plain", subject={"site": 8}, label="Other", idempotency_key=key)

    assert (created, created_again) == (True, False)
    assert again.pk == first.pk
    assert again.subject == {"site": 7}
    assert again.label == "Deploy 7"
    assert row_counts() == before


@pytest.mark.django_db
def test_same_key_with_another_kind_is_refused():
    """A key already used by a job of another kind is an error naming that job's kind, not a silent
    return of the wrong job."""
    first, _ = enqueue("inputs_plain", idempotency_key="inputs-shared-key")
    before = row_counts()

    with pytest.raises(JobError) as refused:
        enqueue("inputs_other", idempotency_key="inputs-shared-key")

    assert refused.value.code == "invalid_input"
    assert "inputs_plain" in str(refused.value)
    assert "inputs-shared-key" in str(refused.value)
    assert row_counts() == before
    assert Job.objects.get(idempotency_key="inputs-shared-key").kind == "inputs_plain"


@pytest.mark.django_db
def test_distinct_keys_make_distinct_jobs_and_no_key_never_deduplicates():
    a, created_a = enqueue("inputs_plain", idempotency_key="inputs-key-a")
    b, created_b = enqueue("inputs_plain", idempotency_key="inputs-key-b")
    c, created_c = enqueue("inputs_plain")
    d, created_d = enqueue("inputs_plain")

    assert created_a and created_b and created_c and created_d
    assert len({a.pk, b.pk, c.pk, d.pk}) == 4
    assert (c.idempotency_key, d.idempotency_key) == (None, None)


@pytest.mark.django_db
def test_keys_are_compared_exactly():
    """Keys that differ in case, trailing space or accents are different keys, on every database."""
    keys = ["inputs-Deploy-7", "inputs-deploy-7", "inputs-Deploy-7 ", "inputs-café", "inputs-cafe"]

    outcomes = [enqueue("inputs_plain", idempotency_key=key) for key in keys]

    assert all(created for _, created in outcomes)
    assert len({job.pk for job, _ in outcomes}) == len(keys)
    for key, (job, _) in zip(keys, outcomes, strict=True):
        job.refresh_from_db()
        assert job.idempotency_key == key


@pytest.mark.django_db
def test_kind_enqueue_is_enqueue_by_name():
    """``inputs_plain.enqueue(...)`` and ``enqueue("inputs_plain", ...)`` are one and the same call."""
    by_kind, created = inputs_plain.enqueue(subject={"a": 1}, idempotency_key="inputs-by-kind")
    by_name, created_again = enqueue("inputs_plain", subject={"a": 1}, idempotency_key="inputs-by-kind")

    assert (created, created_again) == (True, False)
    assert by_name.pk == by_kind.pk
    assert by_kind.kind == "inputs_plain"

    plain_by_kind, _ = inputs_plain.enqueue(subject={"b": 2}, priority=5, max_attempts=3, label="L")
    plain_by_name, _ = enqueue("inputs_plain", subject={"b": 2}, priority=5, max_attempts=3, label="L")
    fields = ("kind", "label", "status", "subject", "queue", "priority", "max_attempts", "phase")
    assert [getattr(plain_by_kind, f) for f in fields] == [getattr(plain_by_name, f) for f in fields]
    steps = JobStep.objects.filter(job=plain_by_kind).values_list("step_id", "title")
    assert list(steps) == [("one", "Step one")]

    with pytest.raises(JobError) as refused:
        inputs_plain.enqueue(max_attempts=0)
    assert refused.value.code == "invalid_input"


@pytest.mark.django_db
def test_label_defaults_to_the_kinds_title_or_name_and_subject_to_an_empty_dict():
    titled, _ = enqueue("inputs_plain")
    untitled, _ = inputs_other.enqueue()
    labelled, _ = enqueue("inputs_plain", label="My own label")
    for job in (titled, untitled, labelled):
        job.refresh_from_db()

    assert titled.label == "Plain input job"
    assert untitled.label == "inputs_other"
    assert labelled.label == "My own label"
    assert titled.subject == {}
    assert untitled.subject == {}


@pytest.mark.django_db
def test_parent_is_a_job_or_its_id():
    parent, _ = enqueue("inputs_plain", label="Parent")

    by_job, _ = enqueue("inputs_plain", parent=parent, label="child by job")
    by_id, _ = enqueue("inputs_plain", parent=parent.pk, label="child by id")

    assert by_job.parent_id == parent.pk
    assert by_id.parent_id == parent.pk
    summary = children_summary(parent)
    assert summary["total"] == 2
    assert [child["id"] for child in summary["children"]] == [by_job.pk, by_id.pk]


@pytest.mark.django_db
def test_an_unknown_parent_is_refused_and_writes_nothing():
    enqueue("inputs_plain")
    before = row_counts()

    with pytest.raises(JobError) as refused:
        enqueue("inputs_plain", parent=987654321, idempotency_key="inputs-orphan")

    assert refused.value.code == "job_not_found"
    assert "987654321" in str(refused.value)
    assert row_counts() == before
    assert not Job.objects.filter(idempotency_key="inputs-orphan").exists()


@pytest.mark.django_db(transaction=True)
def test_a_caller_in_a_transaction_that_loses_the_race_for_a_key_gets_the_job_and_keeps_its_transaction():
    """Found by the proving ground's idempotency storm on PostgreSQL: an enqueue inside the caller's
    transaction waits on another caller's uncommitted row for the key; that one commits; the
    loser's insert fails. It must get the winner's job, its own transaction still usable."""
    if connection.vendor != "postgresql":
        pytest.skip("elsewhere the insert always runs in a savepoint of its own")
    key = "inputs-race-in-a-transaction"
    winner_inserted = threading.Event()
    release_winner = threading.Event()
    winner: list = []

    def win() -> None:
        try:
            with transaction.atomic():
                winner.append(enqueue("inputs_plain", idempotency_key=key)[0].pk)
                winner_inserted.set()
                release_winner.wait(timeout=30)
        finally:
            connection.close()

    thread = threading.Thread(target=win)
    thread.start()
    assert winner_inserted.wait(timeout=30)

    def wait_on_the_key_then_release() -> None:
        wait_for(lambda: lock_waiters() >= 1, timeout=30, message="the loser to wait on the key")
        release_winner.set()

    releaser = threading.Thread(target=wait_on_the_key_then_release)
    releaser.start()
    with transaction.atomic():
        job, created = enqueue("inputs_plain", idempotency_key=key)
        later = Job.objects.filter(pk=job.pk).count()  # the transaction still works
    releaser.join(timeout=30)
    thread.join(timeout=30)
    assert (job.pk, created, later) == (winner[0], False, 1)
    assert Job.objects.filter(idempotency_key=key).count() == 1


def lock_waiters() -> int:
    """Sessions of this database waiting for a lock (PostgreSQL), seen from a connection of its own."""
    outcome: list[int] = []

    def count() -> None:
        try:
            with connection.cursor() as cursor:
                cursor.execute(
                    "SELECT count(*) FROM pg_stat_activity WHERE datname = current_database() "
                    "AND wait_event_type = 'Lock'"
                )
                outcome.append(cursor.fetchone()[0])
        finally:
            connection.close()

    counter = threading.Thread(target=count)
    counter.start()
    counter.join()
    return outcome[0]
