"""Scenario 2, the crash-point matrix: a worker dies (``os._exit``) at each commit point, and a
fresh worker recovers; the outcome after recovery is pinned for each point.

The points are ``tests/proving/crash_points.py``'s ``ALL``; a point added there without an outcome
in ``PINNED`` fails ``test_every_crash_point_has_a_pinned_outcome``.
"""

from __future__ import annotations

import time
from collections import Counter
from dataclasses import dataclass

import pytest

from django_durajobs import Job, Status, enqueue, send_event
from tests.helpers import fail_if_exited, log_of, stop_cleanly, wait_for
from tests.proving import crash_points
from tests.proving.oracle import judge
from tests.testapp.kinds_proving import STEPS

LEASE = {"DURAJOBS_LEASE_SECONDS": "2", "DURAJOBS_HEARTBEAT_SECONDS": "0.5"}


@dataclass(frozen=True)
class Outcome:
    """What a job looks like once recovered from a crash at one point."""

    kind: str
    worker_losses: int  # the crash cost the job a lost worker (its lease had to expire)
    attempt: int
    twice: tuple[str, ...] = ()  # the steps that started twice; every other one started once
    event_before: bool = False  # the event was sent before the first worker ran


PINNED = {
    "after_claim": Outcome("prove_steps", worker_losses=1, attempt=1),
    crash_points.IN_STEP: Outcome("prove_steps", worker_losses=1, attempt=1, twice=(STEPS[0],)),
    crash_points.AFTER_CHECKPOINT: Outcome("prove_steps", worker_losses=1, attempt=1),
    "after_done": Outcome("prove_steps", worker_losses=0, attempt=1),
    "after_retry_scheduled": Outcome("prove_retry", worker_losses=0, attempt=2),
    "after_wait_recorded": Outcome("prove_wait", worker_losses=0, attempt=1),
    crash_points.AFTER_EVENT: Outcome("prove_wait", worker_losses=1, attempt=1, event_before=True),
}


def test_every_crash_point_has_a_pinned_outcome():
    assert sorted(PINNED) == sorted(crash_points.ALL)


def steps_of(kind: str) -> tuple[str, ...]:
    return STEPS if kind == "prove_steps" else ("after",)


@pytest.mark.parametrize("point", crash_points.ALL)
def test_crash_point(point, child_env, ledger, runjobs, report):
    expected = PINNED[point]
    event = f"prove-{point}-{time.time()}"
    if expected.event_before:
        send_event(event, {"sent": point})
    job, _ = enqueue(expected.kind, subject={"event": event})

    doomed = runjobs(
        "--poll-interval", "0.2", env=child_env, extra_env={**LEASE, crash_points.CRASH_ENV: point}
    )
    assert doomed.wait(timeout=60) == crash_points.CRASH_EXIT_CODE, log_of(doomed)
    kills = {doomed.pid: time.time()}
    if not expected.event_before and expected.kind == "prove_wait":
        assert Job.objects.get(pk=job.pk).status == Status.AWAITING_EXTERNAL
        send_event(event, {"sent": point})

    fresh = runjobs("--poll-interval", "0.2", env=child_env, extra_env=LEASE)
    wait_for(
        lambda: Job.objects.get(pk=job.pk).status == Status.DONE or fail_if_exited([fresh]),
        timeout=60,
        message=f"the job to be done after a crash {point}",
    )
    stop_cleanly([fresh])

    entries = ledger.entries()
    job.refresh_from_db()
    starts = Counter(entry.step for entry in entries if entry.event == "start")
    steps = steps_of(expected.kind)
    assert (job.worker_losses, job.attempt) == (expected.worker_losses, expected.attempt)
    assert starts == {step: 2 if step in expected.twice else 1 for step in steps}
    if expected.kind == "prove_wait":
        assert job.result[1] == {"sent": point}
    violations = judge(entries, [job.pk], kills)
    report(jobs=1, kills=1, restarts=0, point=point, violations=len(violations))
    assert violations == [], ledger.story(violations)
