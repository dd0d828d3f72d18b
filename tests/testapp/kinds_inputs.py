"""Job kinds for the input, redaction and idempotency tests (tests/integration/test_inputs.py,
tests/integration/test_redaction_stored.py, tests/integration/test_idempotency.py).

The misbehaving kinds pick what to do from their subject, so one kind covers a family of cases:
``subject["value"]`` names one of ``BAD_VALUES``, ``subject["misuse"]`` one of ``MISUSES``.
``SECRET`` is the string the redaction tests hunt for in the database; it is never put in a
subject (subjects are stored as given), only built inside the runs.
"""

from __future__ import annotations

from datetime import datetime, timedelta

from django_durajobs import job
from tests.testapp.models import SideEffect

SECRET = "Hunter2-Sup3rS3cret-7f3a9c"

# Values a step or a run must not be able to store: not JSON, NaN/Infinity, or NUL characters.
BAD_VALUES = {
    "object": lambda: object(),
    "set": lambda: {1, 2},
    "nan": lambda: float("nan"),
    "nested_infinity": lambda: {"sizes": [1, float("inf")]},
    "nul": lambda: "\x00",
    "nul_key": lambda: {"a\x00b": 1},
}


def effect_name(job_id: int, what: str) -> str:
    return f"inputs:{job_id}:{what}"


def record(job, what: str) -> None:
    """Leave a SideEffect row saying ``what`` happened for ``job`` (a step's body; returns None)."""
    SideEffect.objects.create(name=effect_name(job.pk, what))


@job("inputs_plain", title="Plain input job", steps=[("one", "Step one")])
def inputs_plain(job, ctx):
    ctx.step("one", lambda: {"n": 1})
    return {"ok": True}


@job("inputs_other")
def inputs_other(job, ctx):
    return None


@job("inputs_bad_step_result", steps=[("produce", "Produce a value"), ("after", "After it")])
def inputs_bad_step_result(job, ctx):
    ctx.step("produce", BAD_VALUES[job.subject["value"]])
    ctx.step("after", lambda: record(job, "after"))


@job("inputs_bad_return", steps=[("work", "Work")])
def inputs_bad_return(job, ctx):
    ctx.step("work", lambda: record(job, "work"))
    return BAD_VALUES[job.subject["value"]]()


def _noop():
    return None


MISUSES = {
    "step_id_int": lambda ctx: ctx.step(3, _noop),
    "step_id_empty": lambda ctx: ctx.step("", _noop),
    "step_id_blank": lambda ctx: ctx.step("   ", _noop),
    "step_id_none": lambda ctx: ctx.step(None, _noop),
    "step_id_too_long": lambda ctx: ctx.step("s" * 101, _noop),
    "retry_later_negative": lambda ctx: ctx.retry_later(-1),
    "retry_later_nan": lambda ctx: ctx.retry_later(float("nan")),
    "wait_status_done": lambda ctx: ctx.wait_external("DNS", status="done"),
    "wait_status_running": lambda ctx: ctx.wait_external("DNS", status="running"),
    "wait_status_needs_user": lambda ctx: ctx.wait_external("DNS", status="needs_user"),
    "wait_status_bogus": lambda ctx: ctx.wait_external("DNS", status="bogus"),
    "wait_naive_resume_at": lambda ctx: ctx.wait_external("DNS", resume_at=datetime(2030, 1, 1, 12, 0)),
    "needs_user_action_without_id": lambda ctx: ctx.needs_user("Pick one", actions=[{"label": "No id"}]),
    # Past the limits (DURAJOBS["MAX_MESSAGE_CHARS"], ["MAX_ACTIONS"], the resume_action column).
    "wait_reason_too_long": lambda ctx: ctx.wait_external("x" * 2_001),
    "question_too_long": lambda ctx: ctx.needs_user("?" * 2_001, actions=["yes", "no"]),
    "retry_later_reason_too_long": lambda ctx: ctx.retry_later(1, reason="r" * 2_001),
    "too_many_actions": lambda ctx: ctx.needs_user("Pick one", actions=[f"a{n}" for n in range(21)]),
    "action_id_too_long": lambda ctx: ctx.needs_user("Pick one", actions=["a" * 101]),
    "action_label_too_long": lambda ctx: ctx.needs_user("Pick", actions=[{"id": "a", "label": "l" * 2_001}]),
    "action_offered_twice": lambda ctx: ctx.needs_user("Pick one", actions=["yes", {"id": "yes"}]),
    # Moments past the last date a database stores.
    "retry_later_overflow": lambda ctx: ctx.retry_later(1e20),
    "retry_later_infinity": lambda ctx: ctx.retry_later(float("inf")),
    "wait_resume_at_overflow": lambda ctx: ctx.wait_external("DNS", resume_at=timedelta(days=999_999_999)),
    "eta_overflow": lambda ctx: ctx.eta(timedelta(days=999_999_999)),
}


@job("inputs_misuse", steps=[("first", "First")])
def inputs_misuse(job, ctx):
    ctx.step("first", lambda: record(job, "first"))
    MISUSES[job.subject["misuse"]](ctx)
    record(job, "past-misuse")


# Text holding a NUL character, produced at run time (PostgreSQL text columns refuse NUL).
NUL_TEXT = "bad byte \x00 in the middle"


def _raise_nul():
    raise RuntimeError(NUL_TEXT)


@job("inputs_nul_text", steps=[("work", "Work")])
def inputs_nul_text(job, ctx):
    where = job.subject["where"]
    if where == "step_raise":
        ctx.step("work", _raise_nul)
    if where == "raise":
        _raise_nul()
    if where == "log":
        ctx.log(NUL_TEXT)
    if where == "wait":
        ctx.wait_external(NUL_TEXT)
    if where == "needs_user":
        ctx.needs_user(NUL_TEXT, actions=["ok"])
    return None


# Redaction -------------------------------------------------------------------------------------


def secret_message() -> str:
    return f"login to db failed: password={SECRET}"


def _raise_secret():
    raise RuntimeError(secret_message())


@job("inputs_secret_error", steps=[("login", "Log in")])
def inputs_secret_error(job, ctx):
    if job.subject["where"] == "step":
        ctx.step("login", _raise_secret)
    _raise_secret()


SECRET_LOG_LINES = (
    f"connecting with password={SECRET}",
    f'config: {{"api_key": "{SECRET}"}}',
    f"DATABASE_URL=postgres://app:{SECRET}@db:5432/app",
    f"token: {SECRET}",
)


@job("inputs_secret_log")
def inputs_secret_log(job, ctx):
    for line in SECRET_LOG_LINES:
        ctx.log(line)
    return {"logged": len(SECRET_LOG_LINES)}


def secret_result() -> dict:
    return {
        "password": SECRET,
        "dsn": f"postgres://app:{SECRET}@db:5432/app",
        "note": f"rotated; new token: {SECRET}",
        "servers": [{"name": "web1", "api_key": SECRET}],
    }


@job("inputs_secret_result")
def inputs_secret_result(job, ctx):
    return secret_result()


def secret_step_value() -> dict:
    """What the step returns; a tuple comes back as a list, on the first run and on replay."""
    return {
        "password": SECRET,
        "dsn": f"postgres://app:{SECRET}@db:5432/app",
        "pair": (1, "two"),
    }


@job("inputs_secret_step", steps=[("fetch", "Fetch credentials"), ("use", "Use them")])
def inputs_secret_step(job, ctx):
    def fetch():
        record(job, "fetch")
        return secret_step_value()

    credentials = ctx.step("fetch", fetch)
    if ctx.resume_data != "go ahead":
        ctx.wait_external("Waiting for the go-ahead")
    expected = secret_step_value()
    expected["pair"] = list(expected["pair"])
    return {
        "replay_matched": credentials == expected,
        "fetch_calls": SideEffect.objects.filter(name=effect_name(job.pk, "fetch")).count(),
    }


def secret_wait_text() -> str:
    return f"Waiting for the bank; api_key={SECRET}"


@job("inputs_secret_wait", steps=[("charge", "Charge")])
def inputs_secret_wait(job, ctx):
    if job.subject["how"] == "wait":
        ctx.wait_external(secret_wait_text())
    if job.subject["how"] == "wait_in_step":
        ctx.step("charge", lambda: ctx.wait_external(secret_wait_text()))
    if job.subject["how"] == "needs_user":
        ctx.needs_user(secret_wait_text(), actions=["retry", "give_up"])
    return None
