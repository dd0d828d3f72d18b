"""The proving ground's oracle (tests/proving/oracle.py) finds each kind of violation it promises
to find, in ledgers made by hand, and passes a clean one: a scenario that reports zero violations
was judged by an oracle that can fail."""

from __future__ import annotations

import pytest

from django_durajobs import Job, JobStep, Status, enqueue
from tests.proving.ledger import Entry
from tests.proving.oracle import judge
from tests.testapp.models import SideEffect

LIVE = "w@host:100:a"
KILLED = "w@host:200:b"
KILLS = {200: 50.0}

pytestmark = pytest.mark.django_db


def finished(key: str | None = None, worker: str = LIVE, attempt: int = 1) -> Job:
    """A ``prove_steps`` job made done by hand, its steps' checkpoints naming ``worker``."""
    job, _ = enqueue("prove_steps", subject={"key": key} if key else {})
    Job.objects.filter(pk=job.pk).update(status=Status.DONE, attempt=attempt)
    JobStep.objects.filter(job=job).update(state="done", result={"worker": worker, "attempt": attempt})
    SideEffect.objects.create(name=f"atomic:{job.pk}")
    return job


def run(job_id: int, worker: str, at: float, steps=("fetch",), attempt: int = 1) -> list[Entry]:
    entries = [Entry("enter", job_id, "", attempt, worker, at)]
    for offset, step in enumerate(steps, 1):
        entries.append(Entry("start", job_id, step, attempt, worker, at + offset))
        entries.append(Entry("end", job_id, step, attempt, worker, at + offset + 0.5))
    return [*entries, Entry("leave", job_id, "", attempt, worker, at + len(steps) + 1)]


def test_a_clean_run_has_no_violation():
    job = finished(worker=LIVE)
    assert judge(run(job.pk, LIVE, 10), [job.pk], KILLS, limit=1) == []


def test_a_step_in_flight_started_again_after_its_worker_was_killed_is_no_violation():
    job = finished(worker=LIVE)
    ledger = [*run(job.pk, KILLED, 10)[:2], *run(job.pk, LIVE, 60)]
    assert judge(ledger, [job.pk], KILLS) == []


def test_a_job_not_done_is_lost():
    job = finished()
    Job.objects.filter(pk=job.pk).update(status=Status.RUNNING)
    assert judge([], [job.pk], {}) == [f"job {job.pk} lost: running"]


def test_a_step_a_live_worker_ran_started_again_is_a_violation():
    job = finished()
    ledger = [*run(job.pk, LIVE, 10), *run(job.pk, LIVE, 20)]
    assert judge(ledger, [job.pk], KILLS) == [
        f"job {job.pk} step fetch started again after a live worker ran it"
    ]


def test_more_extra_starts_than_kills_is_a_violation():
    job = finished()
    ledger = [*run(job.pk, KILLED, 10)[:2], *run(job.pk, KILLED, 20)[:2], *run(job.pk, LIVE, 60)]
    assert judge(ledger, [job.pk], KILLS) == [f"job {job.pk} step fetch started twice by one killed worker"]


def test_an_atomic_effect_twice_or_never_is_a_violation():
    twice, never = finished(), finished()
    SideEffect.objects.create(name=f"atomic:{twice.pk}")
    SideEffect.objects.filter(name=f"atomic:{never.pk}").delete()
    assert sorted(judge([], [twice.pk, never.pk], {})) == sorted(
        [f"atomic:{twice.pk}: 2 effects of an atomic step", f"atomic:{never.pk}: 0 effects of an atomic step"]
    )


def test_a_checkpoint_written_by_a_superseded_run_is_a_violation():
    job = finished(worker=KILLED)
    ledger = [*run(job.pk, KILLED, 10)[:2], *run(job.pk, LIVE, 60)]
    [violation] = judge(ledger, [job.pk], KILLS)
    assert violation.startswith(f"job {job.pk} step fetch: checkpoint written by")


def test_runs_of_one_key_over_its_limit_are_a_violation_and_a_killed_run_counts_until_the_kill():
    first, second, third = finished("k", worker=KILLED), finished("k"), finished("k")
    killed_run = run(first.pk, KILLED, 10)[:2]  # never left: counts until the kill at 50
    ledger = [*killed_run, *run(second.pk, LIVE, 20), *run(third.pk, LIVE, 60)]
    assert judge(ledger, [first.pk, second.pk, third.pk], KILLS, limit=2) == []
    [violation] = judge(ledger, [first.pk, second.pk, third.pk], KILLS, limit=1)
    assert violation.startswith("concurrency key k: 2 running at 20.000, limit 1")


def test_a_step_cut_short_by_a_database_outage_may_start_again_once_the_database_is_back():
    job = finished(worker=LIVE)
    ledger = [*run(job.pk, LIVE, 10)[:2], *run(job.pk, LIVE, 60)]
    assert judge(ledger, [job.pk], {}, outages=[(30.0, 31.0)]) == []
    assert judge(ledger, [job.pk], {}, outages=[(70.0, 71.0)]) == [
        f"job {job.pk} step fetch started again after a live worker ran it"
    ]
