"""``rerun(job, from_step=…)``: a new job that reuses the steps before the chosen one.

A five-step job fails at step 3 (a bug); after the fix, a rerun from step 3 calls steps 3 to 5
once each and never steps 1 and 2, and the failed job stays as it was. Refusals: a job not over,
a reverted one, a step before the chosen one that never finished, an unknown step, a kind that
says no. The admin's action and the CLI: tests/integration/test_reruns_admin.py.
"""

from __future__ import annotations

from io import StringIO

import pytest
from django.core.management import CommandError, call_command

from django_durajobs import Job, JobError, JobLog, drain, enqueue, job, rerun
from django_durajobs.registry import unregister
from django_durajobs.testing import step_states
from tests.admin_pages import change_url, history_of, logged_in, messages_of, post_action, staff_user

pytestmark = pytest.mark.django_db

STEPS = ["one", "two", "three", "four", "five"]


@pytest.fixture
def five_steps():
    """The kind ``five_steps``: each step records its call and returns its name and the subject;
    step ``three`` raises while ``bug`` is set."""
    state = {"calls": [], "bug": True}

    def call(step_id, subject):
        state["calls"].append(step_id)
        if step_id == "three" and state["bug"]:
            raise RuntimeError("bug in three")
        return {"step": step_id, "n": subject["n"]}

    @job("five_steps", steps=STEPS)
    def five_steps(job, ctx):
        results = [ctx.step(step_id, lambda step_id=step_id: call(step_id, job.subject)) for step_id in STEPS]
        return {"from": [result["step"] for result in results]}

    @five_steps.revert
    def undo(job, ctx):
        ctx.step("undo", lambda: None)

    yield state
    unregister("five_steps")


def failed_at_three(five_steps):
    original, _ = enqueue("five_steps", subject={"n": 7}, label="Five steps for 7")
    drain()
    original.refresh_from_db()
    assert original.status == "failed"
    assert five_steps["calls"] == ["one", "two", "three"]
    five_steps["calls"].clear()
    five_steps["bug"] = False
    return original


def test_a_rerun_from_step_three_reuses_one_and_two_and_runs_three_to_five_once(five_steps, admin_user):
    original = failed_at_three(five_steps)
    before = (original.status, original.error, list(step_states(original)))

    again = rerun(original, from_step="three", by=admin_user)
    assert (again.rerun_of_id, again.status, again.kind) == (original.pk, "queued", "five_steps")
    assert (again.subject, again.label, again.created_by_id) == ({"n": 7}, "Five steps for 7", admin_user.pk)
    drain()

    again.refresh_from_db()
    assert again.status == "done"
    assert five_steps["calls"] == ["three", "four", "five"]
    assert again.result == {"from": STEPS}
    assert dict(step_states(again)) == dict.fromkeys(STEPS, "done")
    original.refresh_from_db()
    assert (original.status, original.error, list(step_states(original))) == before
    assert list(original.reruns.all()) == [again]
    logged = JobLog.objects.filter(job=original).values_list("line", flat=True)
    assert f"Rerun from step three as job {again.pk}, by {admin_user.username}." in logged
    assert JobLog.objects.filter(
        job=again, line=f"Rerun of job {original.pk} from step three, by admin."
    ).exists()


def test_a_done_job_reruns_from_its_first_step_entirely(five_steps):
    five_steps["bug"] = False
    original, _ = enqueue("five_steps", subject={"n": 1})
    drain()
    five_steps["calls"].clear()
    again = Job.objects.get(pk=original.pk).rerun(from_step="one")
    drain()
    again.refresh_from_db()
    assert (again.status, five_steps["calls"]) == ("done", STEPS)


def test_a_rerun_is_refused_where_the_steps_before_cannot_be_trusted(five_steps):
    original = failed_at_three(five_steps)
    with pytest.raises(JobError) as unknown:
        rerun(original, from_step="six")
    assert unknown.value.code == "invalid_input"
    with pytest.raises(JobError) as unfinished:
        rerun(original, from_step="four")  # three never finished
    assert unfinished.value.code == "job_not_rerunnable"
    assert "three" in str(unfinished.value)

    waiting, _ = enqueue("five_steps", subject={"n": 2}, initial_status="paused")
    with pytest.raises(JobError) as not_over:
        rerun(waiting, from_step="one")
    assert not_over.value.code == "job_not_rerunnable"

    original.revert()
    drain()
    original.refresh_from_db()
    assert original.status == "reverted"
    with pytest.raises(JobError) as reverted:
        rerun(original, from_step="three")
    assert reverted.value.code == "job_not_rerunnable"
    assert Job.objects.filter(rerun_of=original).count() == 0


def test_a_kind_can_say_its_jobs_cannot_be_rerun():
    @job("no_reruns", steps=["only"], rerunnable=False)
    def no_reruns(job, ctx):
        ctx.step("only", lambda: 1)

    try:
        original, _ = enqueue("no_reruns")
        drain()
        with pytest.raises(JobError) as refused:
            rerun(original, from_step="only")
        assert refused.value.code == "job_not_rerunnable"
    finally:
        unregister("no_reruns")


# The admin's action and the CLI ---------------------------------------------------------------


def test_the_admin_action_asks_for_the_step_then_reruns_from_it(five_steps, admin_client):
    original = failed_at_three(five_steps)
    asking = post_action(admin_client, "rerun_jobs", [original])
    assert asking.status_code == 200
    assert b'<option value="three">' in asking.content
    assert not Job.objects.filter(rerun_of=original).exists()

    done = post_action(admin_client, "rerun_jobs", [original], from_step="three")
    again = Job.objects.get(rerun_of=original)
    [message] = messages_of(done)
    link = f'<a href="{change_url(again)}">#{again.pk}</a>'
    assert message == f"Job {original.pk} runs again from step three as job {link}."
    assert history_of(again).get().change_message == f"rerun of {original.pk}"
    drain()
    assert five_steps["calls"] == ["three", "four", "five"]


def test_the_admin_action_says_why_it_refuses_and_is_only_for_operators(
    five_steps, admin_client, django_user_model
):
    viewer_client = logged_in(staff_user(django_user_model, "vera-viewer", "view_job"))
    original = failed_at_three(five_steps)
    refused = post_action(admin_client, "rerun_jobs", [original], from_step="<b>four</b>")
    assert messages_of(refused) == [
        f"Job {original.pk} has no step '<b>four</b>'; its steps are one, two, three, four, five."
    ]
    forbidden = post_action(viewer_client, "rerun_jobs", [original], from_step="three")
    assert forbidden.status_code in (200, 302, 403)
    assert not Job.objects.filter(rerun_of=original).exists()


def test_manage_py_jobs_rerun_reruns_from_the_step_or_exits_1_with_the_refusal(five_steps):
    original = failed_at_three(five_steps)
    with pytest.raises(CommandError) as refused:
        call_command("jobs", "rerun", str(original.pk), "--from", "four", stdout=StringIO())
    assert refused.value.returncode == 1
    assert "(job_not_rerunnable)" in str(refused.value)

    out = StringIO()
    call_command("jobs", "rerun", str(original.pk), "--from", "three", stdout=out)
    again = Job.objects.get(rerun_of=original)
    assert out.getvalue().strip() == f"Job {again.pk} reruns job {original.pk}; it is queued."
    assert JobLog.objects.filter(job=again, line__endswith="(manage.py jobs).").exists()
