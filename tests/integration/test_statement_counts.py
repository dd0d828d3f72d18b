"""The statements of the hot path, counted on each database, so that a change that adds a round
trip to a claim, a step, a finish, an enqueue or a batch of ``enqueue_many`` fails here.

The counts are what ``CaptureQueriesContext`` sees (every statement sent through Django's
cursor, ``BEGIN`` included where Django sends it as a statement); a lower count is a welcome
change: lower the pin with it.
"""

from __future__ import annotations

import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext

from django_durajobs import enqueue, enqueue_many, store
from django_durajobs.engine.runner import execute
from django_durajobs.registry import job
from django_durajobs.status import Status
from django_durajobs.store import claiming, limiting

pytestmark = pytest.mark.django_db(transaction=True)


def _noop() -> None:
    return None


def _declare(steps: int) -> str:
    name = f"counted_{steps}_steps"
    step_ids = [f"step_{number}" for number in range(steps)]

    @job(name, title=f"Counted: {steps} steps", steps=step_ids)
    def run(job, ctx):
        for step_id in step_ids:
            ctx.step(step_id, _noop)

    return name


KINDS = {steps: _declare(steps) for steps in (0, 1, 5)}


@job("counted_keyed", title="Counted: a concurrency key", concurrency_key=lambda subject: subject["key"])
def keyed(job, ctx):
    return None


@pytest.fixture
def queue(request):
    """A queue of this test's own, so that claims see only its jobs."""
    return f"counted-{request.node.name}"[:100]


@pytest.fixture(autouse=True)
def revert_lookup_not_due(monkeypatch):
    """As between two looks for pending reverts, which a claim makes at most every few seconds."""
    monkeypatch.setattr(claiming, "_next_revert_lookup", float("inf"))
    monkeypatch.setattr(limiting, "_limited_found", False)
    monkeypatch.setattr(limiting, "_count_first", False)  # as while no limit is full


def statements(work):
    """What ``work()`` returns, and the statements it sent."""
    with CaptureQueriesContext(connection) as captured:
        result = work()
    return result, [query["sql"] for query in captured]


#: Statements per database: a claim; a finish (a job of no steps, from its claim to its end), and
#: one that claims the next job; the first step of a run marked running ("step") and each step's
#: checkpoint; an enqueue; an enqueue_many of BATCH jobs, and of 2,500 (three statements of at
#: most 1,000 jobs each, with BEGIN and COMMIT around them); the claim of a job under a new
#: concurrency key, and its finish.
#: A keyed claim while no limit is full: BEGIN, pick, make the key's row (or lock it, were it made),
#: take (counting the key's held jobs), COMMIT.
PINNED = {
    # SQLite: a finish is BEGIN IMMEDIATE, the update, COMMIT; an enqueue the same around its
    # two inserts (the job, its declared steps); an enqueue_many of 1,000 jobs too.
    "sqlite": {
        "claim": 1,
        "finish": 3,
        "finish_and_claim": 4,  # BEGIN IMMEDIATE, the outcome, the claim, COMMIT
        "step": 1,
        "checkpoint": 1,
        "enqueue": 4,
        "enqueue_many": 4,
        "enqueue_many_2500": 8,
        "keyed_claim": 5,
        "keyed_finish": 3,
    },
    # PostgreSQL: every one a single statement (CTEs), an enqueue_many of up to 1,000 jobs too.
    "postgresql": {
        "claim": 1,
        "finish": 1,
        "finish_and_claim": 1,
        "step": 0,  # the claim started it (store/checkpoints.py)
        "checkpoint": 1,
        "enqueue": 1,
        "enqueue_many": 1,
        "enqueue_many_2500": 5,
        "keyed_claim": 5,
        "keyed_finish": 1,  # its NOTIFY to idle workers in the finish's statement
    },
    # MariaDB: a claim locks the row (SELECT … FOR UPDATE SKIP LOCKED) then updates it, in a
    # transaction: no UPDATE … RETURNING there.
    "mysql": {
        "claim": 4,
        "finish": 3,
        "finish_and_claim": 5,  # BEGIN, the outcome, the pick, the take, COMMIT: no savepoint
        "step": 1,
        "checkpoint": 1,
        "enqueue": 4,
        "enqueue_many": 4,
        "enqueue_many_2500": 8,
        # The key's row is made outside the claim's transaction, and the claim picks again, counting
        # first (it met a row to make); the held jobs are counted in a statement of their own.
        "keyed_claim": 13,
        "keyed_finish": 3,
    },
}
BATCH = 1000


@pytest.fixture
def pinned():
    return PINNED[connection.vendor]


def claimed_and_run(kind: str, queue: str) -> tuple[int, int]:
    """How many statements a claim of a job of ``kind`` took, and how many its run."""
    enqueue(kind, queue=queue)
    lease, claim = statements(lambda: store.claim("counted-worker", queues=[queue]))
    assert lease is not None
    ran, run = statements(lambda: execute(lease))
    assert ran.status == Status.DONE
    return len(claim), len(run)


def test_a_claim_is_pinned(queue, pinned):
    assert claimed_and_run(KINDS[0], queue)[0] == pinned["claim"]


def test_a_finish_is_pinned(queue, pinned):
    assert claimed_and_run(KINDS[0], queue)[1] == pinned["finish"]


def test_a_finish_that_claims_the_next_job_is_pinned(queue, pinned):
    """A busy worker's finish: the outcome and the next job's claim, in one round trip on
    PostgreSQL and in one transaction elsewhere (the claim takes no savepoint in it)."""
    enqueue(KINDS[0], queue=queue)
    enqueue(KINDS[0], queue=queue)
    lease = store.claim("counted-worker", queues=[queue])
    assert lease is not None
    ran, run = statements(lambda: execute(lease, then_claim=lambda: True))
    assert ran.status == Status.DONE and ran.next_lease is not None
    assert len(run) == pinned["finish_and_claim"]


@pytest.mark.parametrize("steps", [1, 5])
def test_each_step_of_a_first_run_is_pinned(queue, pinned, steps):
    """The first step is marked running (on PostgreSQL by the claim), then checkpointed; each later
    one is marked running by its predecessor's checkpoint (``store/checkpoints.py``) and costs its
    own checkpoint only."""
    _claim, run = claimed_and_run(KINDS[steps], queue)
    assert run == pinned["finish"] + pinned["step"] + steps * pinned["checkpoint"]


def test_an_enqueue_is_pinned(queue, pinned):
    (_job, created), sent = statements(lambda: enqueue(KINDS[1], queue=queue))
    assert created and len(sent) == pinned["enqueue"]


@pytest.mark.parametrize(("jobs", "pin"), [(BATCH, "enqueue_many"), (2_500, "enqueue_many_2500")])
def test_a_batch_of_enqueue_many_is_pinned(queue, pinned, jobs, pin):
    specs = [{"queue": queue, "subject": {"n": number}} for number in range(jobs)]
    made, sent = statements(lambda: enqueue_many(KINDS[1], specs))
    assert len(made) == jobs and all(created for _job, created in made)
    assert len(sent) == pinned[pin]


def test_a_claim_and_finish_under_a_key_are_pinned(queue, pinned, monkeypatch):
    """As a worker busy with jobs under keys claims them (looked for first), each with a key of its
    own: the claim makes the key's limit row in its transaction and counts the key's held jobs in
    the statement that takes the job."""
    monkeypatch.setattr(limiting, "_limited_found", True)
    enqueue("counted_keyed", queue=queue, subject={"key": queue})
    lease, claim = statements(lambda: store.claim("counted-worker", queues=[queue]))
    assert lease is not None and lease.job.concurrency_key == queue
    ran, run = statements(lambda: execute(lease))
    assert ran.status == Status.DONE
    assert (len(claim), len(run)) == (pinned["keyed_claim"], pinned["keyed_finish"])
