"""enqueue_many: many jobs in a few statements, with the guarantees of enqueue()."""

from __future__ import annotations

import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext

from django_durajobs import Job, JobError, JobStep, drain, enqueue, enqueue_many

pytestmark = pytest.mark.django_db(transaction=True)


def test_enqueue_many_creates_every_job_with_its_steps_in_order():
    created = enqueue_many("states_basic", [{"subject": {"n": n}, "label": f"job {n}"} for n in range(250)])

    assert [job.subject["n"] for job, _ in created] == list(range(250))
    assert all(was_created for _, was_created in created)
    assert Job.objects.count() == 250
    assert JobStep.objects.count() == 250 * 2  # states_basic declares two steps
    assert drain(max_jobs=1000) == 250
    assert set(Job.objects.values_list("status", flat=True)) == {"done"}


def test_enqueue_many_honours_idempotency_keys_old_and_repeated():
    first, _ = enqueue("states_basic", idempotency_key="many-1")

    created = enqueue_many(
        "states_basic",
        [{"idempotency_key": "many-1"}, {"idempotency_key": "many-2"}, {"idempotency_key": "many-2"}, {}],
    )

    assert [was_created for _, was_created in created] == [False, True, False, True]
    assert created[0][0].pk == first.pk
    assert created[1][0].pk == created[2][0].pk
    assert Job.objects.count() == 3


def test_enqueue_many_writes_nothing_when_one_spec_is_bad():
    with pytest.raises(JobError) as refused:
        enqueue_many("states_basic", [{"subject": {"n": 1}}, {"subject": {"bad": float("nan")}}])

    assert refused.value.code == "invalid_input"
    assert not Job.objects.exists()


def test_enqueue_many_takes_far_fewer_statements_than_jobs():
    with CaptureQueriesContext(connection) as statements:
        enqueue_many("states_basic", [{} for _ in range(500)])

    if connection.features.can_return_rows_from_bulk_insert:
        # Multi-row inserts, in batches as large as the database's parameter limit allows.
        assert len(statements) <= 50
    else:  # MySQL inserts jobs one by one to learn their ids, but their steps in bulk
        assert len(statements) <= 500 + 10


def test_enqueue_many_past_one_insert_gives_each_job_its_own_id_and_steps():
    """More jobs than one multi-row insert takes (and as many steps as the parameter limit
    allows per insert): each returned job is the row the ORM reads, with its own steps."""
    specs = [{"subject": {"n": n}, "priority": n % 3, "queue": f"many-{n % 2}"} for n in range(2_345)]

    created = enqueue_many("states_basic", specs)

    read = Job.objects.in_bulk([job.pk for job, _ in created])
    fields = [field.attname for field in Job._meta.concrete_fields]
    assert len(read) == len(specs)
    for (job, was_created), spec in zip(created, specs, strict=True):
        assert was_created and job.subject == spec["subject"]
        assert {name: getattr(job, name) for name in fields} == {
            name: getattr(read[job.pk], name) for name in fields
        }
    steps = JobStep.objects.filter(job_id=created[-1][0].pk).order_by("position")
    assert list(steps.values_list("step_id", "state")) == [("first", "pending"), ("second", "pending")]
    assert JobStep.objects.count() == 2 * len(specs)
