"""Bad input gets a clear error and loses nothing, identically on SQLite, PostgreSQL and MariaDB.

- ``enqueue`` refuses bad arguments with ``JobError`` before it writes anything.
- At run time a misbehaving run fails only its own step and job, with a clear ``error_code``,
  and never leaves the job ``running``.
- ``update()`` refuses fields and values it does not accept, leaving the row as it was.
- A ``job_changed`` receiver that raises is logged and does not disturb the engine.
- ``@job`` refuses bad definitions at import time.
"""

from __future__ import annotations

import logging
import math
from datetime import datetime, timedelta

import pytest
from django.test import override_settings
from django.utils import timezone

from django_durajobs import Job, JobError, JobLog, JobStep, Status, drain, enqueue, update
from django_durajobs.signals import job_changed
from tests.testapp.kinds_inputs import BAD_VALUES, MISUSES, effect_name
from tests.testapp.models import SideEffect


def row_counts():
    return Job.objects.count(), JobStep.objects.count(), JobLog.objects.count()


def assert_settled(job):
    """After drain() a job is never left running under a worker's lock."""
    job.refresh_from_db()
    assert job.status != Status.RUNNING
    assert job.locked_by == ""
    assert job.lease_token == ""
    return job


# enqueue refusals ------------------------------------------------------------------------------

AWARE = timezone.now() + timedelta(minutes=1)


def refusal(test_id, kwargs, words, code="invalid_input", kind="inputs_plain"):
    """An enqueue call that must be refused with ``code`` and a message holding ``words``."""
    return pytest.param(kind, kwargs, code, words, id=test_id)


REFUSED_ENQUEUES = [
    refusal("unknown kind", {}, "inputs_no_such_kind", code="unknown_job_kind", kind="inputs_no_such_kind"),
    refusal("subject object()", {"subject": {"x": object()}}, "JSON"),
    refusal("subject set", {"subject": {"ids": {1, 2}}}, "JSON"),
    refusal("subject datetime", {"subject": {"at": AWARE}}, "JSON"),
    refusal("subject is a set", {"subject": {1, 2}}, "JSON"),
    refusal("subject NaN", {"subject": {"size": math.nan}}, "NaN"),
    refusal("subject Infinity", {"subject": {"size": math.inf}}, "Infinity"),
    refusal("subject -Infinity", {"subject": {"size": -math.inf}}, "Infinity"),
    refusal("subject nested NaN", {"subject": {"servers": [{"load": [0.5, math.nan]}]}}, "NaN"),
    refusal("subject NUL in a value", {"subject": {"name": "a\x00b"}}, "NUL"),
    refusal("subject NUL nested", {"subject": {"a": [{"b": ["ok", "x\u0000"]}]}}, "NUL"),
    refusal("subject NUL in a key", {"subject": {"na\x00me": "web1"}}, "NUL"),
    refusal("subject NUL in a nested key", {"subject": {"a": {"b\x00": 1}}}, "NUL"),
    refusal("subject over 1 MB", {"subject": {"blob": "x" * 1_000_000}}, "limit"),
    refusal("empty idempotency key", {"idempotency_key": ""}, "idempotency key"),
    refusal("blank idempotency key", {"idempotency_key": "   "}, "idempotency key"),
    refusal("int idempotency key", {"idempotency_key": 7}, "idempotency key"),
    refusal("list idempotency key", {"idempotency_key": ["k"]}, "idempotency key"),
    refusal("idempotency key over 255", {"idempotency_key": "k" * 256}, "idempotency key"),
    refusal("idempotency key NUL", {"idempotency_key": "a\x00b"}, "NUL"),
    refusal("max_attempts 0", {"max_attempts": 0}, "max_attempts"),
    refusal("max_attempts -1", {"max_attempts": -1}, "max_attempts"),
    refusal("max_attempts '3'", {"max_attempts": "3"}, "max_attempts"),
    refusal("max_attempts True", {"max_attempts": True}, "max_attempts"),
    refusal("max_attempts 2.5", {"max_attempts": 2.5}, "max_attempts"),
    refusal("priority 101", {"priority": 101}, "priority"),
    refusal("priority -101", {"priority": -101}, "priority"),
    refusal("priority '5'", {"priority": "5"}, "priority"),
    refusal("priority True", {"priority": True}, "priority"),
    refusal("negative delay", {"run_at": timedelta(seconds=-5)}, "run_at"),
    refusal("naive run_at", {"run_at": datetime(2030, 1, 1, 12, 0)}, "run_at"),
    refusal("run_at a string", {"run_at": "2030-01-01T12:00:00Z"}, "run_at"),
    refusal("initial status running", {"initial_status": "running"}, "running"),
    refusal("initial status done", {"initial_status": "done"}, "done"),
    refusal("initial status reverting", {"initial_status": "reverting"}, "reverting"),
    refusal("initial status bogus", {"initial_status": "bogus"}, "bogus"),
    refusal("label NUL", {"label": "a\x00b"}, "NUL"),
    refusal("label over 255", {"label": "l" * 256}, "label"),
    refusal("unknown parent id", {"parent": 987654321}, "987654321", code="job_not_found"),
]


@pytest.mark.django_db
@pytest.mark.parametrize("kind, kwargs, code, words", REFUSED_ENQUEUES)
def test_enqueue_refuses_bad_input_and_writes_nothing(kind, kwargs, code, words):
    """Each refused enqueue raises JobError with its code, names the problem, and leaves no row."""
    enqueue("inputs_plain", subject={"baseline": True})  # something already stored, to compare against
    before = row_counts()

    with pytest.raises(JobError) as refused:
        enqueue(kind, **kwargs)

    assert refused.value.code == code
    assert words.lower() in str(refused.value).lower()
    assert row_counts() == before


@pytest.mark.django_db
def test_refused_enqueue_does_not_reserve_its_idempotency_key():
    """A refused call leaves no trace: the same key is free for the next, valid call."""
    with pytest.raises(JobError):
        enqueue("inputs_plain", subject={"bad": math.nan}, idempotency_key="inputs-refused-key")

    job, created = enqueue("inputs_plain", subject={"good": 1}, idempotency_key="inputs-refused-key")

    assert created is True
    assert job.subject == {"good": 1}


@pytest.mark.django_db
def test_subject_size_limit_follows_the_setting():
    """MAX_SUBJECT_BYTES is read from DURAJOBS: a small limit refuses what the default allows."""
    with override_settings(DURAJOBS={"MAX_SUBJECT_BYTES": 100}):
        small, _ = enqueue("inputs_plain", subject={"blob": "x" * 50})
        before = row_counts()
        with pytest.raises(JobError) as refused:
            enqueue("inputs_plain", subject={"blob": "x" * 200})
        assert refused.value.code == "invalid_input"
        assert "100" in str(refused.value)
        assert row_counts() == before

    big, _ = enqueue("inputs_plain", subject={"blob": "x" * 200})  # default limit: 1 MB
    assert big.pk != small.pk


@pytest.mark.django_db
def test_subject_just_under_the_default_limit_is_accepted():
    """The default limit is 1,000,000 bytes of JSON: a subject below it is stored intact."""
    blob = "x" * 999_000
    job, created = enqueue("inputs_plain", subject={"blob": blob})
    job.refresh_from_db()
    assert created is True
    assert job.subject["blob"] == blob


@pytest.mark.django_db
def test_subject_with_a_lone_surrogate_is_refused_with_job_error():
    """A string that is not valid Unicode cannot be stored as JSON anywhere: refused up front."""
    before = row_counts()
    with pytest.raises(JobError) as refused:
        enqueue("inputs_plain", subject={"name": "bad \ud800 text"})
    assert refused.value.code == "invalid_input"
    assert row_counts() == before


@pytest.mark.django_db
def test_subject_with_integer_keys_is_stored_as_json_would():
    """JSON-serialisable means what json.dumps accepts: int keys come back as strings."""
    job, created = enqueue("inputs_plain", subject={1: "one", "nested": {2: "two"}})
    job.refresh_from_db()
    assert created is True
    assert job.subject == {"1": "one", "nested": {"2": "two"}}


# Run-time misuse --------------------------------------------------------------------------------


@pytest.mark.django_db
@pytest.mark.parametrize("value", sorted(BAD_VALUES))
def test_step_result_that_is_not_json_fails_the_step_and_the_job(value):
    """A step returning a non-JSON value fails with unserializable_result; later steps never run;
    another job in the same drain is unaffected."""
    bad, _ = enqueue("inputs_bad_step_result", subject={"value": value})
    good, _ = enqueue("inputs_plain")

    assert drain() == 2

    bad = assert_settled(bad)
    assert bad.status == Status.FAILED
    assert bad.error_code == "unserializable_result"
    assert "produce" in bad.error
    steps = {step.step_id: step for step in JobStep.objects.filter(job=bad)}
    assert steps["produce"].state == "failed"
    assert "produce" in steps["produce"].error
    assert steps["produce"].result is None
    assert steps["after"].state == "pending"
    assert not SideEffect.objects.filter(name=effect_name(bad.pk, "after")).exists()

    good = assert_settled(good)
    assert good.status == Status.DONE


@pytest.mark.django_db
@pytest.mark.parametrize("value", sorted(BAD_VALUES))
def test_run_result_that_is_not_json_fails_the_job(value):
    """A run returning a non-JSON value fails the job with unserializable_result; nothing is stored
    as its result and its finished step stays done."""
    bad, _ = enqueue("inputs_bad_return", subject={"value": value})

    assert drain() == 1

    bad = assert_settled(bad)
    assert bad.status == Status.FAILED
    assert bad.error_code == "unserializable_result"
    assert "result" in bad.error.lower()
    assert bad.result is None
    assert bad.ended_at is not None
    assert JobStep.objects.get(job=bad, step_id="work").state == "done"
    assert SideEffect.objects.filter(name=effect_name(bad.pk, "work")).count() == 1


MISUSE_CASES = sorted(MISUSES)


@pytest.mark.django_db
@pytest.mark.parametrize("misuse", MISUSE_CASES)
def test_misusing_ctx_fails_the_job_with_invalid_input(misuse):
    """A bad step id, a negative retry_later, a status a run cannot wait in, a naive resume_at or an
    action without id: the job fails with invalid_input at that call and the run goes no further."""
    bad, _ = enqueue("inputs_misuse", subject={"misuse": misuse})

    assert drain() == 1

    bad = assert_settled(bad)
    assert bad.status == Status.FAILED
    assert bad.error_code == "invalid_input"
    assert bad.error
    assert JobStep.objects.get(job=bad, step_id="first").state == "done"
    assert not SideEffect.objects.filter(name=effect_name(bad.pk, "past-misuse")).exists()


@pytest.mark.django_db
@pytest.mark.parametrize(
    "where, status, field",
    [
        ("step_raise", Status.FAILED, "error"),
        ("raise", Status.FAILED, "error"),
        ("log", Status.DONE, None),
        ("wait", Status.AWAITING_EXTERNAL, "wait_reason"),
        ("needs_user", Status.NEEDS_USER, "user_message"),
    ],
)
def test_nul_character_in_run_time_text_is_not_stored_and_does_not_strand_the_job(where, status, field):
    """A NUL in an exception message, a log line or a wait reason: the job reaches the outcome it
    would have without it, and no stored text holds a NUL (PostgreSQL cannot store one)."""
    job, _ = enqueue("inputs_nul_text", subject={"where": where})

    drain()

    job = assert_settled(job)
    assert job.status == status
    if field:
        assert "bad byte" in getattr(job, field)
        assert "in the middle" in getattr(job, field)
    texts = [job.error, job.wait_reason, job.user_message]
    texts += [text for step in JobStep.objects.filter(job=job) for text in (step.error, step.detail)]
    texts += list(JobLog.objects.filter(job=job).values_list("line", flat=True))
    assert not any("\x00" in text for text in texts)
    if where == "log":
        lines = JobLog.objects.filter(job=job).values_list("line", flat=True)
        assert any("bad byte" in line for line in lines)


# update() ---------------------------------------------------------------------------------------


def stored_row(job):
    return Job.objects.filter(pk=job.pk).values().get()


@pytest.mark.django_db
@pytest.mark.parametrize(
    "fields, words",
    [
        ({"bogus": 1}, "bogus"),
        ({"status": "done"}, "status"),
        ({"result": {"x": 1}}, "result"),
        ({"progress": 50, "subject": {}}, "subject"),
        ({"progress": 150}, "progress"),
        ({"progress": -1}, "progress"),
        ({"progress": "50"}, "progress"),
        ({"progress": True}, "progress"),
        ({"progress": math.nan}, "progress"),
        ({"eta_at": datetime(2030, 1, 1, 12, 0)}, "eta_at"),
        ({"eta_at": "tomorrow"}, "eta_at"),
        ({"label": "l" * 256}, "label"),
        ({"progress": 40, "label": "l" * 256}, "label"),
        ({"user_message": "a\x00b"}, "NUL"),
    ],
    ids=lambda value: repr(value)[:40] if isinstance(value, dict) else value,
)
def test_update_refuses_what_it_does_not_accept_and_changes_nothing(fields, words):
    """update() with an unknown field or a bad value raises invalid_input and applies none of the
    fields given, not even the valid ones in the same call."""
    job, _ = enqueue("inputs_plain", label="Original label")
    update(job, progress=10)
    before = stored_row(job)

    with pytest.raises(JobError) as refused:
        update(job, **fields)

    assert refused.value.code == "invalid_input"
    assert words.lower() in str(refused.value).lower()
    assert stored_row(job) == before


@pytest.mark.django_db
def test_update_accepts_its_fields_and_never_changes_the_status():
    """The accepted fields are applied; the status stays what it was."""
    job, _ = enqueue("inputs_plain")
    eta = timezone.now() + timedelta(hours=1)

    update(job, progress=55, eta_at=eta, label="New", external_ref="ext-1", wait_reason="r", user_message="m")

    job.refresh_from_db()
    shown = (job.progress, job.label, job.external_ref, job.wait_reason, job.user_message)
    assert shown == (55, "New", "ext-1", "r", "m")
    assert job.eta_at == eta
    assert job.status == Status.QUEUED


@pytest.mark.django_db
def test_update_of_a_missing_job_is_job_not_found():
    with pytest.raises(JobError) as refused:
        update(987654321, progress=5)
    assert refused.value.code == "job_not_found"


# job_changed receivers that raise ---------------------------------------------------------------


@pytest.mark.django_db(transaction=True)
def test_a_failing_job_changed_receiver_is_logged_and_never_breaks_the_engine(caplog):
    """enqueue returns, drain finishes the job, other receivers still hear every change, and the
    receiver's exception is logged on the "django_durajobs" logger."""
    heard = []

    def broken(sender, job, previous_status, status, **kwargs):
        raise RuntimeError("inputs receiver broke")

    def listening(sender, job, previous_status, status, **kwargs):
        heard.append((job.pk, previous_status, status))

    job_changed.connect(broken, dispatch_uid="inputs-broken")
    job_changed.connect(listening, dispatch_uid="inputs-listening")
    try:
        with caplog.at_level(logging.ERROR, logger="django_durajobs"):
            job, created = enqueue("inputs_plain")
            assert created is True
            assert drain() == 1
    finally:
        job_changed.disconnect(dispatch_uid="inputs-broken")
        job_changed.disconnect(dispatch_uid="inputs-listening")

    job.refresh_from_db()
    assert job.status == Status.DONE
    assert [entry for entry in heard if entry[0] == job.pk] == [
        (job.pk, None, "queued"),
        (job.pk, "queued", "running"),
        (job.pk, "running", "done"),
    ]
    # The traceback is in the record as redacted text (docs/secrets.md), not as the exception.
    failures = [
        record
        for record in caplog.records
        if record.name == "django_durajobs"
        and record.exc_info is None
        and (record.exc_text or "").endswith("RuntimeError: inputs receiver broke")
    ]
    assert len(failures) == 3  # one per change: enqueue, claim, finish
    assert all(record.levelno == logging.ERROR for record in failures)
    assert all(str(job.pk) in record.getMessage() for record in failures)
