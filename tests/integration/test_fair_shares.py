"""Fair shares: with one key holding a big backlog and nine keys holding 10 due jobs each, claims
take turns among the keys, so the nine keys' jobs are all done within ten turns of ten claims,
however big the backlog (``@job(fairness_key=…)``; ``DURAJOBS["FAIR_QUEUES"]``).
"""

from __future__ import annotations

import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext
from django.utils import timezone

from django_durajobs import Job, drain, enqueue, enqueue_many, job
from django_durajobs.registry import unregister
from django_durajobs.store import claiming, fairness

pytestmark = pytest.mark.django_db

BACKLOG = 10_000
SMALL_KEYS = 9
EACH = 10


@pytest.fixture(autouse=True)
def turns_due(monkeypatch):
    """Each test starts as a new worker process would: its first claim looks for the keys."""
    monkeypatch.setattr(fairness, "_next_keyed_lookup", 0.0)
    monkeypatch.setattr(fairness, "_cursor", "")


@pytest.fixture
def plain_jobs():
    @job("plain_job")
    def plain_job(job, ctx):
        return None

    yield plain_job
    unregister("plain_job")


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


def test_a_fair_queue_takes_turns_among_kinds_and_jobs_without_a_key_get_theirs(
    settings, tenant_jobs, plain_jobs
):
    settings.DURAJOBS = {"FAIR_QUEUES": ["shared"]}
    enqueue_many("plain_job", [{"queue": "shared"} for _ in range(20)])  # keyed by their kind's name
    enqueue_many("plain_job", [{} for _ in range(20)])  # not in a fair queue: no key
    enqueue("tenant_job", subject={"tenant": "a"})
    assert drain(max_jobs=3) == 3
    ran = list(Job.objects.filter(status="done").values_list("fairness_key", flat=True))
    assert sorted(ran) == ["", "a", "plain_job"]


def test_while_no_job_with_a_key_is_due_a_job_without_one_costs_what_it_does_without_fair_shares(
    plain_jobs, request, monkeypatch
):
    monkeypatch.setattr(claiming, "_next_revert_lookup", float("inf"))  # as between two such looks

    def statements(jobs: int) -> int:
        """What running ``jobs`` jobs without a key takes, with more of them still queued."""
        enqueue_many("plain_job", [{} for _ in range(jobs + 1)])
        with CaptureQueriesContext(connection) as captured:
            assert drain(max_jobs=jobs) == jobs
        assert drain() == 1
        return len(captured)

    plain = statements(20)
    request.getfixturevalue("tenant_jobs")  # a kind with a fairness key: fair shares are in force
    assert statements(20) == plain + 1  # the first claim's look for a key, and no more


def test_a_claim_with_nothing_due_looks_for_a_key_once(tenant_jobs):
    """An idle worker's claims: the look from the first key is the whole look."""
    with CaptureQueriesContext(connection) as captured:
        assert fairness.claim_fairly(connection, claiming.ClaimRequest("fair-worker", "token"), None) is None

    by_key = f"ORDER BY {connection.ops.quote_name('fairness_key')}"
    assert len([query for query in captured if by_key in query["sql"]]) == 1


def instructions_of_a_look(after: str) -> int:
    """SQLite's virtual-machine instructions (in tens) for one look for the key after ``after``."""
    counted = 0

    def count() -> int:
        nonlocal counted
        counted += 1
        return 0  # go on

    connection.ensure_connection()
    connection.connection.set_progress_handler(count, 10)
    try:
        fairness._next_key(connection, after, ["tenant_job"], (), timezone.now())
    finally:
        connection.connection.set_progress_handler(None, 0)
    return counted


def test_a_look_for_the_next_key_reads_nothing_of_the_keys_before_it(db_vendor, tenant_jobs):
    """The turn after a key with 2,000 due jobs looks no longer than the turn before it: SQLite
    once started the look at the first key and read all of them, at every turn."""
    if db_vendor != "sqlite":
        pytest.skip("SQLite's instruction count")
    enqueue_many("tenant_job", [{"subject": {"tenant": "big"}} for _ in range(2000)])
    enqueue("tenant_job", subject={"tenant": "small"})

    before_big, after_big = instructions_of_a_look("a"), instructions_of_a_look("big")
    assert after_big < 2 * before_big + 50, (before_big, after_big)


def test_a_job_with_a_key_waits_for_the_next_look_and_never_jumps_the_turns(tenant_jobs, plain_jobs):
    enqueue_many("plain_job", [{} for _ in range(4)])
    assert drain(max_jobs=1) == 1  # its look found no job with a key: claims pass over the turns
    enqueue("tenant_job", subject={"tenant": "a"})

    assert drain(max_jobs=2) == 2
    assert Job.objects.get(kind="tenant_job").status == "queued"  # the jobs without a key went first

    fairness._pass_over_turns(seconds=0.0)  # as a second later: the next claim looks again
    assert drain(max_jobs=1) == 1
    assert Job.objects.get(kind="tenant_job").status == "done"
    assert Job.objects.filter(kind="plain_job", status="queued").count() == 1
