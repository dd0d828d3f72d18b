"""Every size a caller or a job can send is bounded, and bad references are refused cleanly.

- Past a limit (``DURAJOBS["MAX_*"]``) the call raises ``JobError("invalid_input")`` naming the
  setting, and nothing is written; inside a run, the job fails with that code.
- A job, parent or user named by something that is not an id is ``invalid_input`` before any
  query; an id with no row is ``job_not_found`` (a user: ``invalid_input``).
- A run that logs without end keeps its log near ``LOG_LINES_KEPT`` while it runs.
- ``drain()`` keeps a long step's lease alive; ``stale`` is judged on the database's clock.
"""

from __future__ import annotations

from datetime import timedelta

import pytest
import time_machine
from django.contrib.auth import get_user_model
from django.db import connection
from django.test import override_settings
from django.test.utils import CaptureQueriesContext
from django.utils import timezone

from django_durajobs import (
    Job,
    JobError,
    JobLog,
    JobStep,
    Status,
    cancel,
    children_summary,
    describe,
    drain,
    enqueue,
    enqueue_many,
    pause,
    resume,
    retry,
    revert,
    update,
)
from django_durajobs.store import claim, database_now
from tests.testapp.kinds_limits import effect_name
from tests.testapp.models import SideEffect


def row_counts():
    return Job.objects.count(), JobStep.objects.count(), JobLog.objects.count()


def stored(job):
    return Job.objects.filter(pk=job.pk).values().get()


# References: jobs, parents and users -----------------------------------------------------------

NOT_IDS = [
    pytest.param("abc", id="text"),
    pytest.param("²", id="superscript digit"),
    pytest.param("5" * 5_000, id="5,000 digits"),
    pytest.param(10**30, id="past bigint"),
    pytest.param(0, id="zero"),
    pytest.param(-3, id="negative"),
    pytest.param(True, id="a bool"),
    pytest.param(2.0, id="a float"),
    pytest.param(None, id="None"),
    pytest.param(["x"] * 10_000, id="a huge list"),
]


@pytest.mark.django_db
@pytest.mark.parametrize("ref", NOT_IDS)
@pytest.mark.parametrize(
    "call",
    [describe, children_summary, resume, retry, pause, cancel, revert, lambda ref: update(ref, label="x")],
    ids=["describe", "children_summary", "resume", "retry", "pause", "cancel", "revert", "update"],
)
def test_a_job_named_by_something_that_is_not_an_id_is_invalid_input(call, ref):
    with pytest.raises(JobError) as refused:
        call(ref)
    assert refused.value.code == "invalid_input"
    assert len(str(refused.value)) < 200  # the reference is quoted, cut short


@pytest.mark.django_db
def test_a_job_named_by_its_id_as_decimal_text_is_found_and_a_missing_one_is_job_not_found():
    job, _ = enqueue("inputs_plain")
    assert describe(str(job.pk))["id"] == job.pk
    with pytest.raises(JobError) as missing:
        describe(str(job.pk + 1000))
    assert missing.value.code == "job_not_found"


REFUSED_REFERENCES = [
    pytest.param({"parent": "abc"}, "parent", id="parent text"),
    pytest.param({"parent": -1}, "parent", id="parent negative"),
    pytest.param({"parent": 10**30}, "parent", id="parent past bigint"),
    pytest.param({"created_by": 987654321}, "987654321", id="created_by unknown id"),
    pytest.param({"created_by": "bob"}, "created_by", id="created_by text"),
    pytest.param({"created_by": True}, "created_by", id="created_by bool"),
    pytest.param({"created_by": 1.5}, "created_by", id="created_by float"),
    pytest.param({"created_by": 10**30}, "created_by", id="created_by past bigint"),
    pytest.param({"run_at": timedelta(days=10**8)}, "run_at", id="run_at delay past year 9999"),
    pytest.param({"max_attempts": 2**70}, "max_attempts", id="max_attempts 2**70"),
    pytest.param({"max_attempts": 1_000_001}, "max_attempts", id="max_attempts over a million"),
    pytest.param({"subject": {"n": 10**5000}}, "integer too long", id="a 5,000-digit integer"),
]


@pytest.mark.django_db
@pytest.mark.parametrize("kwargs, words", REFUSED_REFERENCES)
def test_enqueue_refuses_bad_references_and_out_of_range_values_and_writes_nothing(kwargs, words):
    enqueue("inputs_plain")
    before = row_counts()
    with pytest.raises(JobError) as refused:
        enqueue("inputs_plain", **kwargs)
    assert refused.value.code == "invalid_input"
    assert words.lower() in str(refused.value).lower()
    assert "nan" not in str(refused.value).lower()
    assert row_counts() == before


@pytest.mark.django_db
def test_an_unsaved_user_as_created_by_is_refused():
    with pytest.raises(JobError) as refused:
        enqueue("inputs_plain", created_by=get_user_model()(username="ghost"))
    assert refused.value.code == "invalid_input"
    assert not Job.objects.exists()


@pytest.mark.django_db
def test_created_by_as_a_user_or_a_users_id_is_stored():
    alice = get_user_model().objects.create(username="alice")
    by_user, _ = enqueue("inputs_plain", created_by=alice)
    by_id, _ = enqueue("inputs_plain", created_by=alice.pk)
    assert [Job.objects.get(pk=job.pk).created_by for job in (by_user, by_id)] == [alice, alice]


@pytest.mark.django_db
def test_enqueue_many_checks_every_creator_in_one_query():
    alice = get_user_model().objects.create(username="alice")
    specs = [{"created_by": alice.pk} for _ in range(50)]
    with CaptureQueriesContext(connection) as queries:
        created = enqueue_many("inputs_plain", specs)
    assert len(created) == 50
    table = get_user_model()._meta.db_table
    assert sum(table in query["sql"] for query in queries.captured_queries) == 1
    with pytest.raises(JobError):
        enqueue_many("inputs_plain", [*specs, {"created_by": alice.pk + 99}])
    assert Job.objects.count() == 50


@pytest.mark.django_db
def test_max_attempts_of_a_million_is_accepted():
    job, _ = enqueue("inputs_plain", max_attempts=1_000_000)
    assert stored(job)["max_attempts"] == 1_000_000


# Sizes a caller sends ---------------------------------------------------------------------------


@pytest.mark.django_db
def test_resume_data_over_its_limit_is_refused_and_the_job_keeps_waiting():
    job, _ = enqueue("inputs_plain", initial_status=Status.AWAITING_EXTERNAL)
    before = stored(job)
    with override_settings(DURAJOBS={"MAX_RESUME_DATA_BYTES": 100}):
        with pytest.raises(JobError) as refused:
            resume(job, data={"note": "n" * 200})
        assert refused.value.code == "invalid_input"
        assert "MAX_RESUME_DATA_BYTES" in str(refused.value)
        assert stored(job) == before
        resume(job, data={"note": "short"})
    assert stored(job)["resume_data"] == {"note": "short"}


@pytest.mark.django_db
@pytest.mark.parametrize("field", ["wait_reason", "user_message"])
def test_update_of_a_message_over_its_limit_is_refused(field):
    job, _ = enqueue("inputs_plain")
    before = stored(job)
    with pytest.raises(JobError) as refused:
        update(job, **{field: "m" * 2_001})
    assert refused.value.code == "invalid_input"
    assert "MAX_MESSAGE_CHARS" in str(refused.value)
    assert stored(job) == before
    update(job, **{field: "m" * 2_000})
    assert len(stored(job)[field]) == 2_000


# Sizes a run sends ------------------------------------------------------------------------------


@pytest.mark.django_db
def test_a_step_result_over_its_limit_fails_the_job_with_invalid_input_and_stores_nothing():
    with override_settings(DURAJOBS={"MAX_RESULT_BYTES": 1_000}):
        big, _ = enqueue("limits_big_step_result", subject={"chars": 2_000})
        fits, _ = enqueue("limits_big_step_result", subject={"chars": 900})
        drain()
    big.refresh_from_db()
    assert (big.status, big.error_code) == (Status.FAILED, "invalid_input")
    assert "MAX_RESULT_BYTES" in big.error
    produce = JobStep.objects.get(job=big, step_id="produce")
    assert (produce.state, produce.result) == ("failed", None)
    assert not SideEffect.objects.filter(name=effect_name(big.pk, "after")).exists()
    assert Job.objects.get(pk=fits.pk).status == Status.DONE


@pytest.mark.django_db
def test_a_run_result_over_its_limit_fails_the_job_with_invalid_input():
    with override_settings(DURAJOBS={"MAX_RESULT_BYTES": 1_000}):
        big, _ = enqueue("limits_big_run_result", subject={"chars": 2_000})
        drain()
    big.refresh_from_db()
    assert (big.status, big.error_code, big.result) == (Status.FAILED, "invalid_input", None)


@pytest.mark.django_db
def test_a_job_past_max_steps_fails_at_the_step_over_it_and_keeps_the_others():
    with override_settings(DURAJOBS={"MAX_STEPS": 5}):
        job, _ = enqueue("limits_many_steps", subject={"steps": 8})
        drain()
    job.refresh_from_db()
    assert (job.status, job.error_code) == (Status.FAILED, "invalid_input")
    assert "MAX_STEPS" in job.error
    steps = JobStep.objects.filter(job=job).order_by("position")
    assert [(step.step_id, step.position, step.state) for step in steps] == [
        (f"step-{number}", number, "done") for number in range(5)
    ]


@pytest.mark.django_db
def test_a_run_that_logs_thousands_of_lines_keeps_its_log_near_the_limit_while_it_runs():
    with override_settings(DURAJOBS={"LOG_LINES_KEPT": 100}):
        job, _ = enqueue("limits_chatty", subject={"lines": 1_000})
        drain()
    job.refresh_from_db()
    assert job.status == Status.DONE
    assert job.result <= 110  # counted by the run itself, before its outcome trimmed the log
    lines = list(JobLog.objects.filter(job=job).order_by("id").values_list("line", flat=True))
    assert len(lines) <= 100
    assert lines[-2:] == ["line 999", "Done."]


@pytest.mark.django_db
def test_stale_is_judged_on_the_database_clock_not_the_apps():
    """``recover()`` judges leases on the database's clock; ``describe()["stale"]`` agrees with it
    however far the app server's clock is off."""
    job, _ = enqueue("inputs_plain")
    lease = claim("clock-test")
    assert lease.job.pk == job.pk
    with time_machine.travel(timezone.now() + timedelta(hours=1)):
        assert describe(job)["stale"] is False
    Job.objects.filter(pk=job.pk).update(locked_at=database_now() - timedelta(seconds=120))
    with time_machine.travel(timezone.now() - timedelta(hours=1)):
        assert describe(job)["stale"] is True
