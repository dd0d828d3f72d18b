"""Job kinds for the telemetry tests (tests/integration/test_telemetry.py, test_metrics.py).

- ``traced_steps``: two steps, ``fetch`` and ``store``; ``subject["fail"]`` makes ``store``
  raise with a password in its message.
- ``traced_flaky``: its step raises ``TimeoutError`` (retryable) on the first try.
- ``traced_async``: an ``async def`` run with two awaited steps.
- ``traced_parent``: enqueues one ``traced_steps`` child and waits for it.
"""

from __future__ import annotations

import asyncio

from django_durajobs import job

SECRET = "hunter2-telemetry"


@job("traced_steps", steps=[("fetch", "Fetch"), ("store", "Store")])
def traced_steps(job, ctx):
    ctx.step("fetch", lambda: 1)

    def store() -> int:
        if job.subject.get("fail"):
            raise RuntimeError(f"cannot connect with password={SECRET}")
        return 2

    return ctx.step("store", store)


@job("traced_flaky", max_attempts=2, retryable=lambda exc: isinstance(exc, TimeoutError), backoff_base=30)
def traced_flaky(job, ctx):
    def fetch() -> str:
        if ctx.attempt == 1:
            raise TimeoutError("upstream timed out")
        return "ok"

    return ctx.step("fetch", fetch)


@job("traced_async")
async def traced_async(job, ctx):
    async def first() -> int:
        await asyncio.sleep(0)
        return 1

    await ctx.step("first", first)
    return await ctx.step("second", lambda: 2)


@job("traced_parent")
def traced_parent(job, ctx):
    ctx.enqueue_child("traced_steps", "only")
    return ctx.wait_for_children()
