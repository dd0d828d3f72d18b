"""Django Tasks (``@task``) run on ``DurableBackend`` (tests/integration/test_tasks_*.py and
tests/e2e/test_tasks_workers.py).

Not imported by ``jobs.py``: a worker finds these by their dotted path, as it finds a project's.
"""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any

from django_durajobs.tasks.compat import TaskContext
from tests.testapp.gates import hold_until_go
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
