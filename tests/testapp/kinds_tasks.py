"""Django Tasks (``@task``) run on ``DurableBackend`` (tests/integration/test_tasks_*.py and
tests/e2e/test_tasks_workers.py).

Not imported by ``jobs.py``: a worker finds these by their dotted path, as it finds a project's.
"""

from __future__ import annotations

import asyncio
import time
from types import SimpleNamespace
from typing import Any

from django_durajobs.tasks.compat import TaskContext
from tests.testapp.gates import ahold_until_go, hold_until_go
from tests.testapp.models import SideEffect

try:
    from django.tasks import task
except ImportError:  # Django 5.2: the backport
    from django_tasks import task  # type: ignore[no-redef]


class Flaky(Exception):
    retryable = True


@task()
def noop(*args: Any, **kwargs: Any) -> None:
    return None


@task
def noop_from_bare_decorator() -> None:
    return None


@task()
def calculate_meaning_of_life() -> int:
    return 42


@task()
def add(a: int, b: int) -> dict[str, int]:
    return {"sum": a + b}


@task()
def failing_value_error() -> None:
    raise ValueError("This task failed due to ValueError")


@task()
def failing_system_exit() -> None:
    raise SystemExit("This task failed due to SystemExit")


@task()
def complex_exception() -> None:
    raise ValueError(ValueError("This task failed"))


@task()
def complex_return_value() -> Any:
    return lambda: True  # neither JSON nor picklable


@task()
def leaks_a_secret() -> None:
    raise RuntimeError("login failed with password=hunter2 for api_key=sk_live_abcdef0123456789")


def _recurse(depth: int, left: int) -> None:
    if not left:
        raise ValueError(f"{depth} calls deep")
    _recurse_again(depth, left - 1)


def _recurse_again(depth: int, left: int) -> None:
    """Calls that alternate, so the traceback repeats no line it could fold."""
    _recurse(depth, left)


@task()
def deep_failure(depth: int) -> None:
    """Fails with a traceback far longer than a try keeps."""
    _recurse(depth, depth)


@task(takes_context=True)
def context_of_try(context: TaskContext) -> dict[str, Any]:
    return {
        "id": context.task_result.id,
        "attempt": context.attempt,
        "workers": context.task_result.worker_ids,
    }


@task(takes_context=True, max_attempts=3)
def fails_twice(context: TaskContext) -> int:
    if context.attempt < 3:
        raise Flaky(f"try {context.attempt} failed")
    return context.attempt


@task(max_attempts=2, retryable=lambda exc: isinstance(exc, TimeoutError))
def times_out_once_then_fails(marker: str) -> None:
    if not SideEffect.objects.filter(name=marker).exists():
        SideEffect.objects.create(name=marker)
        raise TimeoutError("first try")
    raise ValueError("second try")


@task(queue_name="special", priority=10)
def on_special_queue() -> str:
    return "special"


@task(takes_context=True)
def counted(context: TaskContext, name: str) -> str:
    """Writes a row per call, so a test counts how often the function really ran."""
    SideEffect.objects.create(name=f"{name}:{context.attempt}")
    return name


@task(takes_context=True)
def held(context: TaskContext, directory: str) -> dict[str, Any]:
    """Holds at the gate "held" (tests/testapp/gates.py) until the test says go; writes a row per call."""
    SideEffect.objects.create(name=f"held:{context.task_result.id}")
    hold_until_go(SimpleNamespace(pk=int(context.task_result.id), subject={"dir": directory}), "held")
    return {"workers": context.task_result.worker_ids, "attempt": context.attempt}


def not_a_task() -> None:
    """A plain function: a job naming it is refused."""


# The conformance suite: tests/integration/test_tasks_conformance.py, tests/e2e/test_tasks_on_runjobs.py


@task()
def failing_keyboard_interrupt() -> None:
    raise KeyboardInterrupt("This task failed due to KeyboardInterrupt")


@task()
def failing_with_long_message(length: int) -> None:
    raise ValueError("x" * (length - 1) + "!")


@task()
def failing_chained() -> None:
    try:
        raise KeyError("the cause")
    except KeyError as cause:
        raise RuntimeError("the consequence") from cause


@task()
def returns_a_secret() -> dict[str, str]:
    return {"token": "tok_0123456789abcdef", "user": "ann"}


@task()
def echo(*args: Any, **kwargs: Any) -> dict[str, Any]:
    return {"args": list(args), "kwargs": kwargs, "types": [type(arg).__name__ for arg in args]}


@task()
async def async_add(a: int, b: int) -> dict[str, int]:
    await asyncio.sleep(0)
    return {"sum": a + b}


@task()
async def async_failing() -> None:
    await asyncio.sleep(0)
    raise ValueError("This async task failed")


@task(takes_context=True)
async def async_context_of_try(context: TaskContext) -> dict[str, Any]:
    return {"id": context.task_result.id, "attempt": context.attempt}


def _part(result_id: str, part: str) -> str:
    SideEffect.objects.create(name=f"part:{result_id}:{part}")
    return part


@task(takes_context=True, max_attempts=2)
def three_parts(context: TaskContext, directory: str | None = None, fail_in: str | None = None) -> list[str]:
    """Three checkpointed parts; with ``directory``, holds at the gate "parts" after the second."""
    result_id = context.task_result.id
    done = [context.step(part, lambda part=part: _part(result_id, part)) for part in ("one", "two")]
    if directory:
        hold_until_go(SimpleNamespace(pk=int(result_id), subject={"dir": directory}), "parts")
    if fail_in == "three" and context.attempt == 1:
        raise Flaky("the third part failed on the first try")
    return [*done, context.step("three", lambda: _part(result_id, "three"))]


@task(takes_context=True)
async def async_three_parts(context: TaskContext, directory: str | None = None) -> list[str]:
    """``three_parts``, awaited; with ``directory``, holds at the gate "parts" after the second."""
    result_id = context.task_result.id
    parts = [await context.step(part, lambda part=part: _part(result_id, part)) for part in ("one", "two")]
    if directory:
        await ahold_until_go(SimpleNamespace(pk=int(result_id), subject={"dir": directory}), "parts")
    return [*parts, await context.step("three", lambda: _part(result_id, "three"))]


@task(takes_context=True)
def steps_as_tries(context: TaskContext) -> None:
    context.step("try-9", lambda: None)


def from_a_module_workers_lack() -> None:
    """A task whose dotted path names a module that is not there (deploy skew, a typo)."""


from_a_module_workers_lack.__module__ = "tests.testapp.not_deployed"
not_deployed = task()(from_a_module_workers_lack)


@task(takes_context=True)
def stuck_in_a_step(context: TaskContext, seconds: float) -> None:
    """A part that sleeps past its timeout: its worker gives the task up."""
    context.step("stuck", lambda: time.sleep(seconds), timeout=0.5)
