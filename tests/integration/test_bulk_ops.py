"""Operations on many jobs at once (``ops.apply_to_many``) and the rules of ``resume()``.

The bulk form decides each job with the single operation's own decision, so a job changes in
bulk exactly as it would alone; it changes the jobs a batch at a time in a few statements, and
still cascades to children, trims long logs, announces each change and wakes parents. A job
that changes meanwhile (made to happen at the exact moment, on the real database) is decided
again on its own.
"""

from __future__ import annotations

from datetime import timedelta

import pytest
from django.db import connection
from django.utils import timezone

from django_durajobs import Job, JobError, JobLog, JobStep, ops, store
from django_durajobs.signals import job_changed
from tests.factories import JobFactory, JobStepFactory
from tests.job_states import ALL_STATUSES, OPERATIONS, build, snapshot

pytestmark = pytest.mark.django_db

# Set at the moment of the call: equal within the test's window, not to the microsecond.
RETRIED = "Retried by alice. Runs it again after its last finished step, with one more try allowed."
MOMENTS = ("next_run_at", "ended_at", "updated_at")


def log_of(job) -> list[str]:
    return list(JobLog.objects.filter(job_id=job.pk).order_by("id").values_list("line", flat=True))


def changes(before: dict, after: dict, start, end) -> dict:
    """The columns that changed and their new values; a moment set by the call just says so."""
    changed = {name: value for name, value in after.items() if value != before[name]}
    for name in MOMENTS:
        if name in changed and changed[name] is not None:
            assert start <= changed[name] <= end, name
            changed[name] = "set at the call"
    return changed


@pytest.mark.parametrize("status", ALL_STATUSES)
@pytest.mark.parametrize("op", OPERATIONS)
def test_each_job_changes_in_bulk_exactly_as_the_single_operation_changes_it(op, status):
    alone, together = build(status), build(status)
    before_alone, before = snapshot(alone), snapshot(together)
    start = timezone.now()

    try:
        getattr(ops, op)(alone.pk, by="alice")
    except JobError as refusal:
        refused = refusal.code
    else:
        refused = None
    outcome = ops.apply_to_many(op, [together.pk], by="alice")
    end = timezone.now()

    if refused:
        assert (outcome.changed, dict(outcome.refused)) == (0, {refused: 1})
        assert snapshot(together) == before
        return
    assert (outcome.changed, dict(outcome.refused)) == (1, {})
    assert changes(before, snapshot(together), start, end) == changes(
        before_alone, snapshot(alone), start, end
    )
    assert log_of(together) == log_of(alone)
    assert list(JobStep.objects.filter(job=together).values_list("state", "detail")) == list(
        JobStep.objects.filter(job=alone).values_list("state", "detail")
    )


def test_retry_of_many_raises_each_jobs_max_attempts_from_its_own_attempt():
    jobs = [
        JobFactory(status="failed", attempt=attempt, max_attempts=maximum)
        for attempt, maximum in ((1, 1), (3, 2), (2, 5))
    ]

    outcome = ops.apply_to_many("retry", Job.objects.all(), by="alice")

    assert outcome.changed == 3
    assert [Job.objects.get(pk=job.pk).max_attempts for job in jobs] == [2, 4, 5]


def test_cancel_of_many_cancels_their_open_children_too_and_frees_their_waiting_steps():
    parents = [
        JobFactory(kind="states_deploy", status="awaiting_external", step_states={"upload": "waiting"})
        for _ in range(2)
    ]
    queued_child = JobFactory(parent=parents[0], status="queued")
    running_child = JobFactory(parent=parents[1], status="running")
    done_child = JobFactory(parent=parents[1], status="done")
    grandchild = JobFactory(parent=queued_child, status="awaiting_external")

    outcome = ops.apply_to_many("cancel", [parent.pk for parent in parents], by="alice")

    assert outcome.changed == 2  # the selection, not what the cancel took along
    statuses = {job.pk: (job.status, job.cancel_requested) for job in Job.objects.all()}
    for job in (*parents, queued_child, grandchild):
        assert statuses[job.pk] == ("cancelled", False)
    assert statuses[running_child.pk] == ("running", True)
    assert statuses[done_child.pk] == ("done", False)
    assert not JobStep.objects.filter(job__in=parents, state="waiting").exists()
    assert "Cancelled by alice. It ends now as cancelled and will not run again." in log_of(grandchild)


def test_revert_of_many_reverts_their_done_children_that_have_a_revert():
    parents = JobFactory.create_batch(2, status="done")
    with_revert = JobFactory(parent=parents[0], status="done")
    JobStepFactory(job=with_revert, state="done")
    without_revert = JobFactory(parent=parents[1], kind="states_norevert", status="done")
    failed_child = JobFactory(parent=parents[1], status="failed")

    outcome = ops.apply_to_many("revert", Job.objects.filter(pk__in=[p.pk for p in parents]), by="alice")

    assert outcome.changed == 2
    assert Job.objects.get(pk=with_revert.pk).status == "reverting"
    assert log_of(with_revert)[-1] == (
        "Revert requested by alice. Runs its kind's revert, which undoes what its 1 finished step did."
    )
    assert Job.objects.get(pk=without_revert.pk).status == "done"
    assert Job.objects.get(pk=failed_child.pk).status == "failed"


def test_revert_by_nobody_names_each_childs_parent_in_its_log():
    parent = JobFactory(status="done")
    child = JobFactory(parent=parent, status="done")

    ops.apply_to_many("revert", [parent.pk])

    assert log_of(child)[-1].startswith(f"Revert requested by parent job {parent.pk}. Runs its kind's revert")


def test_a_job_that_moved_on_meanwhile_is_decided_again_on_its_own():
    jobs = JobFactory.create_batch(3, status="failed")
    moved_on = jobs[1]
    moved = []

    def finish_one_right_after_the_batch_is_read(execute, sql, params, many, context):
        result = execute(sql, params, many, context)
        read_for_deciding = sql.startswith("SELECT") and "actions" in sql and " IN (" in sql
        if read_for_deciding and not moved:
            moved.append(True)
            Job.objects.filter(pk=moved_on.pk).update(status="done")
        return result

    with connection.execute_wrapper(finish_one_right_after_the_batch_is_read):
        outcome = ops.apply_to_many("retry", [job.pk for job in jobs], by="alice")

    assert moved
    assert (outcome.changed, dict(outcome.refused)) == (2, {"job_not_retryable": 1})
    assert [Job.objects.get(pk=job.pk).status for job in jobs] == ["queued", "done", "queued"]
    for job in (jobs[0], jobs[2]):
        assert log_of(job).count(RETRIED) == 1  # the bulk attempt's lines were rolled back
    assert RETRIED not in log_of(moved_on)


def test_bulk_change_trims_only_the_logs_over_the_limit(settings):
    settings.DURAJOBS = {"LOG_LINES_KEPT": 5}
    long = JobFactory(status="failed")
    short = JobFactory(status="failed")
    JobLog.objects.bulk_create(JobLog(job=long, line=f"line {n}") for n in range(5))
    JobLog.objects.create(job=short, line="only line")

    ops.apply_to_many("retry", [long.pk, short.pk], by="alice")

    assert log_of(long) == ["line 1", "line 2", "line 3", "line 4", RETRIED]
    assert log_of(short) == ["only line", RETRIED]


@pytest.mark.django_db(transaction=True)
def test_each_change_is_announced_after_commit_and_a_waiting_parent_is_woken_once():
    parent = JobFactory(status="awaiting_external", waits_for_children=True, wait_reason="children")
    children = JobFactory.create_batch(3, parent=parent, status="queued")
    seen = []

    def receiver(sender, job, previous_status, status, **kwargs):
        seen.append((job.pk, previous_status, status))

    job_changed.connect(receiver, sender=Job, weak=False)
    try:
        outcome = ops.apply_to_many("cancel", [child.pk for child in children], by="alice")
    finally:
        job_changed.disconnect(receiver, sender=Job)

    assert outcome.changed == 3
    assert sorted(seen) == sorted(
        [(child.pk, "queued", "cancelled") for child in children]
        + [(parent.pk, "awaiting_external", "queued")]
    )
    parent.refresh_from_db()
    assert (parent.status, parent.waits_for_children) == ("queued", False)
    assert sum("child jobs have settled" in line for line in log_of(parent)) == 1


def test_a_queryset_is_read_in_batches_and_missing_ids_are_counted():
    JobFactory.create_batch(1_201, status="queued", declared_steps=False)
    sizes = []

    outcome = ops.apply_to_many("pause", Job.objects.all(), after_batch=lambda jobs: sizes.append(len(jobs)))

    assert sizes == [500, 500, 201]
    assert outcome.changed == 1_201
    missing = ops.apply_to_many("pause", [10**9, 10**9 + 1])
    assert (missing.changed, dict(missing.refused)) == (0, {"job_not_found": 2})


def test_an_unknown_operation_is_refused():
    with pytest.raises(JobError) as refused:
        ops.apply_to_many("explode", [])
    assert refused.value.code == "invalid_input"


# resume() and the answers a job offers ------------------------------------------------------------


def question(**extra):
    return JobFactory(
        kind="states_ask",
        status="needs_user",
        actions=[{"id": "approve", "label": "Approve"}, {"id": "reject", "label": "Reject"}],
        **extra,
    )


def test_a_question_with_offered_answers_is_not_resumed_without_one():
    job = question()
    before, log = snapshot(job), log_of(job)

    with pytest.raises(JobError) as refused:
        ops.resume(job, by="alice")

    assert refused.value.code == "invalid_input"
    assert "approve, reject" in str(refused.value)
    assert snapshot(job) == before and log_of(job) == log


@pytest.mark.parametrize(
    "spec",
    [{"status": "awaiting_external"}, {"status": "paused"}, {"status": "needs_user", "actions": None}],
    ids=["awaiting_external", "paused", "question_without_answers"],
)
def test_an_action_is_refused_when_the_job_offered_none(spec):
    job = JobFactory(**spec)
    before = snapshot(job)

    with pytest.raises(JobError) as refused:
        ops.resume(job, action="approve")

    assert refused.value.code == "invalid_input"
    assert "offers no actions" in str(refused.value)
    assert snapshot(job) == before
    assert ops.resume(job).status == "queued"  # without one it resumes


def test_bulk_resume_skips_questions_with_offered_answers():
    asking = question()
    waiting = JobFactory(status="awaiting_external")
    bare = JobFactory(status="needs_user", actions=None)

    outcome = ops.apply_to_many("resume", [asking.pk, waiting.pk, bare.pk], by="alice")

    assert (outcome.changed, dict(outcome.refused)) == (2, {"invalid_input": 1})
    assert Job.objects.get(pk=asking.pk).status == "needs_user"
    assert ops.resume(asking, action="reject").resume_action == "reject"


def test_bulk_resume_with_an_answer_applies_it_where_it_is_offered():
    asking = question()
    waiting = JobFactory(status="awaiting_external")
    JobStepFactory(job=waiting, step_id="extra", state="waiting")

    outcome = ops.apply_to_many("resume", [asking.pk, waiting.pk], by="alice", action="approve")

    assert (outcome.changed, dict(outcome.refused)) == (1, {"invalid_input": 1})
    assert Job.objects.get(pk=asking.pk).resume_action == "approve"
    assert Job.objects.get(pk=waiting.pk).status == "awaiting_external"


def test_a_timed_wait_wakes_as_before():
    job = JobFactory(status="awaiting_external", next_run_at=timezone.now() - timedelta(seconds=1))
    assert store.wake(job.pk) is True
    assert Job.objects.get(pk=job.pk).status == "queued"
    assert store.wake(job.pk) is False
