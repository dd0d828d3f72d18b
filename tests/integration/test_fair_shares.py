"""Fair shares: with one key holding a big backlog and nine keys holding 10 due jobs each, claims
take turns among the keys, so the nine keys' jobs are all done within ten turns of ten claims,
however big the backlog (``@job(fairness_key=…)``; ``DURAJOBS["FAIR_QUEUES"]``).
"""

from __future__ import annotations

import pytest

from django_durajobs import Job, drain, enqueue, enqueue_many, job
from django_durajobs.registry import unregister

pytestmark = pytest.mark.django_db

BACKLOG = 10_000
SMALL_KEYS = 9
EACH = 10


@pytest.fixture
def tenant_jobs():
    @job("tenant_job", fairness_key=lambda subject: subject["tenant"])
    def tenant_job(job, ctx):
        return job.subject["tenant"]

    yield tenant_job
    unregister("tenant_job")


def test_one_tenant_s_backlog_delays_the_others_by_one_claim_per_busy_tenant(tenant_jobs):
    enqueue_many("tenant_job", [{"subject": {"tenant": "big"}} for _ in range(BACKLOG)])
    small = [f"t{number}" for number in range(SMALL_KEYS)]
    enqueue_many("tenant_job", [{"subject": {"tenant": tenant}} for tenant in small for _ in range(EACH)])

    turns = EACH * (SMALL_KEYS + 1)  # ten turns, each one claim per busy tenant
    assert drain(max_jobs=turns) == turns
    done = Job.objects.filter(kind="tenant_job", status="done")
    assert done.exclude(fairness_key="big").count() == SMALL_KEYS * EACH
    assert done.filter(fairness_key="big").count() == EACH


def test_a_fair_queue_takes_turns_among_kinds_and_jobs_without_a_key_get_theirs(settings, tenant_jobs):
    settings.DURAJOBS = {"FAIR_QUEUES": ["shared"]}

    @job("plain_job")
    def plain_job(job, ctx):
        return None

    try:
        enqueue_many("plain_job", [{"queue": "shared"} for _ in range(20)])  # keyed by their kind's name
        enqueue_many("plain_job", [{} for _ in range(20)])  # not in a fair queue: no key
        enqueue("tenant_job", subject={"tenant": "a"})
        assert drain(max_jobs=3) == 3
        ran = list(Job.objects.filter(status="done").values_list("fairness_key", flat=True))
        assert sorted(ran) == ["", "a", "plain_job"]
    finally:
        unregister("plain_job")
