"""Async definitions, without a database: ``@job`` and ``.revert`` record which functions are
coroutines, ``AsyncJobContext`` offers every member of ``JobContext``, and the async twins of
the operations are named as Django names its own."""

from __future__ import annotations

import inspect

import pytest

from django_durajobs import Job, aenqueue, aresume, enqueue, resume
from django_durajobs.awaitables import awaitable
from django_durajobs.engine.async_context import AsyncJobContext
from django_durajobs.engine.context import JobContext
from django_durajobs.registry import get_kind, has_async_kinds, job, unregister

#: ``JobContext`` members an async job does not call: the parts of a step, which
#: ``AsyncJobContext.step`` calls itself, and what the runner reads.
PARTS_OF_A_STEP = {"open_step", "run_step", "keep_result", "step_raised", "step_over"}
RUNNER_ONLY = {
    "steps_marked_by_an_earlier_run", "first_run", "steps", "deadline", "kind", "phase",
    "check_version", "go_by_rows",
}  # fmt: skip


@pytest.fixture
def kind_name(request):
    name = f"async_def_{request.node.name}"[:90]
    unregister(name)
    yield name
    unregister(name)


def test_job_and_revert_record_which_of_their_functions_are_coroutines(kind_name):
    @job(kind_name)
    async def deploy(job, ctx):
        return None

    @deploy.revert
    def undo(job, ctx):
        return None

    kind = get_kind(kind_name)
    assert (kind.run_is_async, kind.revert_is_async) == (True, False)
    assert (kind.runs_async(reverting=False), kind.runs_async(reverting=True)) == (True, False)
    assert has_async_kinds()


def test_a_sync_kind_is_not_async(kind_name):
    @job(kind_name)
    def report(job, ctx):
        return None

    assert not get_kind(kind_name).runs_async(reverting=False)


def public_members(cls: type) -> set[str]:
    return {name for name in dir(cls) if not name.startswith("_")}


def test_the_async_context_has_every_member_an_async_job_calls_and_each_waiting_one_is_a_coroutine():
    """A member added to ``JobContext`` fails this test until ``AsyncJobContext`` has it too."""
    wanted = public_members(JobContext) - PARTS_OF_A_STEP - RUNNER_ONLY
    assert wanted <= public_members(AsyncJobContext), wanted - public_members(AsyncJobContext)
    methods = {name for name in wanted if inspect.isfunction(getattr(JobContext, name))}
    assert methods == {
        name for name in methods if inspect.iscoroutinefunction(getattr(AsyncJobContext, name))
    }
    assert {"step", "log", "wait_external", "needs_user", "retry_later", "check_cancel"} <= methods


def test_an_awaited_member_keeps_the_signature_and_documentation_of_its_sync_one():
    assert inspect.signature(AsyncJobContext.wait_external) == inspect.signature(JobContext.wait_external)
    assert AsyncJobContext.needs_user.__doc__ == JobContext.needs_user.__doc__


def test_the_async_twins_are_named_as_django_names_them_and_keep_their_documentation():
    assert (aenqueue.__name__, aresume.__name__) == ("aenqueue", "aresume")
    assert (aenqueue.__doc__, aresume.__doc__) == (enqueue.__doc__, resume.__doc__)
    assert (Job.acancel.__qualname__, Job.adescribe.__qualname__) == ("Job.acancel", "Job.adescribe")
    assert inspect.iscoroutinefunction(Job.acancel)


def test_a_twin_returns_what_its_operation_returns_and_raises_what_it_raises():
    from asgiref.sync import async_to_sync

    def divide(a: int, b: int) -> float:
        return a / b

    adivide = awaitable(divide)
    assert adivide.__name__ == "adivide"
    assert async_to_sync(adivide)(6, b=3) == 2
    with pytest.raises(ZeroDivisionError):
        async_to_sync(adivide)(1, 0)
