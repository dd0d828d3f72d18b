"""Job kinds for the operator CLI's tests (tests/integration/test_cli.py, tests/e2e/test_cli_watch.py).

- ``cli_steps``: three steps; the second holds at the gate ``middle`` (``tests/testapp/gates.py``,
  under ``subject["dir"]``) when the subject has a ``dir``; reports progress after each step.
  ``subject["fail"]`` makes the last step raise. It has a revert.
- ``cli_question``: asks a question with the answers ``approve`` and ``decline``; resumed, it
  returns the answer and the data.
"""

from __future__ import annotations

from django_durajobs import job
from tests.testapp.gates import hold_until_go

STEPS = [("fetch", "Fetch the thing"), ("middle", "Work on it"), ("finish", "Finish")]


@job("cli_steps", title="CLI: three steps", steps=STEPS)
def cli_steps(job, ctx):
    ctx.step("fetch", lambda: {"token": "secret-token-value", "password": "hunter2"})
    ctx.progress(33)

    def middle():
        if "dir" in job.subject:
            hold_until_go(job, "middle")
        return "worked"

    ctx.step("middle", middle)
    ctx.progress(66)

    def finish():
        if job.subject.get("fail"):
            raise RuntimeError("the finish broke")
        return "finished"

    ctx.step("finish", finish)
    return {"ok": True}


@cli_steps.revert
def undo_cli_steps(job, ctx):
    ctx.step("undo", lambda: "undone")


@job("cli_question", title="CLI: asks a question")
def cli_question(job, ctx):
    if ctx.resume_action is None or ctx.resume_action == "":
        ctx.needs_user(
            "Approve the thing?",
            actions=[{"id": "approve", "label": "Approve"}, {"id": "decline", "label": "No"}],
        )
    return {"answer": ctx.resume_action, "data": ctx.resume_data}
