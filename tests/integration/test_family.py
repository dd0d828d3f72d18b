"""Parents and children: the family summary, fan-out/fan-in, and cancel and revert cascades.

- ``children_summary(parent)`` reports ``overall`` as ``none``, ``done``, ``partial``, ``failed`` or
  ``running`` by the rules of DESIGN.md sections 5 and 7: a partial failure never reads as success
  and a family where nothing is left to run never reads as running.
- ``ctx.wait_for_children()`` parks the parent until its last child settles; that child wakes it
  exactly once, also when many worker processes settle children at the same moment.
- ``ctx.enqueue_child`` inside a step never duplicates children, whenever the parent's worker dies.
- ``cancel(parent)`` and ``revert(parent)`` cascade to the children.

In-process tests use ``drain()``; the process tests start real ``manage.py runjobs`` workers and
synchronise on database state and marker files. Kinds: ``tests/testapp/kinds_family.py``.
"""

from __future__ import annotations

import json
from collections import Counter

import pytest

from django_durajobs import (
    Job,
    JobStep,
    Status,
    cancel,
    children_summary,
    describe,
    drain,
    enqueue,
    pause,
    resume,
    retry,
    revert,
)
from django_durajobs.status import Phase, StepState
from tests.factories import JobFactory
from tests.job_rows import children_of, fresh
from tests.testapp.kinds_family import (
    effect,
    fan_out,
    got_records,
    recorded,
    settled_lines,
)
from tests.testapp.models import SideEffect

CHILD_KEYS = {"id", "label", "status", "subject", "error", "attempt", "next_run_at"}


# Helpers ---------------------------------------------------------------------------------------


def factory_family(statuses, parent_status=Status.AWAITING_EXTERNAL):
    """A parent and one ``family_leaf`` child per status, built directly in those states."""
    parent = JobFactory(kind="family_fan_out", status=parent_status, subject={"children": []})
    children = [
        JobFactory(kind="family_leaf", status=status, parent=parent, label=f"target {number}")
        for number, status in enumerate(statuses)
    ]
    return parent, children


def waiting_parent(**subject):
    """A ``family_fan_out`` parent that never runs by itself (it waits, with no resume time)."""
    parent, _ = enqueue(
        "family_fan_out", subject={"children": [], **subject}, initial_status=Status.AWAITING_EXTERNAL
    )
    return parent


def child(parent, number, **subject):
    job, _ = enqueue("family_leaf", parent=parent, label=f"target {number}", subject=subject)
    return job


def statuses_of(jobs):
    return [Job.objects.get(pk=job.pk).status for job in jobs]


def overall_of(parent):
    return children_summary(parent)["overall"]


# 1. overall, by_status, creation order -------------------------------------------------------------

OVERALL_CASES = [
    pytest.param([], "none", id="no children"),
    pytest.param(["done"], "done", id="one done"),
    pytest.param(["done", "done", "done"], "done", id="all done"),
    pytest.param(["done", "failed"], "partial", id="done+failed"),
    pytest.param(["done", "needs_user"], "partial", id="done+needs_user"),
    pytest.param(["done", "cancelled", "cancelled"], "partial", id="done+cancelled"),
    pytest.param(["reverted", "done"], "partial", id="done+reverted"),
    pytest.param(["failed", "done", "queued"], "partial", id="partial even with one still to run"),
    pytest.param(["done", "failed", "reverting"], "partial", id="done+failed+reverting"),
    pytest.param(["failed"], "failed", id="one failed"),
    pytest.param(["needs_user", "needs_user"], "failed", id="only needs_user"),
    pytest.param(["cancelled", "cancelled", "cancelled"], "failed", id="only cancelled"),
    pytest.param(["reverted", "failed", "needs_user", "cancelled"], "failed", id="every unsuccessful end"),
    pytest.param(["done", "queued"], "running", id="done+queued"),
    pytest.param(["running", "done"], "running", id="done+running"),
    pytest.param(["done", "paused"], "running", id="paused counts as running"),
    pytest.param(["done", "reverting"], "running", id="reverting counts as running"),
    pytest.param(["failed", "paused"], "running", id="failed+paused"),
    pytest.param(["cancelled", "reverting"], "running", id="cancelled+reverting"),
    pytest.param(["awaiting_external", "done"], "running", id="awaiting_external"),
    pytest.param(
        ["awaiting_approval", "awaiting_payment", "not_ready", "needs_setup"], "running", id="other waits"
    ),
    pytest.param(["queued", "queued"], "running", id="all queued"),
]


@pytest.mark.django_db
@pytest.mark.parametrize(("statuses", "expected"), OVERALL_CASES)
def test_overall_by_status_and_children_in_creation_order(statuses, expected):
    """Each family's ``overall``; ``by_status`` has exactly the non-zero counts; the children come
    in creation order (the ``Job`` default ordering is newest first) with their shown fields."""
    parent, children = factory_family(statuses)

    summary = children_summary(parent)

    assert summary["overall"] == expected
    assert summary["total"] == len(statuses)
    assert summary["by_status"] == dict(Counter(statuses))
    assert all(count > 0 for count in summary["by_status"].values())
    assert [entry["id"] for entry in summary["children"]] == [job.pk for job in children]
    assert [entry["status"] for entry in summary["children"]] == statuses
    assert [entry["label"] for entry in summary["children"]] == [f"target {n}" for n in range(len(statuses))]
    assert all(set(entry) == CHILD_KEYS for entry in summary["children"])
    json.dumps(summary)  # ready for a screen


@pytest.mark.django_db
def test_a_family_moves_through_running_partial_and_back_with_real_runs_and_operations():
    """Children run by ``drain()`` and changed by the operations: the summary follows each change,
    including a failed child's error, its attempt and a queued child's due time."""
    parent = waiting_parent()
    assert children_summary(parent) == {"total": 0, "by_status": {}, "overall": "none", "children": []}

    ok = child(parent, 0)
    broken = child(parent, 1, failures=1)
    late = child(parent, 2)
    summary = children_summary(parent)
    assert (summary["overall"], summary["by_status"]) == ("running", {"queued": 3})
    assert summary["children"][2]["next_run_at"] == late.next_run_at.isoformat()

    assert drain(max_jobs=2) == 2  # ok done, broken failed; late still queued
    summary = children_summary(parent)
    assert summary["by_status"] == {"done": 1, "failed": 1, "queued": 1}
    assert summary["overall"] == "partial"  # a failure already shows, though one child is still to run
    failed_entry = summary["children"][1]
    assert failed_entry["id"] == broken.pk
    assert failed_entry["error"] and "target 1: target unreachable" in failed_entry["error"]
    assert failed_entry["attempt"] == 1

    retry(broken)
    assert overall_of(parent) == "running"  # done + queued: nothing has failed for now
    drain()
    summary = children_summary(parent)
    assert (summary["overall"], summary["by_status"]) == ("done", {"done": 3})
    assert [entry["id"] for entry in summary["children"]] == [ok.pk, broken.pk, late.pk]
    assert summary["children"][1]["attempt"] == 2 and summary["children"][1]["error"] is None


@pytest.mark.django_db
def test_cancelled_children_make_a_done_family_partial():
    parent = waiting_parent()
    first, second = child(parent, 0), child(parent, 1)
    assert drain(max_jobs=1) == 1
    assert statuses_of([first, second]) == [Status.DONE, Status.QUEUED]
    assert overall_of(parent) == "running"

    cancel(second)

    summary = children_summary(parent)
    assert (summary["overall"], summary["by_status"]) == ("partial", {"done": 1, "cancelled": 1})


@pytest.mark.django_db
def test_reverting_children_count_as_running_and_reverted_ones_make_the_family_partial():
    parent = waiting_parent()
    first = child(parent, 0)
    child(parent, 1)
    drain()
    assert overall_of(parent) == "done"

    revert(first)
    summary = children_summary(parent)
    assert (summary["overall"], summary["by_status"]) == ("running", {"reverting": 1, "done": 1})

    drain()
    assert recorded(first.pk, "undone") == 1
    summary = children_summary(parent)
    assert (summary["overall"], summary["by_status"]) == ("partial", {"reverted": 1, "done": 1})


@pytest.mark.django_db
def test_a_paused_child_keeps_the_family_running_until_it_is_resumed_and_done():
    parent = waiting_parent()
    first, second = child(parent, 0), child(parent, 1)
    pause(second)
    drain()
    assert statuses_of([first, second]) == [Status.DONE, Status.PAUSED]
    assert overall_of(parent) == "running"

    resume(second)
    drain()
    assert overall_of(parent) == "done"


@pytest.mark.django_db
def test_a_child_that_needs_a_person_counts_as_unsuccessful():
    """needs_user is settled for the family: alone it is ``failed``, next to a done child ``partial``."""
    alone = waiting_parent()
    asking = child(alone, 0, needs_user=True)
    drain()
    assert fresh(asking).status == Status.NEEDS_USER
    assert overall_of(alone) == "failed"

    mixed = waiting_parent()
    child(mixed, 0)
    child(mixed, 1, needs_user=True)
    drain()
    summary = children_summary(mixed)
    assert (summary["overall"], summary["by_status"]) == ("partial", {"done": 1, "needs_user": 1})


@pytest.mark.django_db
def test_a_family_of_only_cancelled_children_is_failed_and_wakes_its_parent():
    """Cancelling every child of a waiting parent settles the family: ``overall`` is ``failed`` (never
    ``running`` forever), the last cancel wakes the parent, and its run fails with a clear message."""
    parent = fan_out([{}, {}, {}], on_partial="fail")
    assert drain(max_jobs=1) == 1
    parent = fresh(parent)
    assert (parent.status, parent.waits_for_children) == (Status.AWAITING_EXTERNAL, True)
    first, second, third = children_of(parent)

    cancel(first)
    cancel(second)
    assert fresh(parent).status == Status.AWAITING_EXTERNAL
    assert describe(parent)["wait_reason"] == "Waiting for 1 of 3 child jobs"
    cancel(third)

    summary = children_summary(parent)
    assert (summary["overall"], summary["by_status"]) == ("failed", {"cancelled": 3})
    parent = fresh(parent)
    assert (parent.status, parent.waits_for_children, parent.wait_reason) == (Status.QUEUED, False, "")
    drain()
    parent = fresh(parent)
    assert parent.status == Status.FAILED
    assert parent.error_code == "failed"
    assert parent.error == (
        "3 of 3 child jobs did not succeed: target 0 (cancelled), target 1 (cancelled), target 2 (cancelled)"
    )
    assert got_records(parent.pk) == [("failed", {"cancelled": 3})]
    assert settled_lines(parent) == ["All 3 child jobs have settled; queued again."]


# 2. Fan-out / fan-in in one process ----------------------------------------------------------------


@pytest.mark.django_db
def test_fan_out_and_in_fails_the_parent_on_a_partial_result():
    """The parent creates its children in an atomic step, waits ("Waiting for N of M", updated as
    children settle), is woken once by the last child, and fails on ``partial`` naming the failures."""
    parent = fan_out([{}, {"failures": 1}, {}, {"needs_user": True}], on_partial="fail")

    assert drain(max_jobs=1) == 1  # the parent's first run: fan out, then wait
    parent = fresh(parent)
    assert parent.status == Status.AWAITING_EXTERNAL
    assert parent.waits_for_children is True
    assert parent.wait_reason == "Waiting for 4 of 4 child jobs"
    assert parent.next_run_at is None  # woken by its children, not by a timer
    assert parent.attempt == 0  # a wait hands the try back
    kids = children_of(parent)
    assert [(kid.parent_id, kid.kind, kid.label, kid.status) for kid in kids] == [
        (parent.pk, "family_leaf", f"target {n}", Status.QUEUED) for n in range(4)
    ]
    assert [kid.subject for kid in kids] == [{}, {"failures": 1}, {}, {"needs_user": True}]
    fan_out_step = JobStep.objects.get(job=parent, phase=Phase.RUN, step_id="fan_out")
    assert (fan_out_step.state, fan_out_step.result) == (StepState.DONE, {"created": 4})
    assert children_summary(parent)["overall"] == "running"

    assert drain(max_jobs=1) == 1  # the first child
    assert describe(parent)["wait_reason"] == "Waiting for 3 of 4 child jobs"
    assert fresh(parent).status == Status.AWAITING_EXTERNAL
    assert drain(max_jobs=2) == 2  # the next two: one still open
    assert fresh(parent).status == Status.AWAITING_EXTERNAL
    assert describe(parent)["wait_reason"] == "Waiting for 1 of 4 child jobs"

    assert drain() == 2  # the last child, then the woken parent
    parent = fresh(parent)
    assert parent.status == Status.FAILED
    assert parent.error_code == "partial"
    assert parent.error == ("2 of 4 child jobs did not succeed: target 1 (failed), target 3 (needs_user)")
    assert recorded(parent.pk, "run") == 2
    assert recorded(parent.pk, "fan_out") == 1
    assert got_records(parent.pk) == [("partial", {"done": 2, "failed": 1, "needs_user": 1})]
    assert settled_lines(parent) == ["All 4 child jobs have settled; queued again."]
    assert [recorded(kid.pk, "run") for kid in kids] == [1, 1, 1, 1]
    assert children_of(parent) == kids


@pytest.mark.django_db
def test_fan_out_retries_failed_children_once_and_is_woken_again_when_they_settle():
    """On ``partial`` the parent retries the failed children with ``retry()`` (in an atomic step) and
    waits again; the retried children wake it a second time, and it finishes ``done``."""
    parent = fan_out([{"failures": 1}, {}, {"failures": 1}, {}], on_partial="retry")

    drain()

    parent = fresh(parent)
    assert parent.status == Status.DONE, (parent.error, parent.wait_reason)
    assert parent.result == {"overall": "done", "by_status": {"done": 4}}
    assert recorded(parent.pk, "run") == 3  # fan out; retry the failures; finish
    assert got_records(parent.pk) == [("partial", {"done": 2, "failed": 2}), ("done", {"done": 4})]
    assert settled_lines(parent) == ["All 4 child jobs have settled; queued again."] * 2
    retried = JobStep.objects.get(job=parent, phase=Phase.RUN, step_id="retry_failed")
    kids = children_of(parent)
    assert retried.result == [kids[0].pk, kids[2].pk]
    assert [recorded(kid.pk, "run") for kid in kids] == [2, 1, 2, 1]
    assert [(kid.status, kid.attempt) for kid in kids] == [
        (Status.DONE, 2),
        (Status.DONE, 1),
        (Status.DONE, 2),
        (Status.DONE, 1),
    ]
    assert recorded(parent.pk, "fan_out") == 1 and len(kids) == 4


@pytest.mark.django_db
def test_a_retried_child_that_fails_again_fails_the_parent_after_the_one_retry():
    parent = fan_out([{"failures": 2}, {}], on_partial="retry")

    drain()

    parent = fresh(parent)
    assert parent.status == Status.FAILED
    assert (parent.error_code, parent.error) == (
        "partial",
        "1 of 2 child jobs did not succeed: target 0 (failed)",
    )
    # Before its one retry; then, woken again, before and after replaying that retry step.
    assert got_records(parent.pk) == [("partial", {"done": 1, "failed": 1})] * 3
    assert recorded(parent.pk, "run") == 3
    assert recorded(children_of(parent)[0].pk, "run") == 2


@pytest.mark.django_db
def test_a_parent_resumed_by_hand_while_children_are_open_waits_again():
    """``resume()`` of a parent that waits for its children re-enters its run, which waits again; the
    last child still wakes it, once."""
    parent = fan_out([{}, {}], on_partial="fail", priority=10)  # runs before its children
    assert drain(max_jobs=1) == 1
    cancel(children_of(parent)[0])
    assert describe(parent)["wait_reason"] == "Waiting for 1 of 2 child jobs"

    resume(parent)
    assert fresh(parent).waits_for_children is False
    assert drain(max_jobs=1) == 1
    parent = fresh(parent)
    assert (parent.status, parent.waits_for_children) == (Status.AWAITING_EXTERNAL, True)
    assert parent.wait_reason == "Waiting for 1 of 2 child jobs"

    drain()

    parent = fresh(parent)
    assert parent.status == Status.FAILED and parent.error_code == "partial"
    assert recorded(parent.pk, "run") == 3
    assert got_records(parent.pk) == [("partial", {"cancelled": 1, "done": 1})]
    assert settled_lines(parent) == ["All 2 child jobs have settled; queued again."]


# 7. describe() -------------------------------------------------------------------------------------


@pytest.mark.django_db
def test_describe_shows_the_children_summary_and_none_without_children():
    parent = fan_out([{}, {"failures": 1}, {}], on_partial="fail")
    assert describe(parent)["children"] is None  # not fanned out yet
    drain(max_jobs=2)  # the parent, then its first child

    shown = describe(parent)
    assert shown["children"] == children_summary(parent)
    assert shown["children"]["by_status"] == {"done": 1, "queued": 2}
    assert shown["wait_reason"] == "Waiting for 2 of 3 child jobs"
    assert describe(children_of(parent)[0])["children"] is None

    drain()
    assert describe(parent)["children"] == children_summary(parent)
    assert describe(parent)["children"]["overall"] == "partial"


# 5. Cancel cascade, in process ---------------------------------------------------------------------


@pytest.mark.django_db
def test_cancelling_a_waiting_parent_cancels_children_not_started_and_asks_running_ones_to_stop():
    parent, kids = factory_family(
        [
            "queued",
            "paused",
            "awaiting_external",
            "awaiting_approval",
            "running",
            "done",
            "failed",
            "reverting",
        ]
    )
    Job.objects.filter(pk=parent.pk).update(waits_for_children=True)

    cancel(parent)

    parent = fresh(parent)
    assert (parent.status, parent.waits_for_children) == (Status.CANCELLED, False)
    after = [fresh(kid) for kid in kids]
    assert [kid.status for kid in after] == ["cancelled"] * 4 + ["running", "done", "failed", "reverting"]
    assert [kid.cancel_requested for kid in after] == [False] * 4 + [True] + [False] * 3
    assert all(kid.ended_at is not None for kid in after[:4])


@pytest.mark.django_db
def test_cancelling_a_parent_cancels_a_child_that_waits_for_a_person():
    """needs_user is a waiting status: ``cancel()`` of the child alone cancels it at once (DESIGN.md
    section 2), and the cascade cancels the parent's waiting children."""
    parent, (asking,) = factory_family(["needs_user"])

    cancel(parent)

    assert fresh(asking).status == Status.CANCELLED


@pytest.mark.django_db
def test_cancelling_a_running_parent_requests_its_cancel_and_cascades_to_its_children():
    parent, kids = factory_family(["queued", "awaiting_external", "running", "done"], parent_status="running")

    cancel(parent)

    parent = fresh(parent)
    assert (parent.status, parent.cancel_requested) == (Status.RUNNING, True)
    assert [(fresh(kid).status, fresh(kid).cancel_requested) for kid in kids] == [
        (Status.CANCELLED, False),
        (Status.CANCELLED, False),
        (Status.RUNNING, True),
        (Status.DONE, False),
    ]


# 6. Revert cascade ---------------------------------------------------------------------------------


def undone_ids(job_id):
    return list(SideEffect.objects.filter(name=effect(job_id, "undone")).values_list("id", flat=True))


def revert_steps(job_id):
    return list(JobStep.objects.filter(job_id=job_id, phase=Phase.REVERT))


@pytest.mark.django_db
def test_revert_of_a_parent_reverts_its_done_children_first_then_itself():
    """``revert(parent)`` puts each done child in ``reverting`` at once (each its own job); the parent's
    revert waits (``reverting`` with ``waits_for_children``) until they are reverted, then runs its own
    revert. A failed child is left alone."""
    parent = fan_out([{}, {}, {"failures": 1}, {}])
    drain()
    parent = fresh(parent)
    assert parent.status == Status.DONE
    assert parent.result == {"overall": "partial", "by_status": {"done": 3, "failed": 1}}
    kids = children_of(parent)
    done_kids = [kids[0], kids[1], kids[3]]

    revert(parent)

    assert fresh(parent).status == Status.REVERTING
    assert [(fresh(kid).status, fresh(kid).phase) for kid in kids] == [
        (Status.REVERTING, Phase.REVERT),
        (Status.REVERTING, Phase.REVERT),
        (Status.FAILED, Phase.RUN),
        (Status.REVERTING, Phase.REVERT),
    ]
    assert children_summary(parent)["overall"] == "running"

    assert drain(max_jobs=1) == 1  # the parent's revert: its children first
    parent = fresh(parent)
    assert (parent.status, parent.waits_for_children) == (Status.REVERTING, True)
    assert parent.wait_reason == "Waiting for 3 of 4 child jobs"
    assert recorded(parent.pk, "revert") == 0  # its own revert has not begun

    assert drain() == 4  # three child reverts, then the parent's own
    parent = fresh(parent)
    assert parent.status == Status.REVERTED, parent.error
    assert [fresh(kid).status for kid in kids] == ["reverted", "reverted", "failed", "reverted"]
    assert [len(undone_ids(kid.pk)) for kid in kids] == [1, 1, 0, 1]
    assert recorded(kids[2].pk, "revert") == 0
    assert len(undone_ids(parent.pk)) == 1
    assert undone_ids(parent.pk)[0] > max(undone_ids(kid.pk)[0] for kid in done_kids)
    (parent_undo,) = revert_steps(parent.pk)
    last_child_undo = max(step.ended_at for kid in done_kids for step in revert_steps(kid.pk))
    assert parent_undo.started_at >= last_child_undo
    assert settled_lines(parent) == [
        "All 4 child jobs have settled; queued again.",  # its run
        "All 4 child jobs have settled; its revert goes on.",  # its revert, woken once
    ]
    summary = children_summary(parent)
    assert (summary["overall"], summary["by_status"]) == ("failed", {"reverted": 3, "failed": 1})


@pytest.mark.django_db
def test_a_failed_child_revert_fails_the_parent_revert_until_it_is_retried():
    """One child's revert fails: the parent's revert fails with ``child_revert_failed`` without running
    its own revert. Reverting the parent again as it is fails the same way; once the child's revert is
    retried (``retry()`` re-runs a failed revert), reverting the parent again ends ``reverted``."""
    parent = fan_out([{}, {"revert_failures": 1}, {}])
    drain()
    kids = children_of(parent)

    revert(parent)
    drain()

    parent = fresh(parent)
    stubborn = fresh(kids[1])
    assert (stubborn.status, stubborn.phase, stubborn.error_code) == (
        Status.FAILED,
        Phase.REVERT,
        "revert_failed",
    )
    assert [fresh(kid).status for kid in kids] == ["reverted", "failed", "reverted"]
    assert (parent.status, parent.phase, parent.error_code) == (
        Status.FAILED,
        Phase.REVERT,
        "child_revert_failed",
    )
    assert str(stubborn.pk) in parent.error
    assert recorded(parent.pk, "revert") == 0

    revert(parent)  # the child is still failed: no use
    drain()
    parent = fresh(parent)
    assert (parent.status, parent.error_code) == (Status.FAILED, "child_revert_failed")
    assert recorded(stubborn.pk, "revert") == 1

    retry(stubborn)
    assert fresh(stubborn).status == Status.REVERTING
    revert(parent)
    drain()

    parent = fresh(parent)
    assert parent.status == Status.REVERTED, parent.error
    assert fresh(stubborn).status == Status.REVERTED
    assert recorded(stubborn.pk, "revert") == 2
    assert len(undone_ids(parent.pk)) == 1
    assert undone_ids(parent.pk)[0] > undone_ids(stubborn.pk)[0]
    assert overall_of(parent) == "failed"  # every child reverted: nothing of the family is done
