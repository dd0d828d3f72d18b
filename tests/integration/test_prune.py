"""Pruning: families of old ended jobs go, with their steps and log; anything still going, or
recent, stays, and so does every family with such a member. In batches, in bounded memory."""

from __future__ import annotations

import time
import tracemalloc
from datetime import timedelta
from io import StringIO

import pytest
from django.core.management import CommandError, call_command
from django.db.models.signals import post_delete
from django.utils import timezone

from django_durajobs import Job, JobError, JobLog, JobStep, Schedule, Status, prune
from django_durajobs.store import delete_jobs
from tests.factories import JobFactory, insert_copies

pytestmark = pytest.mark.django_db


def ended(days_ago: float, status: str = Status.DONE, **fields) -> Job:
    return JobFactory(status=status, ended_at=timezone.now() - timedelta(days=days_ago), **fields)


def left() -> set[int]:
    return set(Job.objects.values_list("pk", flat=True))


def prunejobs(*args: str) -> str:
    out = StringIO()
    call_command("prunejobs", *args, stdout=out)
    return out.getvalue()


def test_prunejobs_deletes_old_ended_jobs_with_their_steps_and_log():
    old = [ended(40, status) for status in (Status.DONE, Status.FAILED, Status.CANCELLED, Status.REVERTED)]
    JobLog.objects.create(job=old[0], line="old")
    steps = JobStep.objects.filter(job__in=old).count()
    recent = ended(5)
    running = JobFactory(status=Status.RUNNING, locked_by="w", lease_token="t", locked_at=timezone.now())

    out = prunejobs("--older-than", "30d")

    assert "Deleted 4 jobs in 4 families." in out
    assert f"{steps} steps" in out and "1 log lines" in out
    assert not JobStep.objects.filter(job_id__in=[job.pk for job in old]).exists()
    assert not JobLog.objects.filter(job_id=old[0].pk).exists()
    assert left() == {recent.pk, running.pk}


@pytest.mark.parametrize(
    ("age", "kept_days"),
    [("30d", [5, 29]), ("2w", [5]), ("36h", []), ("90m", []), ("45s", [])],
)
def test_older_than_takes_seconds_minutes_hours_days_and_weeks(age, kept_days):
    by_days = {days: ended(days).pk for days in (5, 29, 40)}

    prunejobs("--older-than", age)

    assert left() == {by_days[days] for days in kept_days}


def test_days_is_the_same_as_older_than_in_days():
    ended(40)
    recent = ended(20)

    assert "Deleted 1 job in 1 families." in prunejobs("--days", "30")
    assert left() == {recent.pk}


def test_status_and_kind_choose_families_by_their_root():
    done = ended(40, kind="cli_steps")
    failed = ended(40, Status.FAILED, kind="cli_steps")
    other_kind = ended(40, kind="cli_question")
    failed_child = ended(40, Status.FAILED, kind="cli_question", parent=done)

    prunejobs("--older-than", "30d", "--status", "failed", "--kind", "cli_steps")
    assert left() == {done.pk, other_kind.pk, failed_child.pk}

    prunejobs("--older-than", "30d", "--status", "done", "--kind", "cli_steps")
    assert left() == {other_kind.pk}
    assert failed.pk not in left()


def test_a_family_goes_whole_only_when_every_member_ended_long_ago():
    open_parent = ended(60)
    open_child = JobFactory(status=Status.QUEUED, parent=open_parent)
    deep = ended(60)
    deep_child = ended(60, parent=deep)
    deep_grandchild = JobFactory(status=Status.NEEDS_USER, parent=deep_child)
    young = ended(60)
    young_child = ended(1, parent=young)
    finished = ended(60)
    finished_child = ended(60, parent=finished)
    ended(60, Status.FAILED, parent=finished_child)
    lone_old_child = ended(60, parent=young_child)

    out = prunejobs("--older-than", "30d")

    assert "Deleted 3 jobs in 1 families." in out
    assert "Kept 3 old families" in out
    assert left() == {
        open_parent.pk,
        open_child.pk,
        deep.pk,
        deep_child.pk,
        deep_grandchild.pk,
        young.pk,
        young_child.pk,
        lone_old_child.pk,
    }


def test_a_child_is_never_pruned_while_its_parent_stays():
    parent = JobFactory(status=Status.RUNNING, locked_by="w", lease_token="t", locked_at=timezone.now())
    children = {ended(60, Status.FAILED, parent=parent).pk, ended(60, parent=parent).pk}

    prunejobs("--older-than", "30d")

    assert left() == {parent.pk, *children}
    assert parent.children_summary()["overall"] == "partial"


def test_dry_run_counts_what_a_run_deletes_and_deletes_nothing():
    for _ in range(3):
        family = ended(40)
        ended(40, parent=family)
    ended(40)
    open_family = ended(40)
    ended(40, parent=open_family)
    JobFactory(status=Status.QUEUED, parent=open_family)

    dry = prune(timedelta(days=30), dry_run=True, batch=2)
    assert Job.objects.count() == 10
    real = prune(timedelta(days=30), batch=2)

    assert (dry.families, dry.jobs, dry.kept) == (real.families, real.jobs, real.kept) == (4, 7, 1)
    assert "Would delete" in prunejobs("--older-than", "1s", "--dry-run")


@pytest.mark.parametrize(
    ("arguments", "message"),
    [
        (["--days", "-1"], "--days cannot be negative"),
        (["--status", "queued"], "Only finished jobs are pruned"),
        (["--batch", "0"], "batch must be from 1"),
    ],
)
def test_prunejobs_refuses_bad_arguments(arguments, message):
    with pytest.raises(CommandError, match=message):
        prunejobs(*arguments)


@pytest.mark.parametrize("age", ["30", "30x", "-1d", "d", "1e9w"])
def test_older_than_refuses_what_is_not_an_age(age):
    with pytest.raises(CommandError, match="older-than"):
        prunejobs("--older-than", age)


def test_prune_from_code_refuses_a_negative_age_and_unfinished_statuses():
    with pytest.raises(JobError, match="older_than") as caught:
        prune(timedelta(days=-1))
    assert caught.value.code == "invalid_input"
    with pytest.raises(JobError, match="Only finished jobs"):
        prune(timedelta(days=1), statuses=["running"])


def insert_old_jobs(count: int, *, families: int, open_families: int) -> None:
    """``count`` old done jobs, the roots copied from one in a statement: ``families`` of them
    are parents with two done children (counted in ``count``), ``open_families`` of those have a
    third, queued child. Every tenth root has a step row."""
    long_ago = timezone.now() - timedelta(days=90)

    def row(**fields) -> Job:
        return Job(kind="cli_steps", label="old", status=Status.DONE, ended_at=long_ago, **fields)

    first = row()
    first.save()
    insert_copies(first, count - 2 * families - 1)
    parents = list(Job.objects.order_by("pk").values_list("pk", flat=True)[:families])
    Job.objects.bulk_create([row(parent_id=parent) for parent in parents for _ in range(2)])
    Job.objects.bulk_create(
        [
            Job(kind="cli_steps", label="open", status=Status.QUEUED, parent_id=parent)
            for parent in parents[:open_families]
        ]
    )
    step_jobs = Job.objects.filter(parent_id__isnull=True).order_by("pk").values_list("pk", flat=True)
    JobStep.objects.bulk_create(
        [JobStep(job_id=pk, position=0, step_id="s", title="S") for pk in step_jobs[::10]]
    )


#: Old jobs to prune, in batches of 1000, and the families among them (parents with two children).
MANY_JOBS = 40_000
MANY_FAMILIES = 400


def traced_peak(read) -> int:
    """The peak of Python memory, in bytes, while ``read()`` runs."""
    tracemalloc.start()
    try:
        read()
        return tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()


@pytest.mark.slow
@pytest.mark.timeout(900)
def test_pruning_40000_old_jobs_takes_bounded_memory_and_keeps_open_families():
    """Memory grows with a batch, not with the table: pruning 40 batches takes less than reading
    the table's ids and parents at once."""
    insert_old_jobs(MANY_JOBS, families=MANY_FAMILIES, open_families=10)
    kept = set(Job.objects.filter(status=Status.QUEUED).values_list("parent_id", flat=True))
    assert len(kept) == 10
    table_peak = traced_peak(lambda: list(Job.objects.values_list("pk", "parent_id")))

    started = time.monotonic()
    results = []
    peak = traced_peak(lambda: results.append(prune(timedelta(days=30), batch=1000)))
    seconds = time.monotonic() - started
    result = results[0]

    print(
        f"pruned {result.jobs} jobs in {seconds:.1f} s, peak {peak / 2**20:.1f} MiB traced "
        f"(reading the ids: {table_peak / 2**20:.1f} MiB)"
    )
    roots = MANY_JOBS - 2 * MANY_FAMILIES
    assert result.families == roots - 10 and result.kept == 10
    assert result.jobs == MANY_JOBS - 30
    assert result.rows["django_durajobs.JobStep"] == roots // 10 - 1  # a kept root has one
    assert Job.objects.filter(parent_id__isnull=True).count() == 10
    assert set(Job.objects.filter(parent_id__isnull=True).values_list("pk", flat=True)) == kept
    assert Job.objects.count() == 10 * 4
    # A batch's rows, not the table's.
    assert peak < table_peak / 2, f"peak {peak / 2**20:.1f} MiB, the table's ids {table_peak / 2**20:.1f} MiB"


def test_what_points_at_a_pruned_job_from_outside_its_family_lets_go():
    """A rerun and a schedule that stay keep no reference to a pruned job (``SET NULL``)."""
    old = ended(40)
    rerun = ended(1, rerun_of=old)
    schedule = Schedule.objects.create(name="nightly", kind="cli_steps", every_seconds=60, last_job=old)

    assert prune(timedelta(days=30)).jobs == 1

    rerun.refresh_from_db()
    schedule.refresh_from_db()
    assert (rerun.rerun_of_id, schedule.last_job_id) == (None, None)


def test_delete_jobs_takes_a_parent_and_its_child_named_together_and_a_grandchild():
    parent = ended(1)
    child = ended(1, parent=parent)
    grandchild = ended(1, parent=child)
    JobLog.objects.create(job=grandchild, line="deep")
    other = ended(1)

    deleted = delete_jobs([parent.pk, child.pk])

    assert deleted["django_durajobs.Job"] == 3 and deleted["django_durajobs.JobLog"] == 1
    assert left() == {other.pk}


def test_a_receiver_of_deletes_is_told_of_every_pruned_job():
    """With a ``post_delete`` receiver for jobs, the jobs go through Django's deletion, which
    sends it one by one."""
    family = ended(40)
    ended(40, parent=family)
    seen = []

    def receiver(sender, instance, **kwargs):
        seen.append(instance.pk)

    post_delete.connect(receiver, sender=Job)
    try:
        result = prune(timedelta(days=30))
    finally:
        post_delete.disconnect(receiver, sender=Job)

    assert result.jobs == len(seen) == 2 and not left()
