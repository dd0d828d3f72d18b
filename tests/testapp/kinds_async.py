"""Job kinds for the async tests (tests/integration/test_async_jobs.py, tests/e2e/test_async_workers.py,
tests/e2e/test_async_asgi.py).

Every step that really runs writes a ``SideEffect`` row named ``"<job id>:<step>"`` (with Django's
async ORM where the step is async), so a test counts how often it ran, across processes.

- ``async_three_steps``: three ``async def`` steps; ``subject["block_at"]`` names one that holds
  at its gate (``tests/testapp/gates.py``, under ``subject["dir"]``) after its effect.
- ``async_step_forms``: one step of each form ``await ctx.step`` takes — an async function, a
  sync one (run in a thread), a lambda that returns a coroutine, a coroutine itself — then it
  waits for an outside event until resumed with data (or at once, ``subject["no_wait"]``), and
  then one more step.
- ``async_sleeper``: one step that awaits ``asyncio.sleep(subject["seconds"])``.
- ``async_blocker``: one step that blocks its event loop with ``time.sleep(subject["seconds"])``,
  never awaiting (what no async job should do; the worker's heartbeats must go on all the same).
- ``async_question``: asks (``await ctx.needs_user``) and returns the answer.
- ``async_event_waiter``: awaits the event ``subject["name"]`` and returns its payload.
- ``async_atomic``: an atomic sync step that writes, then raises when ``subject["fail"]``.
- ``async_atomic_coroutine``: an atomic step with an async function (refused).
- ``async_flaky``: its step raises ``TimeoutError`` (retryable) on the first try.
- ``async_reporter``: logs a line and sets its progress, awaited.
- ``async_deploy``: a step, and an ``async def`` revert with steps of its own.
- ``async_parent``: enqueues ``subject["children"]`` ``async_child`` jobs and awaits them.
- ``async_cancel_itself`` / ``async_pause_itself``: its first step asks to cancel (pause) the
  job, through ``acancel`` (``apause``); the next step boundary stops it.
- ``async_slow_step``: a step that sleeps past the kind's 0.5 s timeout (``await asyncio.sleep``).
- ``sync_calls_async_step``: a sync job that passes an async function to ``ctx.step`` (refused).
"""

from __future__ import annotations

import asyncio
import time
from collections import Counter
from functools import partial

from django_durajobs import acancel, apause, job
from tests.testapp.gates import ahold_until_go
from tests.testapp.models import SideEffect

ASYNC_STEPS = ("fetch", "transform", "store")


def effect_name(job_id: int, step: str) -> str:
    return f"{job_id}:{step}"


def effect_counts(job_id: int, steps) -> dict[str, int]:
    """How often each of ``steps`` really ran, across processes."""
    counts = Counter(SideEffect.objects.filter(name__startswith=f"{job_id}:").values_list("name", flat=True))
    return {step: counts[effect_name(job_id, step)] for step in steps}


async def aeffect(job, step: str) -> dict:
    await SideEffect.objects.acreate(name=effect_name(job.pk, step))
    if step == job.subject.get("block_at"):
        await ahold_until_go(job, step)
    return {"step": step, "job": job.pk}


def effect(job, step: str) -> dict:
    SideEffect.objects.create(name=effect_name(job.pk, step))
    return {"step": step, "job": job.pk}


@job("async_three_steps", title="Async: three steps", steps=list(ASYNC_STEPS))
async def async_three_steps(job, ctx):
    return {"steps": [await ctx.step(step, partial(aeffect, job, step)) for step in ASYNC_STEPS]}


@job("async_step_forms", steps=["async_function", "sync_function", "returns_coroutine", "coroutine"])
async def async_step_forms(job, ctx):
    results = [
        await ctx.step("async_function", partial(aeffect, job, "async_function")),
        await ctx.step("sync_function", lambda: effect(job, "sync_function")),
        await ctx.step("returns_coroutine", lambda: aeffect(job, "returns_coroutine")),
        await ctx.step("coroutine", aeffect(job, "coroutine")),
    ]
    if ctx.resume_data is None and not job.subject.get("no_wait"):
        await ctx.wait_external("Waiting for the upstream build")
    results.append(await ctx.step("after_wait", partial(aeffect, job, "after_wait")))
    return {"steps": results}


@job("async_sleeper")
async def async_sleeper(job, ctx):
    return await ctx.step("sleep", partial(_sleep, job.subject["seconds"]))


async def _sleep(seconds: float) -> float:
    await asyncio.sleep(seconds)
    return seconds


@job("async_blocker")
async def async_blocker(job, ctx):
    async def block() -> str:
        time.sleep(job.subject["seconds"])  # blocks the loop: no await until it is over
        return "blocked"

    return await ctx.step("block", block)


@job("async_event_waiter", steps=["after"])
async def async_event_waiter(job, ctx):
    payload = await ctx.wait_for_event(job.subject["name"])
    await ctx.step("after", lambda: payload)
    return {"payload": payload}


@job("async_question")
async def async_question(job, ctx):
    if ctx.resume_action is None:
        await ctx.needs_user("Ship the release?", actions=["ship", "hold"])
    return {"chose": ctx.resume_action, "data": ctx.resume_data}


@job("async_atomic")
async def async_atomic(job, ctx):
    def write_then_maybe_fail() -> str:
        SideEffect.objects.create(name=effect_name(job.pk, "write"))
        if job.subject.get("fail"):
            raise ValueError("the write's second half failed")
        return "written"

    return await ctx.step("write", write_then_maybe_fail, atomic=True)


@job("async_atomic_coroutine")
async def async_atomic_coroutine(job, ctx):
    return await ctx.step("write", partial(aeffect, job, "write"), atomic=True)


@job("async_flaky", max_attempts=2, retryable=lambda exc: isinstance(exc, TimeoutError), backoff_base=30)
async def async_flaky(job, ctx):
    async def fetch() -> str:
        await SideEffect.objects.acreate(name=effect_name(job.pk, "fetch"))
        if ctx.attempt == 1:
            raise TimeoutError("upstream timed out")
        return "fetched"

    return await ctx.step("fetch", fetch)


@job("async_reporter")
async def async_reporter(job, ctx):
    await ctx.log("Copying 3 files, token=s3cr3t-value")
    await ctx.progress(40)
    return "reported"


@job("async_deploy", steps=["deploy"])
async def async_deploy(job, ctx):
    return await ctx.step("deploy", partial(aeffect, job, "deploy"))


@async_deploy.revert
async def undo_async_deploy(job, ctx):
    await ctx.step("restore", partial(aeffect, job, "restore"))


@job("async_child")
async def async_child(job, ctx):
    return await ctx.step("work", lambda: job.subject["value"])


@job("async_parent", steps=["fan_out", "report"])
async def async_parent(job, ctx):
    async def fan_out() -> list[int]:
        return [
            (await ctx.enqueue_child("async_child", str(value), subject={"value": value})).pk
            for value in range(job.subject["children"])
        ]

    await ctx.step("fan_out", fan_out)
    summary = await ctx.wait_for_children()
    return await ctx.step("report", lambda: summary["by_status"])


async def _ask(operation, job) -> str:
    await operation(job.pk)
    return "asked"


@job("async_cancel_itself", steps=["ask", "never"])
async def async_cancel_itself(job, ctx):
    await ctx.step("ask", partial(_ask, acancel, job))
    await ctx.step("never", partial(aeffect, job, "never"))


@job("async_pause_itself", steps=["ask", "then"])
async def async_pause_itself(job, ctx):
    await ctx.step("ask", partial(_ask, apause, job))  # done once: replayed when resumed
    return await ctx.step("then", partial(aeffect, job, "then"))


@job("async_slow_step", timeout=0.5)
async def async_slow_step(job, ctx):
    return await ctx.step("slow", partial(_sleep, job.subject.get("seconds", 1.0)))


@job("sync_calls_async_step")
def sync_calls_async_step(job, ctx):
    return ctx.step("fetch", partial(aeffect, job, "fetch"))
