"""A job that waits between its steps while a deploy changes its kind's steps.

Version 1 of the kind builds and uploads, then waits; version 2 adds a step before them
("prepare"), renames "upload" to "upload_files", removes "switch" and adds "notify" after. Each
``on_version_change`` policy gives its documented outcome (docs/deploying.md): no step runs
twice, and a step that does not run is marked skipped and named in the log.
"""

from __future__ import annotations

import pytest
from django.core.checks import run_checks

from django_durajobs import Job, JobLog, describe, drain, enqueue, job
from django_durajobs.models import Worker
from django_durajobs.registry import derived_version, unregister
from django_durajobs.store import register_worker
from django_durajobs.testing import clock, step_states

pytestmark = pytest.mark.django_db

KIND = "versioned_deploy"
V1_STEPS = ["build", "upload", "switch"]
V2_STEPS = ["prepare", "build", "upload_files", "notify"]


@pytest.fixture
def calls():
    """Every step function that ran, as ``(version, step)``; the kind is forgotten afterwards."""
    ran: list[tuple[str, str]] = []
    yield ran
    unregister(KIND)


def deploy(calls, steps, policy="continue", version=None):
    """Register (again) the kind with ``steps``: each runs, then the job waits once after "upload"
    until it is resumed."""
    unregister(KIND)

    @job(KIND, steps=steps, on_version_change=policy, version=version)
    def versioned_deploy(job, ctx):
        for step_id in steps:
            ctx.step(step_id, lambda step_id=step_id: calls.append((ctx.version, step_id)))
            if step_id in ("upload", "upload_files") and ctx.resume_action != "go":
                ctx.needs_user("Switch traffic now?", actions=["go"])
        return {"started_under": ctx.version}

    return versioned_deploy


def waiting_after_upload(calls, policy="continue"):
    v1 = deploy(calls, V1_STEPS, policy)
    started, _ = enqueue(KIND)
    drain()
    started.refresh_from_db()
    assert started.status == "needs_user"
    assert started.kind_version == v1.version
    assert calls == [(v1.version, "build"), (v1.version, "upload")]
    return started, v1


def test_the_default_version_is_derived_from_the_declared_step_ids_in_order(calls):
    v1 = deploy(calls, V1_STEPS)
    assert (
        v1.version
        == derived_version(V1_STEPS)
        == deploy(calls, [("build", "Other title"), "upload", "switch"]).version
    )
    assert deploy(calls, ["upload", "build", "switch"]).version != v1.version
    assert deploy(calls, V1_STEPS, version=7).version == "7"


def test_a_kind_refuses_an_unknown_policy_or_version():
    with pytest.raises(ValueError, match="on_version_change"):
        job("bad_policy", on_version_change="ignore")(lambda job, ctx: None)
    with pytest.raises(ValueError, match="version"):
        job("bad_version", version=1.5)(lambda job, ctx: None)


def test_continue_matches_steps_by_id_skips_what_was_added_before_and_reports_what_was_removed(calls):
    started, v1 = waiting_after_upload(calls, "continue")
    v2 = deploy(calls, V2_STEPS, "continue")
    started.resume(action="go")
    drain()

    started.refresh_from_db()
    assert started.status == "done"
    assert started.kind_version == v1.version  # what it started with, for the record
    assert started.result["started_under"] == v1.version
    # build and upload ran once, under version 1; of version 2 only notify, after the job's point.
    assert calls == [(v1.version, "build"), (v1.version, "upload"), (v1.version, "notify")]
    states = dict(step_states(started))
    assert states == {
        "build": "done",
        "upload": "done",
        "switch": "skipped",
        "prepare": "skipped",
        "upload_files": "skipped",
        "notify": "done",
    }
    lines = "\n".join(JobLog.objects.filter(job=started).values_list("line", flat=True))
    assert f"Continues under version '{v2.version}' of its kind; it started under '{v1.version}'." in lines
    assert "Steps no longer in version" in lines and "switch" in lines
    assert "Step prepare skipped" in lines and "Step upload_files skipped" in lines


def test_wait_leaves_the_job_to_a_worker_with_its_version(calls, settings):
    settings.DURAJOBS = {"VERSION_WAIT_SECONDS": 30}
    started, v1 = waiting_after_upload(calls, "wait")
    with clock() as now:
        v2 = deploy(calls, V2_STEPS, "wait")
        started.resume(action="go")
        drain()
        started.refresh_from_db()
        assert started.status == "queued"
        assert started.wait_reason == f"Waiting for a worker running version '{v1.version}' of kind '{KIND}'."
        assert started.attempt == 0  # handing it on is not a try (nor was the wait)
        assert calls == [(v1.version, "build"), (v1.version, "upload")]  # nothing of version 2 ran

        # A worker of version 2 alone is running: the job's page says it waits in vain.
        Worker.objects.all().delete()
        register_worker("v2-worker", [], 1)
        assert describe(started)["version_warning"] == (
            f"No running worker has version {v1.version} of kind {KIND}."
        )

        deploy(calls, V1_STEPS, "wait")  # a worker with version 1 takes it
        register_worker("v1-worker", [], 1)
        assert describe(started)["version_warning"] is None
        now.move(30)
        drain()
    started.refresh_from_db()
    assert started.status == "done"
    assert calls == [(v1.version, "build"), (v1.version, "upload"), (v1.version, "switch")]
    assert v2.version != v1.version


def test_fail_ends_the_job_with_version_changed_and_runs_nothing_of_the_new_version(calls):
    started, v1 = waiting_after_upload(calls, "fail")
    v2 = deploy(calls, V2_STEPS, "fail")
    started.resume(action="go")
    drain()
    started.refresh_from_db()
    assert (started.status, started.error_code) == ("failed", "version_changed")
    assert repr(v1.version) in started.error and repr(v2.version) in started.error
    assert calls == [(v1.version, "build"), (v1.version, "upload")]
    # A retry under the same code fails again: the rule does not wear off.
    started.retry()
    drain()
    started.refresh_from_db()
    assert (started.status, started.error_code) == ("failed", "version_changed")


@pytest.mark.parametrize("policy", ["continue", "wait", "fail"])
def test_a_job_that_finished_no_step_takes_the_running_version(calls, policy):
    deploy(calls, V1_STEPS, policy)
    queued, _ = enqueue(KIND)
    v2 = deploy(calls, V2_STEPS, policy)
    drain()
    queued.refresh_from_db()
    assert queued.status == "needs_user"
    assert queued.kind_version == v2.version
    assert calls == [(v2.version, "prepare"), (v2.version, "build"), (v2.version, "upload_files")]


def test_a_job_from_before_versions_were_recorded_takes_the_running_one(calls):
    started, v1 = waiting_after_upload(calls, "fail")
    Job.objects.filter(pk=started.pk).update(kind_version="")
    v2 = deploy(calls, V2_STEPS, "fail")
    started.resume(action="go")
    drain()
    started.refresh_from_db()
    assert started.kind_version == v2.version
    assert started.status == "done"


def test_describe_shows_the_version_a_job_started_with(calls):
    started, v1 = waiting_after_upload(calls)
    summary = describe(started)
    assert summary["kind_version"] == v1.version
    assert summary["version_warning"] is None  # no worker runs at all: nothing to compare with


def test_manage_py_check_warns_of_a_removed_step_that_waiting_jobs_have_not_run(calls):
    waiting_after_upload(calls)
    assert [m for m in run_checks(databases=["default"]) if m.id == "durajobs.W002"] == []
    deploy(calls, V2_STEPS)
    [warning] = [m for m in run_checks(databases=["default"]) if m.id == "durajobs.W002"]
    assert warning.msg == (
        f"Kind '{KIND}' no longer declares the steps switch, which unfinished jobs have not run yet."
    )
