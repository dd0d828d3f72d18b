"""``describe()`` reads everything through ``store.load_job_view()``: a fixed, small number of
queries, however many steps, log lines and children the job has."""

from __future__ import annotations

import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext

from django_durajobs import JobLog, JobStep, describe
from django_durajobs.engine.describe import describe_view
from django_durajobs.models import Job
from django_durajobs.store import load_job_view, register_worker
from tests.factories import JobFactory

pytestmark = pytest.mark.django_db


def family(steps: int, lines: int, children: int, **fields) -> Job:
    job = JobFactory(declared_steps=False, **fields)
    JobStep.objects.bulk_create(
        JobStep(job=job, position=n, step_id=f"s{n}", title=f"Step {n}", state="done" if n else "running")
        for n in range(steps)
    )
    JobLog.objects.bulk_create(JobLog(job=job, line=f"line {n}") for n in range(lines))
    Job.objects.bulk_create(JobFactory.build(parent=job, status="done") for _ in range(children))
    return job


def queries(function, job) -> int:
    with CaptureQueriesContext(connection) as captured:
        function(job.pk)
    return len(captured)


# what the job is -> (its fields, the queries a read takes: the job, its steps, its log, its
# children; the live workers, for a job with a version that has not ended; for a due job of a
# limited kind, what is held now and which rates are full)
CASES = {
    "ended": ({"status": "done", "kind_version": "v1"}, 4),
    "running": ({"status": "running", "kind_version": "v1"}, 5),
    "held back by a limit": ({"status": "queued", "kind": "limits_two_at_a_time", "kind_version": ""}, 6),
}


@pytest.mark.parametrize("case", CASES)
def test_a_read_costs_the_same_few_queries_however_big_the_job(case):
    fields, pinned = CASES[case]
    register_worker("a-worker", ["default"], 1)
    small = family(steps=1, lines=1, children=1, **fields)
    large = family(steps=1000, lines=600, children=500, **fields)

    assert queries(load_job_view, small) == queries(load_job_view, large) == pinned
    assert queries(describe, large) == pinned  # describe() reads nothing more


def test_what_was_read_is_what_describe_shows():
    job = family(steps=30, lines=200, children=12, status="running")

    read = load_job_view(job)

    assert len(read.steps) == 30
    assert [entry.line for entry in read.log] == [f"line {n}" for n in range(200)][-len(read.log) :]
    assert len(read.children) == 12
    assert describe_view(read) == describe(job)
