"""Secrets in what a job writes never reach the database in clear.

An exception message, a log line, a job result, a wait reason, a question and an update are
redacted before they are stored; a step result is stored intact (it is replayed) and redacted when
shown. The stored rows are read back with raw SQL, so nothing between the database and the
assertion could hide a secret that was written. The rules are in ``tests/engine/test_redaction.py``.
"""

from __future__ import annotations

import json

import pytest
from django.db import connection

from django_durajobs import Job, JobLog, JobStep, Status, describe, drain, enqueue, resume, update
from django_durajobs.redaction import REDACTED
from tests.testapp.kinds_inputs import (
    SECRET,
    SECRET_LOG_LINES,
    effect_name,
    secret_step_value,
)
from tests.testapp.models import SideEffect


def stored(job) -> str:
    """Every stored value of the job's row, its steps and its log lines, read with raw SQL."""
    quote = connection.ops.quote_name
    rows = []
    with connection.cursor() as cursor:
        for model, column in ((Job, "id"), (JobStep, "job_id"), (JobLog, "job_id")):
            table = quote(model._meta.db_table)
            cursor.execute(f"SELECT * FROM {table} WHERE {quote(column)} = %s", [job.pk])
            rows.extend(cursor.fetchall())
    assert rows, "the job has no stored rows"
    return repr(rows)


def shown(job) -> str:
    return json.dumps(describe(job))


@pytest.mark.django_db
@pytest.mark.parametrize("where", ["run", "step"])
def test_secret_in_an_exception_message_never_reaches_the_database(where):
    job, _ = enqueue("inputs_secret_error", subject={"where": where})

    drain()

    job.refresh_from_db()
    assert job.status == Status.FAILED
    assert "login to db failed" in job.error
    assert REDACTED in job.error
    assert SECRET not in stored(job)
    assert SECRET not in shown(job)
    if where == "step":
        step = JobStep.objects.get(job=job, step_id="login")
        assert step.state == "failed"
        assert "login to db failed" in step.error


@pytest.mark.django_db
def test_secret_in_a_log_line_never_reaches_the_database():
    job, _ = enqueue("inputs_secret_log")

    drain()

    job.refresh_from_db()
    assert job.status == Status.DONE
    lines = list(JobLog.objects.filter(job=job).order_by("id").values_list("line", flat=True))
    logged = [line for line in lines if REDACTED in line]
    assert len(logged) == len(SECRET_LOG_LINES)
    assert logged[0] == f"connecting with password={REDACTED}"
    assert SECRET not in stored(job)
    assert SECRET not in shown(job)


@pytest.mark.django_db
def test_secret_in_the_job_result_never_reaches_the_database():
    job, _ = enqueue("inputs_secret_result")

    drain()

    job.refresh_from_db()
    assert job.status == Status.DONE
    assert job.result["password"] == REDACTED
    assert job.result["servers"] == [{"name": "web1", "api_key": REDACTED}]
    assert job.result["dsn"] == f"postgres://app:{REDACTED}@db:5432/app"
    assert job.result["note"].startswith("rotated; new token: ")
    assert SECRET not in stored(job)
    assert SECRET not in shown(job)


@pytest.mark.django_db
def test_secret_in_a_step_result_is_stored_intact_for_replay_and_redacted_when_shown():
    """The step result keeps the secret (the replayed run gets exactly what the step returned, the
    step is not called again), while describe() never shows it."""
    job, _ = enqueue("inputs_secret_step")

    drain()

    job.refresh_from_db()
    assert job.status == Status.AWAITING_EXTERNAL
    expected = json.loads(json.dumps(secret_step_value()))
    assert JobStep.objects.get(job=job, step_id="fetch").result == expected
    assert SECRET in stored(job)  # stored intact (and the raw read can see a secret when there is one)
    description = describe(job)
    assert SECRET not in json.dumps(description)
    fetch = next(step for step in description["steps"] if step["id"] == "fetch")
    assert fetch["result"]["password"] == REDACTED
    assert fetch["result"]["pair"] == [1, "two"]

    resume(job, data="go ahead")
    drain()

    job.refresh_from_db()
    assert job.status == Status.DONE
    assert job.result == {"replay_matched": True, "fetch_calls": 1}
    assert SideEffect.objects.filter(name=effect_name(job.pk, "fetch")).count() == 1
    assert SECRET not in shown(job)


@pytest.mark.django_db
@pytest.mark.parametrize(
    "how, status, field",
    [
        ("wait", Status.AWAITING_EXTERNAL, "wait_reason"),
        ("wait_in_step", Status.AWAITING_EXTERNAL, "wait_reason"),
        ("needs_user", Status.NEEDS_USER, "user_message"),
    ],
)
def test_secret_in_a_wait_reason_or_question_is_redacted_before_storing(how, status, field):
    job, _ = enqueue("inputs_secret_wait", subject={"how": how})

    drain()

    job.refresh_from_db()
    assert job.status == status
    expected = f"Waiting for the bank; api_key={REDACTED}"
    assert getattr(job, field) == expected
    assert JobStep.objects.get(job=job, step_id="charge").detail == expected
    assert SECRET not in stored(job)
    assert SECRET not in shown(job)


@pytest.mark.django_db
def test_secret_given_to_update_is_redacted_before_storing():
    job, _ = enqueue("inputs_plain")

    update(job, user_message=f"Call support; password={SECRET}", wait_reason=f"token: {SECRET}")

    job.refresh_from_db()
    assert job.user_message == f"Call support; password={REDACTED}"
    assert job.wait_reason == f"token: {REDACTED}"
    assert SECRET not in stored(job)
    assert SECRET not in shown(job)
