"""``manage.py jobs`` against real jobs in the database: each command, its ``--json`` read back,
and refused operations (``CommandError`` with exit status 1, the ``JobError``'s message and code).

The commands run in-process here (``call_command``); tests/e2e/test_cli.py runs them as real
``manage.py`` processes, with and without rich, and watches a job a worker runs.
"""

from __future__ import annotations

import json
from io import StringIO

import pytest
from django.contrib.auth import get_user_model
from django.core.management import CommandError, call_command

from django_durajobs import Job, Status, drain, enqueue, store
from django_durajobs.models import Worker
from tests.factories import JobFactory

pytestmark = pytest.mark.django_db


def jobs(*args: str) -> str:
    out = StringIO()
    call_command("jobs", *args, stdout=out)
    return out.getvalue()


def jobs_json(*args: str):
    return json.loads(jobs(*args, "--json"))


def refused(*args: str) -> CommandError:
    with pytest.raises(CommandError) as caught:
        jobs(*args)
    assert caught.value.returncode == 1
    return caught.value


# list ------------------------------------------------------------------------------------------


def test_list_filters_by_status_kind_queue_and_parent():
    parent = JobFactory(kind="cli_steps", status=Status.DONE)
    child = JobFactory(kind="cli_steps", status=Status.FAILED, parent=parent, error="boom")
    queued = JobFactory(kind="cli_question", status=Status.QUEUED, queue="slow")

    assert [row["id"] for row in jobs_json("list")] == [queued.pk, child.pk, parent.pk]
    assert [row["id"] for row in jobs_json("list", "--status", "failed", "--status", "done")] == [
        child.pk,
        parent.pk,
    ]
    assert [row["id"] for row in jobs_json("list", "--kind", "cli_question")] == [queued.pk]
    assert [row["id"] for row in jobs_json("list", "--queue", "slow")] == [queued.pk]
    assert [row["id"] for row in jobs_json("list", "--parent", str(parent.pk))] == [child.pk]


def test_list_rows_have_describes_keys_for_the_job_itself():
    job, _ = enqueue("cli_steps", subject={"n": 1})
    [row] = jobs_json("list")
    described = job.describe()
    for key in ("id", "kind", "label", "status", "progress", "attempt", "can_cancel", "eta_unknown_reason"):
        assert row[key] == described[key]
    assert "steps" not in row and "log" not in row


@pytest.mark.parametrize(
    ("filters", "expected"),
    [
        (["--subject", "site=web-1"], {"text"}),
        (["--subject", "site_id:=7"], {"number"}),
        (["--subject", "site_id=7"], {"number as text"}),
        (["--subject", "server.name=db"], {"nested"}),
        (["--subject", '{"server": {"name": "db"}, "on": true}'], {"nested"}),
        (["--subject", "on:=true"], {"nested"}),
        (["--subject", "gone:=null"], {"null"}),
        (["--subject", "site=web-1", "--subject", "site_id:=7"], set()),
    ],
)
def test_list_filters_by_what_the_subject_contains(filters, expected):
    subjects = {
        "text": {"site": "web-1"},
        "number": {"site_id": 7},
        "number as text": {"site_id": "7"},
        "nested": {"server": {"name": "db", "port": 5432}, "on": True},
        "null": {"gone": None},
    }
    ids = {JobFactory(kind="cli_steps", subject=subject).pk: name for name, subject in subjects.items()}

    assert {ids[row["id"]] for row in jobs_json("list", *filters)} == expected


def test_list_limit_says_there_are_more():
    for _ in range(3):
        JobFactory(kind="cli_steps")

    assert len(jobs_json("list", "--limit", "2")) == 2
    assert "Only the newest 2 are shown" in jobs("list", "--limit", "2", "--plain")


def test_list_plain_table_shows_each_job_and_its_error():
    failed = JobFactory(kind="cli_steps", status=Status.FAILED, error="disk full", error_code="failed")

    text = jobs("list", "--plain")

    header, rule, row = text.splitlines()[:3]
    assert header.split() == ["ID", "Kind", "Label", "Status", "Progress", "Attempt", "Updated", "Note"]
    assert set(rule.replace(" ", "")) == {"-"}
    assert row.startswith(f"{failed.pk}  ") and "failed" in row and "disk full" in row


def test_list_refuses_an_unknown_status_and_a_bad_subject():
    assert "No status ['finished']" in str(refused("list", "--status", "finished"))
    with pytest.raises(CommandError, match="none of KEY=TEXT"):
        jobs("list", "--subject", "nothing")
    with pytest.raises(CommandError, match="text, numbers, true, false and null"):
        jobs("list", "--subject", "tags:=[1, 2]")


# show ------------------------------------------------------------------------------------------


def test_show_json_is_describe_redacted():
    job, _ = enqueue("cli_steps")
    drain()

    shown = jobs_json("show", str(job.pk))

    assert shown == json.loads(json.dumps(job.describe()))
    fetch = shown["steps"][0]
    assert fetch["result"]["password"] != "hunter2" and "hunter2" not in json.dumps(shown)


def test_show_plain_has_the_summary_steps_and_log():
    job, _ = enqueue("cli_steps", subject={"fail": True})
    drain()

    text = jobs("show", str(job.pk), "--plain")

    assert f"#{job.pk} CLI: three steps (cli_steps)" in text
    assert "Error: " in text and "the finish broke" in text
    assert "Steps" in text and "Fetch the thing" in text and "Finish" in text
    assert "Log" in text
    assert "hunter2" not in text


def test_show_refuses_a_missing_job_and_a_bad_id():
    assert "Job 999999 does not exist. (job_not_found)" == str(refused("show", "999999"))
    assert "(invalid_input)" in str(refused("show", "seven"))


# operations ------------------------------------------------------------------------------------


def test_resume_answers_a_question_with_data_and_records_the_user():
    user = get_user_model().objects.create_user("alice")
    job, _ = enqueue("cli_question")
    drain()

    out = jobs("resume", str(job.pk), "--action", "approve", "--data", '{"note": "ok"}', "--by", "alice")
    drain()

    assert f"Job {job.pk} is now queued." in out
    job.refresh_from_db()
    assert job.status == Status.DONE and job.result == {"answer": "approve", "data": {"note": "ok"}}
    assert job.log_lines.filter(line__contains=f"by {user.username}").exists()


def test_a_question_is_not_resumed_without_an_answer():
    job, _ = enqueue("cli_question")
    drain()

    error = refused("resume", str(job.pk))

    assert "resume it with one of its answers: approve, decline. (invalid_input)" in str(error)
    assert Job.objects.get(pk=job.pk).status == Status.NEEDS_USER


def test_an_operation_records_the_operating_system_user_by_default():
    job = JobFactory(kind="cli_steps", status=Status.QUEUED)

    jobs("pause", str(job.pk))

    assert job.log_lines.filter(line__contains="(manage.py jobs)").exists()


def test_by_names_an_existing_user_only():
    job = JobFactory(kind="cli_steps", status=Status.QUEUED)

    with pytest.raises(CommandError, match="No user is named 'nobody'"):
        jobs("cancel", str(job.pk), "--by", "nobody")
    assert Job.objects.get(pk=job.pk).status == Status.QUEUED


@pytest.mark.parametrize(
    ("operation", "status", "after"),
    [
        ("retry", Status.FAILED, Status.QUEUED),
        ("pause", Status.QUEUED, Status.PAUSED),
        ("resume", Status.PAUSED, Status.QUEUED),
        ("cancel", Status.QUEUED, Status.CANCELLED),
        ("revert", Status.DONE, Status.REVERTING),
    ],
)
def test_each_operation_changes_the_job_and_json_describes_it(operation, status, after):
    job = JobFactory(kind="cli_steps", status=status)

    shown = jobs_json(operation, str(job.pk))

    assert shown["id"] == job.pk and shown["status"] == after
    assert Job.objects.get(pk=job.pk).status == after


@pytest.mark.parametrize(
    ("operation", "status", "code"),
    [
        ("retry", Status.DONE, "job_not_retryable"),
        ("pause", Status.DONE, "job_not_pausable"),
        ("resume", Status.QUEUED, "job_not_resumable"),
        ("cancel", Status.CANCELLED, "job_not_cancellable"),
        ("revert", Status.QUEUED, "job_not_revertible"),
    ],
)
def test_a_refused_operation_says_why_and_changes_nothing(operation, status, code):
    job = JobFactory(kind="cli_steps", status=status)

    error = refused(operation, str(job.pk))

    assert str(error).endswith(f"({code})") and f"Job {job.pk} is {status}" in str(error)
    assert Job.objects.get(pk=job.pk).status == status


def test_cancel_of_a_running_job_says_it_stops_at_its_next_step():
    job = JobFactory(kind="cli_steps", status=Status.RUNNING, locked_by="w", lease_token="t")

    assert "it stops at its next step" in jobs("cancel", str(job.pk))
    assert Job.objects.get(pk=job.pk).cancel_requested


# stats -----------------------------------------------------------------------------------------


def test_stats_counts_by_status_and_queue_with_lag_and_workers():
    from django.utils import timezone

    now = timezone.now()
    old = JobFactory(kind="cli_steps", status=Status.QUEUED, next_run_at=now - timezone.timedelta(minutes=5))
    JobFactory(kind="cli_steps", status=Status.QUEUED, queue="slow", next_run_at=now)
    JobFactory(kind="cli_steps", status=Status.QUEUED, next_run_at=now + timezone.timedelta(hours=1))
    JobFactory(kind="cli_steps", status=Status.DONE)
    JobFactory(
        kind="cli_steps", status=Status.RUNNING, locked_by="host:1:abc", locked_at=now, lease_token="t"
    )
    gone = now - timezone.timedelta(hours=2)
    JobFactory(
        kind="cli_steps", status=Status.RUNNING, locked_by="lost:2:def", locked_at=gone, lease_token="u"
    )
    # The workers registered themselves; the lost one was last seen two hours ago.
    store.register_worker("host:1:abc", ["default"], 4)
    store.register_worker("lost:2:def", ["default"], 1)
    Worker.objects.filter(worker_id="lost:2:def").update(last_seen_at=gone)

    stats = jobs_json("stats")

    assert stats["total"] == 6
    assert stats["by_status"] == {"done": 1, "queued": 3, "running": 2}
    assert stats["by_queue"] == {"default": {"done": 1, "queued": 2, "running": 2}, "slow": {"queued": 1}}
    assert set(stats["due"]) == {"default", "slow"} and stats["due"]["default"]["jobs"] == 1
    assert 290 < stats["due"]["default"]["oldest_lag_seconds"] < 400
    assert stats["oldest_due"]["id"] == old.pk
    assert [(worker["worker_id"], worker["jobs"], worker["stale"]) for worker in stats["workers"]] == [
        ("host:1:abc", 1, False)
    ]

    text = jobs("stats", "--plain")
    assert "Jobs by queue and status" in text and "host:1:abc" in text and f"#{old.pk}" in text


def test_stats_of_an_empty_system():
    stats = jobs_json("stats")

    assert stats["total"] == 0 and stats["oldest_due"] is None and stats["workers"] == []
    assert "No job is due." in jobs("stats", "--plain")
