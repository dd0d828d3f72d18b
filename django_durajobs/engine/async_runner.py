"""Running one claimed async job: ``runner.execute``'s stages, with the run awaited and the
database work in threads.

Each stage is the sync runner's own (``begin``, ``prepare``, ``settle_value``,
``settle_raised``, ``record``), so an async job's outcome follows the same rules and every write
goes through the same fenced lease.
"""

from __future__ import annotations

from functools import partial

from asgiref.sync import async_to_sync

from .. import telemetry
from ..errors import JobError, LeaseLost, raised_by_the_job
from ..registry import JobKind, get_kind
from ..status import Status
from .async_context import CALLING_THREAD, AsyncJobContext, Threads
from .ports import RunStore
from .runner import L, Outcome, Ran, abandoned, begin, prepare, record, refused, settle_raised, settle_value


def runs_async(lease: RunStore) -> bool:
    """Whether the leased job's run (or revert) is a coroutine function."""
    return get_kind(lease.job.kind).runs_async(lease.job.status == Status.REVERTING)


async def execute_async(lease: L, threads: Threads) -> Ran[L]:
    """Run the leased async job to its next state, as ``runner.execute`` does a sync one.

    Cancelling the task (its worker gave the job up past its deadline, or is stopping) ends it
    where it awaits; whatever it would still write is refused by the lease.
    """
    kind, ctx = begin(lease)
    try:
        outcome = await _perform(kind, AsyncJobContext(ctx, threads))
    except LeaseLost as lost:
        return abandoned(ctx, lost)
    except JobError as exc:
        outcome = refused(ctx, exc)
    except BaseException:  # the database is gone, or the task was cancelled: its span ends here
        telemetry.end(ctx.span, "abandoned")
        raise
    return await threads.database(partial(record, lease, ctx, outcome))


async def _perform(kind: JobKind, actx: AsyncJobContext) -> Outcome:
    ctx, database = actx.sync, actx.threads.database
    try:
        function = await database(partial(prepare, kind, ctx))
        value = await function(ctx.job, actx)
    except BaseException as raised:
        if not raised_by_the_job(raised):
            raise
        return await database(partial(settle_raised, kind, ctx, raised))
    return await database(partial(settle_value, ctx, value))


def execute_here(lease: L) -> Ran[L]:
    """``drain()``: run an async job to its next state on an event loop of its own, with its
    database work (and its sync steps) in the calling thread."""
    return async_to_sync(execute_async)(lease, CALLING_THREAD)
