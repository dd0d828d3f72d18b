"""Named events (DESIGN.md section 9): ``send_event(name, payload)`` keeps the event once sent and
wakes every job waiting for it at once; ``ctx.wait_for_event(name, timeout=None)`` returns the
payload, at once when the event was sent before the wait began.

The module commits (``transaction=True``), as a web request and a worker do, so the wake-up made
after a send commits really runs. Kinds: ``tests/testapp/kinds_events.py``; many processes
sending and waiting at once: ``tests/e2e/test_events_fleet.py``.
"""

from __future__ import annotations

from datetime import timedelta

import pytest
import time_machine
from django.db import transaction
from django.utils import timezone

from django_durajobs import (
    Event,
    Job,
    JobError,
    Status,
    cancel,
    describe,
    drain,
    enqueue,
    pause,
    resume,
    retry,
    send_event,
)
from django_durajobs.store import prune, wake_due_waits
from tests.helpers import wait_for
from tests.job_rows import fresh, log_lines
from tests.testapp.kinds_events import recorded

pytestmark = pytest.mark.django_db(transaction=True)


#: The timeout of the waits that time out in these tests; the clock is moved past it.
TIMEOUT = 60


def past_its_timeout(job: Job):
    """The clock a second past the job's timed wait (and going on from there)."""
    return time_machine.travel(fresh(job).next_run_at + timedelta(seconds=1), tick=True)


def waiter(name: str, **subject) -> Job:
    job, _ = enqueue("event_waiter", subject={"name": name, **subject})
    return job


def test_an_event_sent_while_a_job_waits_wakes_it_at_once_with_the_payload():
    job = waiter("payment:1")
    drain()
    job = fresh(job)
    assert (job.status, job.wait_reason, job.waits_for_event) == (
        Status.AWAITING_EXTERNAL,
        "Waiting for event payment:1",
        "payment:1",
    )

    assert send_event("payment:1", {"amount": "12.50"}) is True

    job = fresh(job)
    assert (job.status, job.waits_for_event, job.wait_reason) == (Status.QUEUED, "", "")
    assert log_lines(job.pk)[-1] == "Event payment:1 was sent; queued again."
    assert drain() == 1
    job = fresh(job)
    assert (job.status, job.result) == (Status.DONE, {"payload": {"amount": "12.50"}})
    assert (recorded(job.pk, "run"), recorded(job.pk, "before"), recorded(job.pk, "after")) == (2, 1, 1)


def test_an_event_sent_before_the_wait_is_returned_at_once_and_the_job_never_waits():
    assert send_event("payment:2", [1, 2, 3]) is True
    job = waiter("payment:2")

    assert drain() == 1

    job = fresh(job)
    assert (job.status, job.result) == (Status.DONE, {"payload": [1, 2, 3]})
    assert recorded(job.pk, "run") == 1
    assert not any(line.startswith("Waiting") for line in log_lines(job.pk))


def test_the_first_send_wins_and_a_later_one_changes_nothing():
    assert send_event("signup:7", {"plan": "pro"}, by="webhook") is True
    first = Event.objects.get(name="signup:7")

    assert send_event("signup:7", {"plan": "free"}, by="someone else") is False

    again = Event.objects.get(name="signup:7")
    assert (again.payload, again.sent_at, again.sent_by) == ({"plan": "pro"}, first.sent_at, "webhook")
    job = waiter("signup:7")
    drain()
    assert fresh(job).result == {"payload": {"plan": "pro"}}


def test_an_event_sent_after_the_wait_ended_changes_nothing_for_the_job():
    job = waiter("late", timeout=TIMEOUT, on_timeout="catch")
    drain()
    with past_its_timeout(job):
        drain()
    job = fresh(job)
    assert (job.status, job.result) == (Status.DONE, {"timed_out": True, "payload": None})
    lines = log_lines(job.pk)

    assert send_event("late", "too late") is True

    assert (fresh(job).status, log_lines(job.pk)) == (Status.DONE, lines)
    assert drain() == 0


def test_one_send_wakes_fifty_waiting_jobs_in_a_bounded_number_of_statements(django_assert_max_num_queries):
    jobs = [waiter("deploy:ready") for _ in range(50)]
    drain()
    assert set(Job.objects.filter(pk__in=[j.pk for j in jobs]).values_list("status", flat=True)) == {
        Status.AWAITING_EXTERNAL
    }

    with django_assert_max_num_queries(12):
        send_event("deploy:ready", {"version": 3})

    assert set(Job.objects.filter(pk__in=[j.pk for j in jobs]).values_list("status", flat=True)) == {
        Status.QUEUED
    }
    assert drain() == 50
    for job in jobs:
        job = fresh(job)
        assert (job.status, job.result) == (Status.DONE, {"payload": {"version": 3}})
        assert (recorded(job.pk, "run"), recorded(job.pk, "after")) == (2, 1)
        assert log_lines(job.pk).count("Event deploy:ready was sent; queued again.") == 1


def test_a_rolled_back_send_stores_nothing_and_wakes_nobody():
    job = waiter("refund:9")
    drain()

    with pytest.raises(RuntimeError), transaction.atomic():
        assert send_event("refund:9", "money") is True
        raise RuntimeError("the caller's transaction fails")

    assert not Event.objects.filter(name="refund:9").exists()
    assert fresh(job).status == Status.AWAITING_EXTERNAL
    assert drain() == 0
    assert fresh(job).status == Status.AWAITING_EXTERNAL
    assert send_event("refund:9", "money") is True
    drain()
    assert fresh(job).result == {"payload": "money"}


def test_a_send_inside_a_transaction_wakes_the_waiters_when_it_commits():
    job = waiter("invoice:3")
    drain()

    with transaction.atomic():
        send_event("invoice:3", {"total": 10})
        assert fresh(job).status == Status.AWAITING_EXTERNAL

    assert fresh(job).status == Status.QUEUED


def test_a_waiter_whose_wake_up_was_lost_is_woken_by_the_workers_sweep():
    """The sending process died between its commit and its wake-up: the event is there, the job
    still waits; ``drain()`` (as a worker's housekeeping) wakes it."""
    job = waiter("lost:1")
    drain()
    Event.objects.create(name="lost:1", payload="found")  # committed, with no wake-up after it

    assert fresh(job).status == Status.AWAITING_EXTERNAL
    assert drain() == 1
    assert fresh(job).result == {"payload": "found"}


def test_a_job_that_parks_as_the_event_is_sent_looks_for_it_once_its_wait_committed():
    """The other side of the race: the event is sent after the run found it unsent and before its
    wait is written, so the sender sees nobody waiting; the job, once parked, finds the event."""
    job = waiter("race:1", send_as_it_parks="meanwhile")

    assert drain(max_jobs=1) == 1

    job = fresh(job)
    assert job.status == Status.QUEUED
    assert log_lines(job.pk)[-2:] == [
        "Waiting: Waiting for event race:1",
        "Event race:1 was sent as the job began to wait; queued again.",
    ]
    drain()
    assert fresh(job).result == {"payload": "meanwhile"}


def test_an_uncaught_timeout_fails_the_job_and_a_retry_waits_again():
    job = waiter("approval:1", timeout=TIMEOUT)
    drain()
    job = fresh(job)
    assert job.status == Status.AWAITING_EXTERNAL
    assert job.next_run_at == job.eta_at is not None

    with past_its_timeout(job):
        drain()

    job = fresh(job)
    assert (job.status, job.error_code, job.error) == (
        Status.FAILED,
        "timeout",
        "The wait for event approval:1 timed out.",
    )
    assert "The wait for event approval:1 timed out." in log_lines(job.pk)
    assert (job.waits_for_event, job.timed_out_events) == ("", None)

    retry(job)
    drain()
    assert fresh(job).status == Status.AWAITING_EXTERNAL  # waiting afresh, not failed at once
    send_event("approval:1", "yes")
    drain()
    assert fresh(job).result == {"payload": "yes"}


def test_a_caught_timeout_is_taken_again_when_the_run_is_re_entered_even_once_the_event_came():
    """The run caught the timeout, did its ``timed_out`` step and waits for the name once more; the
    event then comes. Re-entered, its first wait times out again (as it did), so the run takes the
    same way: ``timed_out`` is not run again, and the second wait gets the payload."""
    job = waiter("reminder:1", timeout=TIMEOUT, on_timeout="catch", again=True)
    drain()
    with past_its_timeout(job):
        drain()
    job = fresh(job)
    assert (job.status, job.waits_for_event, job.timed_out_events) == (
        Status.AWAITING_EXTERNAL,
        "reminder:1",
        {"reminder:1": 1},
    )
    assert job.next_run_at is None  # the second wait has no timeout

    send_event("reminder:1", "paid at last")
    drain()

    job = fresh(job)
    assert (job.status, job.result) == (Status.DONE, {"timed_out": True, "payload": "paid at last"})
    assert (recorded(job.pk, "run"), recorded(job.pk, "timed_out"), recorded(job.pk, "after")) == (3, 1, 0)


def test_an_event_sent_as_its_timeout_wakes_the_job_is_what_the_wait_returns():
    job = waiter("close:1", timeout=TIMEOUT)
    drain()
    with past_its_timeout(job):
        assert wake_due_waits() == 1  # the timeout woke it first ...
        assert send_event("close:1", "just in time") is True  # ... and the sender finds nobody waiting

        drain()

    job = fresh(job)
    assert (job.status, job.result, job.waits_for_event) == (Status.DONE, {"payload": "just in time"}, "")


def test_a_job_re_entered_after_its_wait_gets_the_payload_again_and_skips_finished_steps():
    job = waiter("ship:1", fail_after=True)
    drain()
    send_event("ship:1", {"carrier": "post"})
    drain()  # the after step fails once; the retry re-enters the run past the wait
    wait_for(lambda: drain() or fresh(job).status == Status.DONE, timeout=5)

    job = fresh(job)
    assert (job.status, job.attempt, job.result) == (Status.DONE, 2, {"payload": {"carrier": "post"}})
    assert (recorded(job.pk, "run"), recorded(job.pk, "before"), recorded(job.pk, "after")) == (3, 1, 2)


def test_a_cancelled_waiter_is_no_longer_waiting_and_a_send_leaves_it_cancelled():
    job = waiter("gone:1")
    drain()
    cancel(job)
    assert fresh(job).waits_for_event == ""

    send_event("gone:1")

    assert fresh(job).status == Status.CANCELLED


def test_a_paused_waiter_is_not_woken_and_resumed_it_waits_again():
    job = waiter("later:1")
    drain()
    pause(job)

    send_event("pending:other")
    resume(job)
    drain()

    job = fresh(job)
    assert (job.status, job.waits_for_event) == (Status.AWAITING_EXTERNAL, "later:1")
    send_event("later:1", 5)
    drain()
    assert fresh(job).result == {"payload": 5}


def test_describe_shows_the_wait_and_the_step_it_holds():
    job = waiter("visible:1")
    drain()

    summary = describe(job)

    assert (summary["status"], summary["wait_reason"], summary["can_resume"]) == (
        Status.AWAITING_EXTERNAL,
        "Waiting for event visible:1",
        True,
    )
    assert (summary["current_step"]["id"], summary["current_step"]["state"]) == ("after", "waiting")


@pytest.mark.parametrize(
    ("name", "payload", "message"),
    [
        ("", None, "An event name must be a non-blank string"),
        ("   ", None, "An event name must be a non-blank string"),
        (42, None, "An event name must be a non-blank string, not 42."),
        ("x" * 201, None, "characters long; the limit is 200"),
        ("nul\x00name", None, "holds a NUL character"),
        ("ok", float("nan"), "holds NaN or Infinity"),
        ("ok", {"blob": "x" * 100_001}, "(DURAJOBS['MAX_EVENT_PAYLOAD_BYTES'])"),
        ("ok", object(), "is not JSON-serialisable"),
        ("ok", {"text": "\x00"}, "holds a NUL character at $.text"),
    ],
)
def test_a_send_with_bad_input_is_refused_and_stores_nothing(name, payload, message):
    with pytest.raises(JobError) as refused:
        send_event(name, payload)

    assert refused.value.code == "invalid_input"
    assert message in str(refused.value)
    assert not Event.objects.exists()


def test_a_wait_with_bad_input_fails_the_job_with_a_clear_error():
    job = waiter("ok", timeout=-1)
    drain()
    job = fresh(job)
    assert (job.status, job.error_code) == (Status.FAILED, "invalid_input")
    assert "must be more than 0" in job.error


def test_pruning_deletes_the_events_older_than_the_jobs_it_prunes():
    send_event("old")
    send_event("new")
    Event.objects.filter(name="old").update(sent_at=timezone.now() - timedelta(days=40))

    prune(timedelta(days=30))

    assert list(Event.objects.values_list("name", flat=True)) == ["new"]
