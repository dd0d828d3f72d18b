"""Job kinds for the state-machine and describe() tests (tests/integration/test_states.py and
tests/integration/test_describe.py).

Every run records what it did as ``SideEffect`` rows named ``states:<job id>:<what>``, so a test
can count how often a step (or a whole run) really happened and what the run observed.
"""

from __future__ import annotations

from datetime import timedelta

from django_durajobs import JobError, Status, job
from tests.testapp.models import SideEffect


def record(job_obj, what: str) -> None:
    SideEffect.objects.create(name=f"states:{job_obj.pk}:{what}")


def recorded(job_obj, what: str) -> int:
    return SideEffect.objects.filter(name=f"states:{job_obj.pk}:{what}").count()


def _recorded_step(job_obj, name: str, value=None):
    def fn():
        record(job_obj, f"step:{name}")
        return value

    return fn


class TransientError(Exception):
    """An error the engine treats as retryable through its ``retryable = True`` attribute."""

    retryable = True


# The plain kind: two declared steps, a result, and a revert with two steps of its own. ---------


@job(
    "states_basic",
    title="States: basic",
    steps=[("first", "First step"), ("second", "Second step")],
)
def states_basic(job, ctx):
    from django_durajobs import Job

    status = Job.objects.get(pk=job.pk).status
    record(job, f"observed:status={status}:attempt={ctx.attempt}:job.attempt={job.attempt}")
    first = ctx.step("first", _recorded_step(job, "first", {"made": ("a", 1)}))
    second = ctx.step("second", _recorded_step(job, "second", 2))
    return {"first": first, "second": second}


@states_basic.revert
def undo_states_basic(job, ctx):
    record(job, f"revert:reverting={ctx.reverting}")
    ctx.step("undo_second", _recorded_step(job, "undo_second"), title="Undo second")
    ctx.step("undo_first", _recorded_step(job, "undo_first"), title="Undo first")


@job("states_norevert", title="States: no revert", steps=[("only", "Only step")])
def states_norevert(job, ctx):
    ctx.step("only", _recorded_step(job, "only"))
    return "ok"


# Waiting for an outside event: the first entry waits, the next one finishes. -------------------


@job("states_wait", title="States: wait", steps=[("prepare", "Prepare"), ("finish", "Finish")])
def states_wait(job, ctx):
    """subject: ``status`` (a waiting status; ``enum``: pass it as a ``Status`` member), ``resume_in``
    (seconds, or absent), ``reason``, ``waits`` (how many entries wait, default 1)."""
    entry = recorded(job, "entry")
    record(job, "entry")
    ctx.step("prepare", _recorded_step(job, "prepare"))
    if entry < job.subject.get("waits", 1):
        resume_in = job.subject.get("resume_in")
        status = job.subject.get("status", "awaiting_external")
        ctx.wait_external(
            job.subject.get("reason", "DNS record not visible yet"),
            resume_at=None if resume_in is None else timedelta(seconds=resume_in),
            status=Status(status)
            if job.subject.get("enum")
            else status,  # Status.AWAITING_PAYMENT or a plain str
        )
    ctx.step("finish", _recorded_step(job, "finish"))
    return {"entries": entry + 1}


# Asking a person: needs_user until resumed with an action. -------------------------------------


@job("states_ask", title="States: ask", steps=[("check", "Check"), ("apply", "Apply")])
def states_ask(job, ctx):
    ctx.step("check", _recorded_step(job, "check"))
    if ctx.resume_action is None:
        ctx.needs_user(
            "Overwrite the existing site?", actions=["approve", {"id": "reject", "label": "Reject it"}]
        )
    record(job, f"resumed:{ctx.resume_action}")
    ctx.step("apply", _recorded_step(job, "apply"))
    return {"action": ctx.resume_action, "data": ctx.resume_data}


@states_ask.revert
def undo_states_ask(job, ctx):
    ctx.step("undo_check", _recorded_step(job, "undo_check"))


# Scripted runs: entry N does subject["plan"][N]. ------------------------------------------------


def _play(job, ctx):
    entry = recorded(job, "entry")
    record(job, "entry")
    record(job, f"attempt:{ctx.attempt}")
    plan = job.subject["plan"]
    action = plan[min(entry, len(plan) - 1)]
    if action == "ok":
        return {"entry": entry}
    if action == "transient":
        raise TransientError(f"temporary outage on entry {entry}")
    if action == "retryable_joberror":
        raise JobError("states_flaky", "flaky upstream", retryable=True)
    if action == "coded":
        raise JobError("states_custom", "a coded, permanent failure")
    if action == "timeout":
        raise TimeoutError("upstream timed out")
    if action == "fatal":
        raise ValueError("boom: password=hunter2")
    if action == "retry_later":
        ctx.retry_later(job.subject.get("delay", 120), reason="rate limited")
    raise AssertionError(f"unknown plan action {action!r}")


states_scripted = job("states_scripted", title="States: scripted", max_attempts=3)(_play)


def _states_scripted_kind_backoff(job, ctx):
    return _play(job, ctx)


states_scripted_kind_backoff = job(
    "states_scripted_kind_backoff",
    title="States: kind backoff",
    max_attempts=5,
    backoff_base=5,
    backoff_max=8,
)(_states_scripted_kind_backoff)


def _states_scripted_predicate(job, ctx):
    return _play(job, ctx)


states_scripted_predicate = job(
    "states_scripted_predicate",
    title="States: retryable predicate",
    max_attempts=3,
    retryable=lambda exc: isinstance(exc, TimeoutError),
)(_states_scripted_predicate)


# Cancelling from inside a run. ------------------------------------------------------------------


@job("states_cancel_at_boundary", title="States: cancel at step boundary", steps=["first", "second", "third"])
def states_cancel_at_boundary(job, ctx):
    from django_durajobs import cancel

    def first():
        record(job, "step:first")
        cancel(job.pk)  # an operator's click while the step runs
        return "first done"

    ctx.step("first", first)
    ctx.step("second", _recorded_step(job, "second"))
    ctx.step("third", _recorded_step(job, "third"))
    return "never"


@job("states_cancel_at_check", title="States: cancel at check_cancel")
def states_cancel_at_check(job, ctx):
    from django_durajobs import cancel

    cancel(job.pk)
    record(job, "before_check")
    ctx.check_cancel()
    record(job, "after_check")
    return "never"


# Reverts. --------------------------------------------------------------------------------------


@job("states_revert_fails_once", title="States: revert fails once", steps=["work"])
def states_revert_fails_once(job, ctx):
    ctx.step("work", _recorded_step(job, "work"))
    return "worked"


@states_revert_fails_once.revert
def undo_states_revert_fails_once(job, ctx):
    ctx.step("undo_a", _recorded_step(job, "undo_a"))

    def undo_b():
        record(job, "step:undo_b")
        if recorded(job, "step:undo_b") == 1:
            raise RuntimeError("the old release is gone")
        return "restored"

    ctx.step("undo_b", undo_b)


@job("states_same_step_id", title="States: same step id in run and revert")
def states_same_step_id(job, ctx):
    return ctx.step("shared", lambda: "from-run")


@states_same_step_id.revert
def undo_states_same_step_id(job, ctx):
    seen = ctx.step("shared", lambda: "from-revert")
    record(job, f"revert-saw:{seen}")


# Steps and visible state. ------------------------------------------------------------------------


@job("states_undeclared", title="States: undeclared steps", steps=[("declared", "Declared")])
def states_undeclared(job, ctx):
    ctx.step("extra_one", _recorded_step(job, "extra_one"), title="Extra one")
    ctx.step("declared", _recorded_step(job, "declared"))
    ctx.step("extra_two", _recorded_step(job, "extra_two"))
    return "ok"


@job("states_busy", title="States: busy", steps=["work"])
def states_busy(job, ctx):
    """Steps, log lines, progress and an ETA: none of them is a state change."""
    for number in range(job.subject.get("lines", 3)):
        ctx.log(f"line {number}")
    ctx.progress(40)
    ctx.eta(timedelta(minutes=5))
    ctx.step("work", _recorded_step(job, "work"))
    ctx.progress(90)
    return "ok"


# describe(): a kind shaped like the DESIGN.md example. ------------------------------------------


@job(
    "states_deploy",
    title="States: deploy site",
    steps=[("build", "Build"), ("upload", "Upload files"), ("switch", "Switch traffic")],
)
def states_deploy(job, ctx):
    art = ctx.step("build", lambda: {"path": "/srv/build", "api_key": "k-123456"})
    ctx.step("upload", lambda: art["path"])
    ctx.step("switch", lambda: True)
    return {"url": "https://example.com"}


@states_deploy.revert
def undo_states_deploy(job, ctx):
    ctx.step("undo_switch", lambda: True)


@job(
    "states_cancel_then_wait", title="States: cancel requested, then the run waits", steps=["first", "second"]
)
def states_cancel_then_wait(job, ctx):
    """A step requests a cancel; then (subject ``then``) the run waits, asks, retry_laters or fails once."""
    from django_durajobs import cancel

    def first():
        record(job, "step:first")
        cancel(job.pk)
        return "first done"

    ctx.step("first", first)
    then = job.subject["then"]
    if then == "wait":
        ctx.wait_external("Waiting for the DNS record")
    elif then == "needs_user":
        ctx.needs_user("Overwrite?", actions=["approve"])
    elif then == "retry_later":
        ctx.retry_later(600)
    elif then == "fail_once" and not recorded(job, "failed"):
        record(job, "failed")
        raise ValueError("disk full")
    ctx.step("second", _recorded_step(job, "second"))
    return "finished"


@job("states_revert_waits", title="States: a revert that tries to wait or ask")
def states_revert_waits(job, ctx):
    return "done"


@states_revert_waits.revert
def undo_states_revert_waits(job, ctx):
    if job.subject.get("asks"):
        ctx.needs_user("Undo the DNS change too?", actions=[{"id": "yes", "label": "Yes"}])
    ctx.wait_external("the registrar's confirmation")
