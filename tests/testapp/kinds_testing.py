"""Job kinds for the tests of ``django_durajobs.testing`` (tests/test_testing_helpers.py).

Each step function records a ``SideEffect`` row named ``testing:<job id>:<step>`` when it really
runs, so a test counts how often it ran.

- ``testing_flaky``: step ``fetch`` raises ``TimeoutError`` (retryable) on the job's first
  ``subject["failures"]`` tries, then step ``save``; 3 tries, backoff 30 s then 60 s.
- ``testing_refund``: step ``check``, then asks "Refund order N?" (``approve``/``decline``);
  approved, step ``pay`` runs. Its revert has one step, ``take_back``.
- ``testing_broken``: step ``prepare``, then step ``send`` raises ``ValueError``: it fails.
- ``testing_timed``: waits (``wait_external``) until ``subject["minutes"]`` after it was
  created, then step ``publish``.
- ``testing_later``: ``ctx.retry_later`` until ``subject["seconds"]`` after it was created,
  then step ``publish``.
- ``testing_restless``: ``ctx.retry_later(0)`` forever.
- ``testing_parent``: step ``fan_out`` enqueues one ``testing_child`` per entry of
  ``subject["children"]`` (its subject), waits for them, then step ``report``.
- ``testing_child``: step ``work`` (returning ``subject["value"]``); with
  ``subject["wait_minutes"]`` it first waits that long after it was created.
"""

from __future__ import annotations

from datetime import timedelta

from django.utils import timezone

from django_durajobs import job
from tests.testapp.models import SideEffect


def runs_of(job_id: int, step: str) -> int:
    """How often the function of ``step`` really ran for the job."""
    return SideEffect.objects.filter(name=f"testing:{job_id}:{step}").count()


def recording(job_obj, step: str, value=None):
    def run():
        SideEffect.objects.create(name=f"testing:{job_obj.pk}:{step}")
        return value

    return run


@job(
    "testing_flaky",
    title="Testing: flaky fetch",
    steps=[("fetch", "Fetch"), ("save", "Save")],
    max_attempts=3,
    backoff_base=30,
    retryable=lambda exc: isinstance(exc, TimeoutError),
)
def testing_flaky(job, ctx):
    def fetch():
        SideEffect.objects.create(name=f"testing:{job.pk}:fetch")
        if ctx.attempt <= job.subject.get("failures", 0):
            raise TimeoutError(f"Try {ctx.attempt} timed out")
        return {"rate": 1.08}

    rate = ctx.step("fetch", fetch)
    ctx.step("save", recording(job, "save", rate))
    return rate


@job("testing_refund", title="Testing: refund", steps=[("check", "Check"), ("pay", "Pay")])
def testing_refund(job, ctx):
    ctx.step("check", recording(job, "check"))
    if not ctx.resume_action:
        ctx.needs_user(f"Refund order {job.subject['order']}?", ["approve", "decline"])
    if ctx.resume_action == "decline":
        return {"refunded": False}
    ctx.step("pay", recording(job, "pay", ctx.resume_data))
    return {"refunded": True}


@testing_refund.revert
def undo_testing_refund(job, ctx):
    ctx.step("take_back", recording(job, "take_back"))


@job("testing_broken", title="Testing: broken", steps=[("prepare", "Prepare"), ("send", "Send")])
def testing_broken(job, ctx):
    ctx.step("prepare", recording(job, "prepare"))

    def send():
        raise ValueError("The mail server refused the message")

    ctx.step("send", send)


@job("testing_timed", title="Testing: timed wait", steps=[("publish", "Publish")])
def testing_timed(job, ctx):
    ready_at = job.created_at + timedelta(minutes=job.subject["minutes"])
    if timezone.now() < ready_at:
        ctx.wait_external("DNS record not visible yet", resume_at=ready_at)
    ctx.step("publish", recording(job, "publish"))


@job("testing_later", title="Testing: retry later", steps=[("publish", "Publish")])
def testing_later(job, ctx):
    ready_at = job.created_at + timedelta(seconds=job.subject["seconds"])
    if timezone.now() < ready_at:
        ctx.retry_later(ready_at - timezone.now(), "Not yet")
    ctx.step("publish", recording(job, "publish"))


@job("testing_restless", title="Testing: never rests")
def testing_restless(job, ctx):
    ctx.retry_later(0)


@job("testing_parent", title="Testing: parent", steps=[("fan_out", "Fan out"), ("report", "Report")])
def testing_parent(job, ctx):
    def fan_out():
        for number, subject in enumerate(job.subject["children"]):
            ctx.enqueue_child("testing_child", str(number), subject=subject)

    ctx.step("fan_out", fan_out)
    summary = ctx.wait_for_children()
    return ctx.step("report", recording(job, "report", summary["overall"]))


@job("testing_child", title="Testing: child", steps=[("work", "Work")])
def testing_child(job, ctx):
    minutes = job.subject.get("wait_minutes")
    if minutes and timezone.now() < job.created_at + timedelta(minutes=minutes):
        ctx.wait_external("Not yet", resume_at=job.created_at + timedelta(minutes=minutes))
    return ctx.step("work", recording(job, "work", job.subject.get("value")))
