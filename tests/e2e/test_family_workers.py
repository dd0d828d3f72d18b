"""Parents and children with real ``manage.py runjobs`` workers: fan-in under many processes, a
killed parent, cancel cascades.

The last child to settle wakes its parent exactly once, also when many worker processes settle
children at the same moment; ``ctx.enqueue_child`` never duplicates children, whenever the
parent's worker dies; ``cancel(parent)`` stops a whole family that workers are running. The tests
synchronise on database state and marker files. Kinds: ``tests/testapp/kinds_family.py``; the
in-process rules are in ``tests/integration/test_family.py``.
"""

from __future__ import annotations

import pytest
from django.db.models import Max

from django_durajobs import (
    Job,
    JobLog,
    JobStep,
    Status,
    cancel,
    children_summary,
)
from django_durajobs.status import Phase, StepState
from tests.helpers import fail_if_exited, log_of, sigkill, stop_cleanly, wait_for
from tests.job_rows import children_of, fresh
from tests.testapp.gates import go_file, started_markers
from tests.testapp.kinds_family import (
    fan_out,
    got_records,
    recorded,
    settled_lines,
)

# Worker processes ---------------------------------------------------------------------------------

#: Heartbeats (and so the periodic wake-up of forgotten parents) far apart: in these tests a parent
#: can only be woken by its children, as promised.
NO_FALLBACK = {"DURAJOBS_HEARTBEAT_SECONDS": "3600", "DURAJOBS_LEASE_SECONDS": "7200"}
FAST = ("--poll-interval", "0.1")


def wait_for_hold(procs, directory, job_id, where):
    wait_for(
        lambda: started_markers(directory, job_id, where) or fail_if_exited(procs),
        timeout=30,
        message=f"job {job_id} to hold at {where}",
    )


def wait_for_status(job, status, procs, timeout=30):
    def reached():
        fail_if_exited(procs)
        return Job.objects.filter(pk=job.pk, status=status).exists()

    wait_for(reached, timeout=timeout, interval=0.05, message=f"job {job.pk} to be {status}")
    return fresh(job)


# 1. Fan-out / fan-in with worker processes ---------------------------------------------------------

#: Worker processes per database (SQLite writes one at a time: fewer), each with 2 job threads.
WORKER_PROCESSES = {"postgresql": 4, "mysql": 4, "sqlite": 2}
ROUNDS = 20
FAN_OUT = 50


@pytest.mark.slow
def test_many_workers_settling_children_wake_the_parent_exactly_once_after_the_last(
    child_env, db_vendor, runjobs
):
    """50 children run by several ``runjobs`` processes (2 threads each), round after round: the parent
    is woken exactly once (one "All 50 child jobs have settled" line, two runs), never before its last
    child settled (its second run got a summary with every child done), and only by its children (the
    periodic wake-up of forgotten parents is out of reach in this test)."""
    fleet = [
        runjobs("--concurrency", "2", *FAST, env=child_env, extra_env=NO_FALLBACK)
        for _ in range(WORKER_PROCESSES[db_vendor])
    ]

    for round_number in range(ROUNDS):
        parent = fan_out([{}] * FAN_OUT, child_kind="family_quick")
        parent = wait_for_status(parent, Status.DONE, fleet)
        where = f"round {round_number}, parent {parent.pk}"

        assert parent.result == {"overall": "done", "by_status": {"done": FAN_OUT}}, where
        assert recorded(parent.pk, "run") == 2, where
        assert got_records(parent.pk) == [("done", {"done": FAN_OUT})], where
        assert settled_lines(parent) == [f"All {FAN_OUT} child jobs have settled; queued again."], where
        kids = Job.objects.filter(parent_id=parent.pk)
        kid_ids = list(kids.values_list("pk", flat=True))
        assert len(kid_ids) == FAN_OUT, where
        # Each child was claimed once (a claim counts a try) and finished.
        assert set(kids.values_list("status", "attempt", "worker_losses")) == {(Status.DONE, 1, 0)}, where
        woke_at = JobLog.objects.get(job_id=parent.pk, line__startswith=f"All {FAN_OUT} child jobs").at
        last_settled = Job.objects.filter(pk__in=kid_ids).aggregate(last=Max("ended_at"))["last"]
        assert woke_at >= last_settled, where

    fail_if_exited(fleet)
    stop_cleanly(fleet)
    # The work was shared between processes: the wake-up raced across them.
    assert sum("started on" in log_of(proc) for proc in fleet) >= 2


# 2. A parent whose worker is killed ----------------------------------------------------------------


def test_a_parent_killed_between_fan_out_and_wait_keeps_its_50_children_and_finishes(
    child_env, runjobs, tmp_path
):
    """SIGKILL after the atomic fan-out step checkpointed and before ``wait_for_children()``: the 50
    children exist; the worker restarted under its name takes the parent over at once, which skips
    its finished fan-out step, waits for the same 50 children and ends ``done``."""
    parent = fan_out([{}] * FAN_OUT, hold_before_wait=True, dir=str(tmp_path))
    first = runjobs(
        "--worker-id", "family-parent", "--concurrency", "1", *FAST, env=child_env, extra_env=NO_FALLBACK
    )
    wait_for_hold([first], tmp_path, parent.pk, "before_wait")
    sigkill(first)

    parent = fresh(parent)
    assert parent.status == Status.RUNNING and parent.locked_by.startswith("family-parent@")
    assert JobStep.objects.get(job=parent, phase=Phase.RUN, step_id="fan_out").state == StepState.DONE
    assert Job.objects.filter(parent_id=parent.pk).count() == FAN_OUT
    assert not Job.objects.filter(parent_id=parent.pk).exclude(status=Status.QUEUED).exists()

    go_file(tmp_path, parent.pk).touch()
    second = runjobs(
        "--worker-id", "family-parent", "--concurrency", "2", *FAST, env=child_env, extra_env=NO_FALLBACK
    )
    parent = wait_for_status(parent, Status.DONE, [second], timeout=60)

    assert parent.result == {"overall": "done", "by_status": {"done": FAN_OUT}}
    assert Job.objects.filter(parent_id=parent.pk).count() == FAN_OUT
    assert recorded(parent.pk, "fan_out") == 1
    assert got_records(parent.pk) == [("done", {"done": FAN_OUT})]
    assert len(settled_lines(parent)) <= 1  # woken once, if it had to wait at all
    assert "recovered 1 job(s) of its previous run" in log_of(second)
    stop_cleanly([second])


@pytest.mark.parametrize(
    ("atomic", "children_left", "fan_out_effects"),
    [pytest.param(True, 0, 1, id="atomic"), pytest.param(False, 20, 2, id="not atomic")],
)
def test_a_parent_killed_inside_its_fan_out_step_ends_with_exactly_50_children(
    atomic, children_left, fan_out_effects, child_env, runjobs, tmp_path
):
    """SIGKILL inside the fan-out step after 20 of 50 children were created, before its checkpoint.
    ``atomic=True``: none of the 20 exist afterwards. Not atomic: the 20 exist, and the re-run step's
    ``enqueue_child`` finds them by their derived keys. Either way, exactly 50 after recovery."""
    parent = fan_out([{}] * FAN_OUT, hold_in_fan_out_after=20, atomic=atomic, dir=str(tmp_path))
    first = runjobs(
        "--worker-id", "family-parent", "--concurrency", "1", *FAST, env=child_env, extra_env=NO_FALLBACK
    )
    wait_for_hold([first], tmp_path, parent.pk, "fan_out")
    sigkill(first)

    assert Job.objects.filter(parent_id=parent.pk).count() == children_left
    assert JobStep.objects.get(job=parent, phase=Phase.RUN, step_id="fan_out").state == StepState.RUNNING
    assert recorded(parent.pk, "fan_out") == fan_out_effects - 1

    go_file(tmp_path, parent.pk).touch()
    second = runjobs(
        "--worker-id", "family-parent", "--concurrency", "2", *FAST, env=child_env, extra_env=NO_FALLBACK
    )
    parent = wait_for_status(parent, Status.DONE, [second], timeout=60)

    assert len(started_markers(tmp_path, parent.pk, "fan_out")) == 2  # the step ran twice
    assert recorded(parent.pk, "fan_out") == fan_out_effects
    kids = children_of(parent)
    assert [kid.label for kid in kids] == [f"target {n}" for n in range(FAN_OUT)]
    assert parent.result == {"overall": "done", "by_status": {"done": FAN_OUT}}
    assert {recorded(kid.pk, "run") for kid in kids} == {1}
    stop_cleanly([second])


# 3. Cancel cascade with worker processes -----------------------------------------------------------


def hold_first_child(tmp_path):
    return [{"hold": True, "dir": str(tmp_path)}, {}, {}, {}]


def test_cancelling_a_waiting_parent_stops_its_whole_family(child_env, runjobs, tmp_path):
    """The parent waits for 4 children; one is running in a worker (holding in its first step), three
    are queued. ``cancel(parent)`` cancels the parent and the queued children at once and asks the
    running one to stop; it stops at its next step, and the parent is not woken by it."""
    parent = fan_out(hold_first_child(tmp_path))
    worker = runjobs("--concurrency", "1", *FAST, env=child_env, extra_env=NO_FALLBACK)
    kids = wait_for(lambda: children_of(parent), message="the children to exist")
    running = kids[0]
    wait_for_hold([worker], tmp_path, running.pk, "work")
    assert fresh(parent).status == Status.AWAITING_EXTERNAL

    cancel(parent)

    assert fresh(parent).status == Status.CANCELLED
    assert [fresh(kid).status for kid in kids] == ["running", "cancelled", "cancelled", "cancelled"]
    assert fresh(running).cancel_requested is True

    go_file(tmp_path, running.pk).touch()
    wait_for_status(running, Status.CANCELLED, [worker])
    stop_cleanly([worker])

    assert fresh(parent).status == Status.CANCELLED
    assert recorded(parent.pk, "run") == 1
    assert settled_lines(parent) == []
    summary = children_summary(parent)
    assert (summary["overall"], summary["by_status"]) == ("failed", {"cancelled": 4})
    # It stopped at the boundary of its next step, which never began.
    assert list(JobStep.objects.filter(job=running).values_list("step_id", "state")) == [("work", "done")]


def test_cancelling_a_running_parent_stops_it_and_its_whole_family(child_env, runjobs, tmp_path):
    """The parent is running (holding between its fan-out and its wait) and one child is running in
    the same worker's other thread: ``cancel(parent)`` requests both cancels and cancels the queued
    children at once; parent and child stop at their next check, nothing of the family is left."""
    parent = fan_out(hold_first_child(tmp_path), hold_before_wait=True, dir=str(tmp_path))
    worker = runjobs("--concurrency", "2", *FAST, env=child_env, extra_env=NO_FALLBACK)
    wait_for_hold([worker], tmp_path, parent.pk, "before_wait")
    kids = children_of(parent)
    running = kids[0]
    wait_for_hold([worker], tmp_path, running.pk, "work")

    cancel(parent)

    assert (fresh(parent).status, fresh(parent).cancel_requested) == (Status.RUNNING, True)
    assert [fresh(kid).status for kid in kids] == ["running", "cancelled", "cancelled", "cancelled"]
    assert fresh(running).cancel_requested is True

    go_file(tmp_path, parent.pk).touch()
    go_file(tmp_path, running.pk).touch()
    wait_for_status(parent, Status.CANCELLED, [worker])
    wait_for_status(running, Status.CANCELLED, [worker])
    stop_cleanly([worker])

    assert (
        not Job.objects.filter(pk__in=[parent.pk] + [kid.pk for kid in kids])
        .exclude(status=Status.CANCELLED)
        .exists()
    )
    assert recorded(parent.pk, "run") == 1
    assert children_summary(parent)["overall"] == "failed"
