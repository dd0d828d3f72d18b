"""A task as a job: the kind it becomes, how a worker finds it by its dotted path, and one try."""

from __future__ import annotations

import re
import sys
from dataclasses import dataclass, replace
from functools import partial
from typing import TYPE_CHECKING, Any

from asgiref.sync import iscoroutinefunction
from django.dispatch import Signal
from django.utils import timezone
from django.utils.module_loading import import_string
from django.utils.translation import gettext as _

from ..engine import retry
from ..engine.interrupts import Interrupt
from ..errors import JobError, LeaseLost, raised_by_the_job
from ..redaction import package_logger
from ..registry import JobKind, register_kind
from ..store import database_trouble
from .compat import (
    InvalidTask,
    Task,
    TaskResult,
    TaskResultStatus,
    normalize_json,
    task_finished,
    task_started,
)
from .context import DurableTaskContext
from .exact import read_back, storable
from .results import failure_text, parsed_failure, stored_task, task_result, try_step_id

if TYPE_CHECKING:
    from ..engine.async_context import AsyncJobContext
    from ..engine.context import JobContext
    from ..models import Job

logger = package_logger("django_durajobs.tasks")

DOTTED_PATH = re.compile(r"[A-Za-z_]\w*(\.[A-Za-z_]\w*)+", re.ASCII)


@dataclass(eq=False)
class TaskKind(JobKind):
    """The kind of a task's jobs: named by the task's dotted path, run by ``run_task``."""

    task: Any = None


class TryFailed(JobError):
    """A try's exception, as its step keeps it: class path, worker and redacted traceback."""

    def __init__(self, exc: BaseException, worker_id: str) -> None:
        super().__init__("task_failed", failure_text(exc, worker_id))
        self.raised = exc


def _kind(task: Task) -> TaskKind:
    is_async = iscoroutinefunction(task.func)
    return TaskKind(
        name=task.module_path,
        run=run_async_task if is_async else run_task,
        run_is_async=is_async,
        title=task.name,
        max_attempts=getattr(task, "max_attempts", 1),
        retryable=getattr(task, "retryable", None),
        queue=task.queue_name,
        priority=task.priority,
        task=task,
    )


def task_kind(task: Task) -> TaskKind:
    """The kind of ``task``'s jobs, registered on first use."""
    try:
        kind = register_kind(_kind(task))
    except ValueError as taken:
        raise InvalidTask(f"The task's dotted path is a job kind's name: {taken}") from None
    assert isinstance(kind, TaskKind)
    return kind


def find_task_kind(name: str) -> TaskKind | None:
    """The kind of the task at the dotted path ``name``, for a worker that meets its job first.

    None when nothing is there to import; ``JobError`` when something is but it is not a task of
    a ``DurableBackend`` (``not_a_task``), or importing it failed (``unknown_job_kind``).
    """
    from .backend import DurableBackend

    if not DOTTED_PATH.fullmatch(name):
        return None
    try:
        found = import_string(name)
    except ImportError:
        return None
    except Exception as exc:
        raise JobError(
            "unknown_job_kind",
            _("Importing the task %(task)s failed: %(type)s: %(error)s")
            % {"task": repr(name), "type": type(exc).__name__, "error": exc},
        ) from exc
    if not isinstance(found, Task):
        raise JobError(
            "not_a_task",
            _("%(task)s is a %(type)s, not a task (@task).")
            % {"task": repr(name), "type": type(found).__name__},
        )
    if found.module_path != name:
        raise JobError(
            "not_a_task",
            _("%(task)s is the task %(path)s under another name.")
            % {"task": repr(name), "path": repr(found.module_path)},
        )
    try:
        backend = found.get_backend()
    except Exception as exc:
        raise JobError(
            "not_a_task",
            _("The backend of task %(task)s is unusable: %(error)s") % {"task": repr(name), "error": exc},
        ) from exc
    if not isinstance(backend, DurableBackend):
        raise JobError(
            "not_a_task",
            _("Task %(task)s runs on %(backend)s, not on DurableBackend.")
            % {"task": repr(name), "backend": type(backend).__name__},
        )
    return _kind(found)


def _send(signal: Signal, result: TaskResult) -> None:
    """Django's task signals, sent so that a failing receiver is logged and the try goes on."""
    from .backend import DurableBackend

    for receiver, outcome in signal.send_robust(sender=DurableBackend, task_result=result):
        if isinstance(outcome, Exception):
            logger.error("Task signal receiver %r failed for task %s", receiver, result.id, exc_info=outcome)


def _send_while_handling(exc: BaseException, result: TaskResult) -> None:
    """``task_finished`` for a failed task, sent while ``exc`` is being handled, as Django sends
    it: its own receiver logs the traceback (``sys.exc_info()``), in this thread too."""
    if sys.exc_info()[1] is exc:
        _send(task_finished, result)
        return
    try:
        raise exc
    except BaseException:
        _send(task_finished, result)


def _ended(running: TaskResult, status: TaskResultStatus, **changes: Any) -> TaskResult:
    value = changes.pop("return_value", None)
    ended = replace(running, status=status, finished_at=timezone.now(), **changes)
    object.__setattr__(ended, "_return_value", value)
    return ended


@dataclass
class TaskTry:
    """One try of a task: the step ``try-<attempt>`` that calls its function.

    ``task_started`` is sent before the call; ``task_finished`` when the try ends the task (it
    returned, or raised and will not be tried again), just before its worker records that.
    """

    job: Job
    ctx: JobContext
    kind: TaskKind
    task: Task
    running: TaskResult

    @classmethod
    def start(cls, job: Job, ctx: JobContext) -> TaskTry:
        """The try about to call the task, its ``task_started`` sent."""
        kind = ctx.kind
        assert isinstance(kind, TaskKind)
        step_id = try_step_id(ctx.attempt)
        earlier = [step for step in ctx.steps.values() if step.step_id != step_id]
        running = task_result(job, kind.task, earlier)
        object.__setattr__(running, "last_attempted_at", timezone.now())
        _send(task_started, running)
        return cls(job, ctx, kind, stored_task(kind.task, job), running)

    @property
    def step_id(self) -> str:
        return try_step_id(self.ctx.attempt)

    @property
    def title(self) -> str:
        return _("Try %(attempt)s") % {"attempt": self.ctx.attempt}

    def arguments(self, job_context: Any) -> tuple[tuple[Any, ...], dict[str, Any]]:
        """The call's positional and keyword arguments, the context first if the task takes it."""
        context = (
            (DurableTaskContext(task_result=self.running, job_context=job_context),)
            if self.task.takes_context
            else ()
        )
        return (*context, *self.running.args), dict(self.running.kwargs)

    def kept(self, value: Any) -> dict[str, Any]:
        """What the try's step keeps of the value the task returned."""
        return storable({"worker_id": self.ctx.worker_id, "return_value": normalize_json(value)})

    def failed(self, exc: BaseException) -> TryFailed:
        """The try's failure; ``task_finished`` is sent when no try follows."""
        failure = TryFailed(exc, self.ctx.worker_id)
        decision = retry.decide(
            exc, self.kind, self.job.attempt, self.job.max_attempts, timezone.now(), reverting=False
        )
        if isinstance(decision, retry.FailWith):
            error, _worker_id = parsed_failure(failure.message)
            _send_while_handling(
                exc, _ended(self.running, TaskResultStatus.FAILED, errors=[*self.running.errors, error])
            )
        return failure

    def returned(self, record: dict[str, Any]) -> Any:
        """The return value, once the try's step kept it; ``task_finished`` is sent."""
        value = read_back(record)["return_value"]
        _send(task_finished, _ended(self.running, TaskResultStatus.SUCCESSFUL, return_value=value))
        return value


def _propagates(exc: BaseException) -> bool:
    """Whether ``exc`` is not the task's failure: a wait or stop of its job, a lost lease or database."""
    return (
        isinstance(exc, (Interrupt, LeaseLost))
        or not raised_by_the_job(exc)
        or (isinstance(exc, Exception) and database_trouble(exc))
    )


def run_task(job: Job, ctx: JobContext) -> Any:
    """One try of a task (``TaskTry``); its function's exception is the run's."""
    this_try = TaskTry.start(job, ctx)

    def call() -> dict[str, Any]:
        args, kwargs = this_try.arguments(ctx)
        try:
            return this_try.kept(this_try.task.call(*args, **kwargs))
        except BaseException as exc:
            if _propagates(exc):
                raise
            raise this_try.failed(exc) from exc

    try:
        record = ctx.step(this_try.step_id, call, title=this_try.title)
    except TryFailed as failed:
        raised = failed.raised
    else:
        return this_try.returned(record)
    raise raised  # outside the handler: its own cause and context stay as they were


async def run_async_task(job: Job, actx: AsyncJobContext) -> Any:
    """One try of an ``async def`` task, awaited on the worker's event loop."""
    database = actx.threads.database
    this_try = await database(partial(TaskTry.start, job, actx.sync))

    async def call() -> dict[str, Any]:
        args, kwargs = this_try.arguments(actx)
        try:
            return this_try.kept(await this_try.task.func(*args, **kwargs))
        except BaseException as exc:
            if _propagates(exc):
                raise
            raise await database(partial(this_try.failed, exc)) from exc

    try:
        record: dict[str, Any] = await actx.step(this_try.step_id, call, title=this_try.title)
    except TryFailed as failed:
        raised = failed.raised
    else:
        return await database(partial(this_try.returned, record))
    raise raised
