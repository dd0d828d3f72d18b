"""Job kinds for the event tests (tests/integration/test_events.py, tests/e2e/test_events_fleet.py).

Every run records what it did as ``SideEffect`` rows named ``events:<job id>:<what>``, so a test
counts, across processes, how often a job's run was entered and each of its steps ran.

- ``event_waiter``: step ``before``, then ``ctx.wait_for_event(subject["name"],
  timeout=subject.get("timeout"))``, then step ``after``; returns ``{"payload": <payload>}``. With
  ``subject["on_timeout"] == "catch"`` a timeout is caught: step ``timed_out`` runs, then, with
  ``subject["again"]``, the job waits for the name once more (with no timeout); then
  ``{"timed_out": True, "payload": <payload of the second wait, or None>}``. ``subject["fail_after"]``:
  the ``after`` step raises on its first run (so the job is retried and re-entered past its wait).
  ``subject["send_as_it_parks"]``: the event is sent (with that payload) after the run found it
  unsent and before its wait is written, as a sender racing the waiter would. Its run records
  ``run`` each time it is entered.
- ``event_racer``: for the fleet test. Waits for ``subject["name"]``, then an ``atomic=True`` step
  writes a ``Ledger`` row for the job: its unique constraint proves it resumed past the wait once.
"""

from __future__ import annotations

from django_durajobs import EventTimeout, job, send_event
from tests.testapp.models import Ledger, SideEffect


def effect(job_id: int, what: str) -> str:
    return f"events:{job_id}:{what}"


def record(job_obj, what: str) -> None:
    SideEffect.objects.create(name=effect(job_obj.pk, what))


def recorded(job_id: int, what: str) -> int:
    return SideEffect.objects.filter(name=effect(job_id, what)).count()


@job(
    "event_waiter",
    title="Wait for an event",
    steps=[("before", "Before"), ("after", "After")],
    max_attempts=2,
    retryable=lambda exc: isinstance(exc, RuntimeError),
    backoff_base=0.01,
)
def event_waiter(job_obj, ctx):
    subject = job_obj.subject
    record(job_obj, "run")
    ctx.step("before", lambda: record(job_obj, "before"))
    try:
        payload = ctx.wait_for_event(subject["name"], timeout=subject.get("timeout"))
    except EventTimeout:
        if subject.get("on_timeout") != "catch":
            raise
        ctx.step("timed_out", lambda: record(job_obj, "timed_out"))
        again = ctx.wait_for_event(subject["name"]) if subject.get("again") else None
        return {"timed_out": True, "payload": again}
    except BaseException:  # the wait itself: the job stops here until the event comes
        if "send_as_it_parks" in subject:
            send_event(subject["name"], subject["send_as_it_parks"])
        raise

    def after():
        record(job_obj, "after")
        if subject.get("fail_after") and recorded(job_obj.pk, "after") == 1:
            raise RuntimeError("the first try of the after step fails")

    ctx.step("after", after)
    return {"payload": payload}


@job("event_racer", title="Race an event's sender")
def event_racer(job_obj, ctx):
    record(job_obj, "run")
    payload = ctx.wait_for_event(job_obj.subject["name"])
    ctx.step(
        "resumed", lambda: Ledger.objects.create(job_id=job_obj.pk, worker_id=ctx.worker_id).pk, atomic=True
    )
    return {"payload": payload}
