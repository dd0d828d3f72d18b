"""Job kinds for tests/e2e/test_secret_corpus.py and tests/e2e/test_redaction_worker.py.

``secrets_everywhere`` puts the text of its subject into every place a job can put text: log
lines, a step result, and then, by ``subject["ending"]``, an exception raised inside a step (with
the text in a local variable of the frame that raises), one raised by the run itself, a wait
reason, a question to a person, or the run's result. The text is always on a line of its own, as
a program would print it.

``secrets_huge_failure`` raises an exception with a message of about a megabyte while
``secrets_healthy`` runs its steps on the same worker.
"""

from __future__ import annotations

import time

from django_durajobs import job
from tests.helpers import wait_for
from tests.testapp.models import SideEffect

ENDINGS = ("raise_in_step", "raise", "wait", "ask", "done")


def _connect(text: str) -> None:
    credentials = text  # the secret in a local variable of the frame that raises
    raise ConnectionError(f"could not connect with\n{credentials}")


@job("secrets_family", title="Secrets: the parent of the corpus jobs")
def secrets_family(job, ctx):
    return None


@job("secrets_everywhere", title="Secrets: everywhere", steps=[("fetch", "Fetch"), ("use", "Use")])
def secrets_everywhere(job, ctx):
    text, ending = job.subject["text"], job.subject["ending"]
    ctx.log(text)
    ctx.log(f"connecting with\n{text}")
    ctx.step("fetch", lambda: {"config": text})
    if ending == "raise_in_step":
        ctx.step("use", lambda: _connect(text))
    if ending == "raise":
        _connect(text)
    if ending == "wait":
        ctx.wait_external(f"Waiting for the vault:\n{text}")
    if ending == "ask":
        ctx.needs_user(f"Is this right?\n{text}", actions=["yes", "no"])
    return {"used": text, "note": f"done with\n{text}"}


# A megabyte of text that the old redaction needed minutes for, holding a secret.
HUGE_SECRET = "Huge-FAKE-secret-0b7d"
HEALTHY_STEPS = tuple(f"step_{number}" for number in range(6))
HEALTHY_STEP_SECONDS = 0.6


def huge_message() -> str:
    run = "tokentoken_password" * 55_000
    return f"login failed: password={HUGE_SECRET}{run} and token: {run} and more"


def healthy_effect(job_id: int, step: str) -> str:
    return f"secrets:{job_id}:{step}"


@job("secrets_huge_failure", title="Secrets: a huge failure", max_attempts=3, retryable=lambda exc: True)
def secrets_huge_failure(job, ctx):
    if ctx.attempt == 1:  # the healthy job is running when the first failure comes
        wait_for(
            lambda: SideEffect.objects.filter(name__startswith="secrets:", name__endswith=":step_0").exists(),
            timeout=30,
        )
    raise RuntimeError(huge_message())


@job("secrets_healthy", title="Secrets: a healthy job beside it", steps=list(HEALTHY_STEPS))
def secrets_healthy(job, ctx):
    def run_step(step: str) -> None:
        SideEffect.objects.create(name=healthy_effect(job.pk, step))
        time.sleep(HEALTHY_STEP_SECONDS)

    for step in HEALTHY_STEPS:
        ctx.step(step, lambda step=step: run_step(step))
    return {"steps": len(HEALTHY_STEPS)}
