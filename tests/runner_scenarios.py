"""The runner's scenarios, written once and run on every store: in memory with no database
(tests/engine/test_runner_in_memory.py) and on the database (tests/integration/
test_runner_on_database.py, on SQLite, PostgreSQL and MariaDB).

A test module subclasses ``RunnerScenarios`` and gives it a ``store`` fixture with
``MemoryStore``'s calls: ``enqueue``, ``operate`` (an operation by name), ``send_event``,
``take_over``, ``run_next`` (as ``drain()`` runs one job), and the reads ``job``, ``steps``,
``log`` and ``children``. The kinds are ``tests/testapp/kinds_runner.py``'s.
"""

from __future__ import annotations

from datetime import timedelta

import pytest

from django_durajobs.engine.runner import abandon
from django_durajobs.status import Phase, Status, StepState
from django_durajobs.testing import clock
from tests.testapp.kinds_runner import AT, CONTEXTS, READY, RUNS


def states(store, job, phase: str = Phase.RUN) -> dict[str, str]:
    return {step.step_id: step.state for step in store.steps(job.pk, phase)}


def ran(store, job) -> str | None:
    """Run the next due job, which must be ``job``; its new status (None: nothing was due)."""
    outcome = store.run_next()
    if outcome is None:
        return None
    assert store.job(job.pk).locked_by == ""  # the run gave its job up: it was this one
    return outcome.status


class RunnerScenarios:
    @pytest.fixture(autouse=True)
    def _forget_the_kinds_notes(self):
        yield
        AT.clear()
        RUNS.clear()
        READY.clear()
        CONTEXTS.clear()

    # Finishing -----------------------------------------------------------------------------------

    def test_a_job_runs_its_steps_and_finishes_with_its_result(self, store):
        job = store.enqueue("runner_steps")

        assert ran(store, job) == Status.DONE

        done = store.job(job.pk)
        assert (done.status, done.result, done.attempt, done.error) == (Status.DONE, {"sum": 3}, 1, "")
        assert done.ended_at is not None and done.lease_token == ""
        steps = {step.step_id: (step.state, step.result) for step in store.steps(job.pk)}
        assert steps == {"first": (StepState.DONE, 1), "second": (StepState.DONE, 2)}
        assert store.log(job.pk) == []  # a first run done without a word says nothing
        assert store.run_next() is None

    # Failing -------------------------------------------------------------------------------------

    def test_a_failed_step_is_retried_after_its_backoff_and_finished_steps_are_not_run_again(self, store):
        job = store.enqueue("runner_steps", {"fail": {"second": 1}})
        with clock() as now:
            assert ran(store, job) == Status.QUEUED

            queued = store.job(job.pk)
            assert (queued.attempt, queued.error_code) == (1, "transient")
            assert queued.error == "ValueError: second broke in try 1"
            assert queued.next_run_at == now.now() + timedelta(seconds=30)
            assert states(store, job) == {"first": StepState.DONE, "second": StepState.FAILED}
            assert store.log(job.pk) == [
                "Try 1 of 3 failed; retrying in 30 s: ValueError: second broke in try 1"
            ]
            now.move(29)
            assert store.run_next() is None  # not due before its backoff is over
            now.move(1)
            assert ran(store, job) == Status.DONE

        done = store.job(job.pk)
        assert (done.attempt, done.error, done.result) == (2, "", {"sum": 3})
        assert (RUNS[job.pk, "first"], RUNS[job.pk, "second"]) == (1, 2)

    def test_a_job_whose_last_try_fails_fails_for_good(self, store):
        job = store.enqueue("runner_steps", {"fail": {"first": 3}})
        with clock() as now:
            for backoff in (30, 60):
                assert ran(store, job) == Status.QUEUED
                now.move(backoff)
            assert ran(store, job) == Status.FAILED

        failed = store.job(job.pk)
        assert (failed.attempt, failed.error_code) == (3, "failed")
        assert failed.error == "ValueError: first broke in try 3"
        assert failed.next_run_at is None and failed.ended_at is not None
        assert states(store, job) == {"first": StepState.FAILED, "second": StepState.PENDING}
        assert store.log(job.pk)[-1] == "Failed: ValueError: first broke in try 3"
        assert store.steps(job.pk)[0].error == "ValueError: first broke in try 3"

    # Waiting -------------------------------------------------------------------------------------

    def test_a_wait_for_outside_news_ends_when_the_job_is_resumed(self, store):
        job = store.enqueue("runner_waits", {"how": "external"})

        assert ran(store, job) == Status.AWAITING_EXTERNAL

        waiting = store.job(job.pk)
        assert (waiting.wait_reason, waiting.attempt, waiting.next_run_at) == (
            "Waiting for the bank",
            0,
            None,
        )
        assert states(store, job) == {"before": StepState.DONE, "after": StepState.WAITING}
        assert store.run_next() is None
        store.operate(job.pk, "resume", data={"paid": True})
        assert ran(store, job) == Status.DONE
        assert store.job(job.pk).result == {"paid": True}
        assert states(store, job) == {"before": StepState.DONE, "after": StepState.DONE}
        assert RUNS[job.pk, "before"] == 1

    def test_a_timed_wait_checks_again_when_its_time_comes(self, store):
        job = store.enqueue("runner_waits", {"how": "timed"})
        with clock() as now:
            assert ran(store, job) == Status.AWAITING_EXTERNAL
            assert store.job(job.pk).next_run_at == now.now() + timedelta(minutes=1)
            now.move(59)
            assert store.run_next() is None
            now.move(1)
            assert ran(store, job) == Status.AWAITING_EXTERNAL  # checked again: not yet
            assert store.job(job.pk).wait_checks["count"] == 2
            READY.add(job.pk)
            now.move(60)
            assert ran(store, job) == Status.DONE

        assert store.log(job.pk).count("Waiting: Checking again in a minute") == 1  # its first check only
        assert store.job(job.pk).wait_checks is None

    def test_a_wait_for_an_event_gets_its_payload_once_it_is_sent(self, store):
        job = store.enqueue("runner_waits", {"how": "event", "event": "bank:paid"})

        assert ran(store, job) == Status.AWAITING_EXTERNAL
        assert store.job(job.pk).waits_for_event == "bank:paid"
        assert store.run_next() is None
        assert store.send_event("bank:paid", {"amount": 12})
        assert ran(store, job) == Status.DONE
        assert store.job(job.pk).result == {"amount": 12}

    def test_an_event_sent_before_the_wait_is_got_at_once(self, store):
        store.send_event("bank:early", "sent first")
        job = store.enqueue("runner_waits", {"how": "event", "event": "bank:early"})

        assert ran(store, job) == Status.DONE
        assert store.job(job.pk).result == "sent first"

    def test_a_wait_for_an_event_times_out_when_its_timeout_comes(self, store):
        job = store.enqueue("runner_waits", {"how": "event", "event": "bank:never", "timeout": 60})
        with clock() as now:
            assert ran(store, job) == Status.AWAITING_EXTERNAL
            assert store.job(job.pk).next_run_at == now.now() + timedelta(seconds=60)
            now.move(60)
            assert ran(store, job) == Status.DONE

        assert store.job(job.pk).result == "timed out"
        assert "The wait for event bank:never timed out." in store.log(job.pk)

    def test_a_run_that_asks_later_runs_again_then_without_using_a_try(self, store):
        job = store.enqueue("runner_waits", {"how": "later"})
        with clock() as now:
            assert ran(store, job) == Status.QUEUED
            assert store.job(job.pk).next_run_at == now.now() + timedelta(seconds=90)
            assert store.log(job.pk) == ["Runs again in 90 s: the bank is closed."]
            READY.add(job.pk)
            now.move(90)
            assert ran(store, job) == Status.DONE
        assert store.job(job.pk).attempt == 1

    def test_a_parent_waits_for_the_child_it_enqueued(self, store):
        parent = store.enqueue("runner_waits", {"how": "children"})

        assert ran(store, parent) == Status.AWAITING_EXTERNAL

        waiting = store.job(parent.pk)
        assert (waiting.waits_for_children, waiting.wait_reason) == (True, "Waiting for 1 of 1 child job")
        [child] = store.children(parent.pk)
        assert (child.kind, child.status) == ("runner_steps", Status.QUEUED)

    # Asking --------------------------------------------------------------------------------------

    def test_a_question_waits_for_its_answer_and_the_run_goes_on_with_it(self, store):
        job = store.enqueue("runner_waits", {"how": "question"})

        assert ran(store, job) == Status.NEEDS_USER

        asking = store.job(job.pk)
        assert asking.user_message == "Refund the order?"
        assert [action["id"] for action in asking.actions] == ["refund", "keep"]
        assert states(store, job)["after"] == StepState.NEEDS_USER
        assert store.run_next() is None
        store.operate(job.pk, "resume", action="refund")
        assert ran(store, job) == Status.DONE
        done = store.job(job.pk)
        assert (done.result, done.user_message, done.actions) == ("refund", "", None)

    # Reverting -----------------------------------------------------------------------------------

    def test_a_revert_runs_the_kind_s_revert_after_the_run(self, store):
        job = store.enqueue("runner_steps")
        assert ran(store, job) == Status.DONE

        store.operate(job.pk, "revert")
        assert store.job(job.pk).status == Status.REVERTING
        assert ran(store, job) == Status.REVERTED

        assert states(store, job, Phase.REVERT) == {
            "undo_second": StepState.DONE,
            "undo_first": StepState.DONE,
        }
        assert states(store, job) == {"first": StepState.DONE, "second": StepState.DONE}
        assert store.log(job.pk)[-1] == "Reverted."

    # Stopping at a step boundary -----------------------------------------------------------------

    def test_a_cancel_asked_for_during_a_step_stops_the_job_before_its_next_step(self, store):
        job = store.enqueue("runner_steps")
        AT[job.pk, "first"] = lambda: store.operate(job.pk, "cancel")

        assert ran(store, job) == Status.CANCELLED

        cancelled = store.job(job.pk)
        assert (cancelled.cancel_requested, cancelled.lease_token) == (False, "")
        assert states(store, job) == {"first": StepState.DONE, "second": StepState.PENDING}
        assert RUNS[job.pk, "second"] == 0
        assert store.log(job.pk)[-1] == "Cancelled."

    def test_a_pause_asked_for_between_steps_holds_the_job_until_it_is_resumed(self, store):
        job = store.enqueue("runner_steps")

        def pause_while_the_run_works_between_its_steps() -> None:
            store.operate(job.pk, "pause")
            now.move(1)

        with clock() as now:
            AT[job.pk, "between"] = pause_while_the_run_works_between_its_steps
            assert ran(store, job) == Status.PAUSED

        assert states(store, job) == {"first": StepState.DONE, "second": StepState.PENDING}
        assert store.run_next() is None

        store.operate(job.pk, "resume")
        assert ran(store, job) == Status.DONE
        assert (RUNS[job.pk, "first"], RUNS[job.pk, "second"]) == (1, 1)

    # Timeouts ------------------------------------------------------------------------------------

    def test_a_job_past_its_timeout_fails_at_its_next_step(self, store):
        job = store.enqueue("runner_steps", max_attempts=1)
        with clock() as now:
            AT[job.pk, "between"] = lambda: now.move(10)
            assert ran(store, job) == Status.FAILED

        failed = store.job(job.pk)
        assert (failed.error_code, failed.error) == ("timeout", f"Job {job.pk} ran past its timeout of 10 s.")
        assert states(store, job) == {"first": StepState.DONE, "second": StepState.PENDING}

    def test_a_step_past_its_own_timeout_is_not_checkpointed_and_its_try_is_retried(self, store):
        job = store.enqueue("runner_steps", {"second_timeout": 5})
        with clock() as now:
            AT[job.pk, "second"] = lambda: now.move(6)
            assert ran(store, job) == Status.QUEUED

            second = store.steps(job.pk)[1]
            assert (second.state, second.result) == (StepState.FAILED, None)
            assert second.error == "Step 'second' ran past its timeout of 5 s."
            now.move(30)
            assert ran(store, job) == Status.DONE
        assert store.job(job.pk).result == {"sum": 3}

    def test_a_job_given_up_just_as_its_step_was_checkpointed_never_runs_that_step_again(self, store):
        """The worker gives a job up past its timeout without stopping its thread, and reads which
        step is in flight as the thread last said. Given up just after a step's checkpoint, before
        the thread said the step is over, it fails no step that is done: the retry goes on from
        the next one. (The thread given up goes on until it writes: here it runs the second step,
        whose checkpoint is refused.)"""
        job = store.enqueue("runner_steps")

        def given_up_as_the_first_step_was_checkpointed() -> None:
            lease = CONTEXTS[job.pk]._lease
            lease.timed_step, lease.step_started_ahead = "first", None  # as the thread last said
            assert abandon(lease)

        with clock() as now:
            AT[job.pk, "between"] = given_up_as_the_first_step_was_checkpointed
            assert store.run_next().status is None  # its writes after being given up are refused
            retried = store.job(job.pk)
            assert (retried.status, retried.error_code) == (Status.QUEUED, "timeout")
            assert states(store, job)["first"] == StepState.DONE
            now.move(60)
            assert ran(store, job) == Status.DONE
        assert RUNS[job.pk, "first"] == 1
        assert store.job(job.pk).result == {"sum": 3}

    # Losing the lease ----------------------------------------------------------------------------

    def test_a_run_whose_job_another_worker_took_over_writes_nothing_more(self, store):
        job = store.enqueue("runner_steps")

        def taken_over_while_the_run_stalls_between_its_steps() -> None:
            store.take_over(job.pk)
            now.move(60)

        with clock() as now:
            AT[job.pk, "between"] = taken_over_while_the_run_stalls_between_its_steps
            assert store.run_next().status is None  # abandoned

        taken = store.job(job.pk)
        assert (taken.status, taken.locked_by) == (Status.RUNNING, "another worker")
        # The second step was marked running with the first one's checkpoint, before the job was
        # taken over; its new worker runs it.
        assert states(store, job) == {"first": StepState.DONE, "second": StepState.RUNNING}
        assert RUNS[job.pk, "second"] == 0
