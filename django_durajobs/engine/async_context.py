"""``ctx`` of an ``async def`` run or revert: the same checkpoints as ``JobContext``, awaited.

An async job runs on an event loop; its database work must not block the loop. So every member
that reads or writes the database runs the ``JobContext`` member of the same name in a thread
(``Threads.database``), and ``step()`` goes through ``JobContext``'s own parts of a step
(``open_step``, ``run_step``/``keep_result``, ``step_raised``, ``step_over``): the rules of a
checkpoint live there once.
"""

from __future__ import annotations

import functools
import inspect
from collections.abc import Awaitable, Callable, Coroutine
from dataclasses import dataclass
from datetime import timedelta
from typing import TYPE_CHECKING, Any, Concatenate, ParamSpec, Protocol, TypeVar

from asgiref.sync import iscoroutinefunction, sync_to_async
from django.utils.translation import gettext as _

from ..errors import JobError, raised_by_the_job
from .context import JobContext
from .open_step import OpenStep

if TYPE_CHECKING:
    from ..models import Job

T = TypeVar("T")
P = ParamSpec("P")


class Blocking(Protocol):
    """Runs blocking work off the event loop: ``await blocking(fn)`` is ``fn()``, called in a thread."""

    def __call__(self, fn: Callable[[], T], /) -> Awaitable[T]: ...


@dataclass(frozen=True)
class Threads:
    """Where an async job's blocking work runs: the engine's database work, and step functions
    that are not async (each of those with its checkpoint, so ``atomic=True`` spans both)."""

    database: Blocking
    steps: Blocking


def _in_the_calling_thread(fn: Callable[[], T]) -> Awaitable[T]:
    return sync_to_async(fn, thread_sensitive=True)()


#: ``drain()``'s threads: under ``async_to_sync`` every call goes back to the thread that drains,
#: inside its transaction (a test's), on its connection.
CALLING_THREAD = Threads(database=_in_the_calling_thread, steps=_in_the_calling_thread)


def _awaitable(
    member: Callable[Concatenate[JobContext, P], T],
) -> Callable[Concatenate[AsyncJobContext, P], Coroutine[Any, Any, T]]:
    """``member`` of ``JobContext``, awaited: called in a database thread, not on the loop."""

    async def awaited(self: AsyncJobContext, /, *args: P.args, **kwargs: P.kwargs) -> T:
        return await self.threads.database(functools.partial(member, self.sync, *args, **kwargs))

    functools.update_wrapper(awaited, member)
    return awaited


class AsyncJobContext:
    """Passed to an ``async def`` run or revert: ``await ctx.step(...)``, ``await ctx.log(...)``…

    The members are ``JobContext``'s; each one that waits on the database is a coroutine.
    """

    def __init__(self, sync: JobContext, threads: Threads) -> None:
        #: The job's ``JobContext``, which does the work.
        self.sync = sync
        self.threads = threads

    # The members that wait on the database, each ``JobContext``'s own, run in a thread: adding
    # one to ``JobContext`` takes a line here.
    log = _awaitable(JobContext.log)
    progress = _awaitable(JobContext.progress)
    eta = _awaitable(JobContext.eta)
    check_cancel = _awaitable(JobContext.check_cancel)
    wait_external = _awaitable(JobContext.wait_external)
    needs_user = _awaitable(JobContext.needs_user)
    retry_later = _awaitable(JobContext.retry_later)
    wait_for_children = _awaitable(JobContext.wait_for_children)
    wait_for_event = _awaitable(JobContext.wait_for_event)
    # Its **kwargs could name "self": mypy asks for a positional-only self, which this call passes.
    enqueue_child = _awaitable(JobContext.enqueue_child)  # type: ignore[arg-type]

    @property
    def job(self) -> Job:
        return self.sync.job

    @property
    def attempt(self) -> int:
        return self.sync.attempt

    @property
    def reverting(self) -> bool:
        return self.sync.reverting

    @property
    def version(self) -> str:
        return self.sync.version

    @property
    def worker_id(self) -> str:
        return self.sync.worker_id

    @property
    def resume_action(self) -> str | None:
        return self.sync.resume_action

    @property
    def resume_data(self) -> Any:
        return self.sync.resume_data

    async def step(
        self,
        step_id: str,
        fn: Callable[[], Awaitable[T]] | Callable[[], T] | Awaitable[T],
        title: str | None = None,
        atomic: bool = False,
        timeout: float | timedelta | None = None,
    ) -> T:
        """``JobContext.step``, awaited: ``fn`` is an async function, a function (run in a thread),
        a function that returns an awaitable (``lambda: fetch(url)``), or an awaitable itself.

        ``atomic=True`` needs a function that is not async: one transaction cannot span awaits.
        """
        if atomic and (iscoroutinefunction(fn) or inspect.isawaitable(fn)):
            _close_unawaited(fn)
            raise JobError(
                "invalid_input",
                _(
                    "Step %(step)s is atomic, so its function must not be async: "
                    "a transaction cannot span awaits."
                )
                % {"step": repr(step_id)},
            )
        ctx = self.sync
        open_it = functools.partial(ctx.open_step, step_id, title, timeout)
        opened: OpenStep = await self.threads.database(open_it)
        if opened.replayed:
            _close_unawaited(fn)
            return opened.result  # type: ignore[no-any-return]  # what fn returned, read back from JSON
        try:
            result: T = await self._run_step(opened, fn, atomic)
            return result
        except BaseException as raised:
            if raised_by_the_job(raised):
                await self.threads.database(functools.partial(ctx.step_raised, opened, raised))
            raise
        finally:
            ctx.step_over(opened)

    async def _run_step(self, opened: OpenStep, fn: Any, atomic: bool) -> Any:
        ctx = self.sync
        if inspect.isawaitable(fn):
            value = await fn
        elif iscoroutinefunction(fn):
            value = await fn()
        elif atomic:
            return await self.threads.steps(functools.partial(ctx.run_step, opened, fn, atomic=True))
        else:
            value = await self.threads.steps(fn)
            if inspect.isawaitable(value):  # lambda: some_coroutine_function(...)
                value = await value
        return await self.threads.database(functools.partial(ctx.keep_result, opened, value))


def _close_unawaited(fn: object) -> None:
    """A coroutine passed for a step that will not run is closed, so it warns of nothing."""
    if inspect.iscoroutine(fn):
        fn.close()
