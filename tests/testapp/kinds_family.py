"""Job kinds for the parent/children tests (tests/integration/test_family.py and
tests/e2e/test_family_workers.py).

Every run records what it did as ``SideEffect`` rows named ``family:<job id>:<what>``, so a test
counts across processes how often a job ran, what a parent saw, and in which order reverts ran.

- ``family_leaf``: a child job. Subject: ``failures`` (its first N runs raise), ``needs_user``
  (it asks a person), ``hold`` with ``dir`` (its ``work`` step holds on the job's go file, then a
  second step ``finish`` follows, so a cancel requested during the hold is seen there),
  ``revert_failures`` (its first N reverts raise). Its revert has one step, ``undo``, that writes
  ``family:<id>:undone``.
- ``family_quick``: a child that does nothing but finish (for families run by many workers).
- ``family_fan_out``: a parent. An ``atomic=True`` step ``fan_out`` (``subject["atomic"]=False``:
  a plain step) writes ``family:<id>:fan_out`` and creates one child per entry of
  ``subject["children"]`` (their subjects; kind ``subject["child_kind"]``, by default
  ``family_leaf``) with ``ctx.enqueue_child``, then the run calls
  ``ctx.wait_for_children()`` and records the summary it got (``family:<id>:got:<overall>:<by
  status as JSON>``). ``on_partial``: ``"accept"`` (default: return the summary's gist),
  ``"fail"`` (a family that is not all done fails the parent with ``JobError(<overall>)``),
  ``"retry"`` (retry the failed children once, in an atomic step, wait again, then as
  ``"fail"``). A step ``report`` follows the fan-in (a step boundary, where a requested cancel
  is seen). Holds, with ``dir``: ``hold_in_fan_out_after=N`` holds inside the fan-out step after
  its N-th child; ``hold_before_wait`` holds between the fan-out step and the wait. Its revert
  has one step, ``undo``, that writes ``family:<id>:undone``.

A hold is the gate ``work``, ``fan_out`` or ``before_wait`` of ``tests/testapp/gates.py``.
"""

from __future__ import annotations

import json

from django_durajobs import Job, JobError, JobLog, Status, enqueue, job
from tests.testapp.gates import hold_until_go
from tests.testapp.models import SideEffect


def effect(job_id: int, what: str) -> str:
    return f"family:{job_id}:{what}"


def record(job_obj, what: str) -> None:
    SideEffect.objects.create(name=effect(job_obj.pk, what))


def recorded(job_id: int, what: str) -> int:
    return SideEffect.objects.filter(name=effect(job_id, what)).count()


def got_records(job_id: int) -> list[tuple[str, dict]]:
    """What a parent's runs got from ``wait_for_children()``: ``(overall, by_status)``, in order."""
    prefix = effect(job_id, "got:")
    names = SideEffect.objects.filter(name__startswith=prefix).order_by("id").values_list("name", flat=True)
    seen = []
    for name in names:
        overall, by_status = name.removeprefix(prefix).split(":", 1)
        seen.append((overall, json.loads(by_status)))
    return seen


# The child ---------------------------------------------------------------------------------------


@job("family_leaf", title="Family: leaf")
def family_leaf(job, ctx):
    subject = job.subject
    runs_before = recorded(job.pk, "run")
    record(job, "run")
    if runs_before < subject.get("failures", 0):
        raise RuntimeError(f"{job.label}: target unreachable")
    if subject.get("needs_user"):
        ctx.needs_user(f"{job.label}: overwrite the target?", actions=["overwrite", "skip"])

    def work():
        if subject.get("hold"):
            hold_until_go(job, "work")
        return job.label

    worked = ctx.step("work", work)
    ctx.step("finish", lambda: None)
    return {"worked": worked}


@family_leaf.revert
def undo_family_leaf(job, ctx):
    reverts_before = recorded(job.pk, "revert")
    record(job, "revert")
    if reverts_before < job.subject.get("revert_failures", 0):
        raise RuntimeError(f"{job.label}: the target refused the undo")
    ctx.step("undo", lambda: record(job, "undone"))


@job("family_quick", title="Family: quick")
def family_quick(job, ctx):
    return {"target": job.label}


# The parent --------------------------------------------------------------------------------------


def _fan_out(job_obj, ctx) -> dict:
    subject = job_obj.subject
    record(job_obj, "fan_out")  # inside the atomic step: it exists only if the step committed
    for number, child_subject in enumerate(subject["children"]):
        kind = subject.get("child_kind", "family_leaf")
        ctx.enqueue_child(kind, f"t{number}", subject=child_subject, label=f"target {number}")
        if number + 1 == subject.get("hold_in_fan_out_after"):
            hold_until_go(job_obj, "fan_out")
    return {"created": len(subject["children"])}


def _retry_failed(job_obj) -> list[int]:
    from django_durajobs import retry

    failed = Job.objects.filter(parent_id=job_obj.pk, status__in=(Status.FAILED, Status.NEEDS_USER))
    return [retry(child).pk for child in failed.order_by("id")]


def _received(job_obj, ctx) -> dict:
    summary = ctx.wait_for_children()
    record(job_obj, f"got:{summary['overall']}:{json.dumps(summary['by_status'], sort_keys=True)}")
    return summary


@job("family_fan_out", title="Family: fan out and in", steps=[("fan_out", "Create the child jobs")])
def family_fan_out(job, ctx):
    subject = job.subject
    on_partial = subject.get("on_partial", "accept")
    record(job, "run")
    ctx.step("fan_out", lambda: _fan_out(job, ctx), atomic=subject.get("atomic", True))
    if subject.get("hold_before_wait"):
        hold_until_go(job, "before_wait")
    summary = _received(job, ctx)
    if summary["overall"] == "partial" and on_partial == "retry":
        ctx.step("retry_failed", lambda: _retry_failed(job), atomic=True)
        summary = _received(job, ctx)
    if summary["overall"] != "done" and on_partial in ("fail", "retry"):
        unsuccessful = [
            f"{child['label']} ({child['status']})"
            for child in summary["children"]
            if child["status"] != "done"
        ]
        message = f"{len(unsuccessful)} of {summary['total']} child jobs did not succeed"
        raise JobError(summary["overall"], f"{message}: {', '.join(unsuccessful)}")
    return ctx.step("report", lambda: {"overall": summary["overall"], "by_status": summary["by_status"]})


@family_fan_out.revert
def undo_family_fan_out(job, ctx):
    record(job, "revert")
    ctx.step("undo", lambda: record(job, "undone"))


def fan_out(children, priority=None, **subject):
    """Enqueue a ``family_fan_out`` parent whose children have the subjects ``children``."""
    parent, _ = enqueue("family_fan_out", subject={"children": children, **subject}, priority=priority)
    return parent


def settled_lines(parent):
    """The parent's log lines that say its children all settled (one per wake-up)."""
    lines = JobLog.objects.filter(job_id=parent.pk).order_by("id").values_list("line", flat=True)
    return [line for line in lines if "child jobs have settled" in line]
