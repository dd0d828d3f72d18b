"""``DurableTaskContext``: Django's ``TaskContext``, with durable steps inside a task."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import timedelta
from typing import Any

from django.utils.translation import gettext as _

from ..errors import JobError
from .compat import TaskContext
from .results import TRY_STEP_PREFIX


# The backport declares TaskContext in a way mypy reads as not frozen (slots=PY311).
@dataclass(frozen=True, slots=True, kw_only=True)
class DurableTaskContext(TaskContext):  # type: ignore[misc,unused-ignore]
    """What a ``takes_context=True`` task gets: ``task_result`` and ``attempt``, as Django has
    them, and ``step()``: a part of the task's work checkpointed as a step of its job.

    ``context.step("charge", lambda: charge(order))`` in a task, ``await context.step(...)``
    in an ``async def`` one: done once, its result is returned again (read back from JSON) when
    the task runs again after its worker died or a try failed, without calling ``fn``.
    """

    #: The job's ``JobContext``, or ``AsyncJobContext`` for an async task.
    job_context: Any = field(repr=False, compare=False)

    def step(
        self,
        step_id: str,
        fn: Callable[[], Any],
        title: str | None = None,
        atomic: bool = False,
        timeout: float | timedelta | None = None,
    ) -> Any:
        """``ctx.step`` of the task's job (docs/writing-jobs.md); awaitable in an async task."""
        if isinstance(step_id, str) and step_id.startswith(TRY_STEP_PREFIX):
            raise JobError(
                "invalid_input",
                _("A task's step id must not start with %(prefix)s: its tries are named so.")
                % {"prefix": repr(TRY_STEP_PREFIX)},
            )
        return self.job_context.step(step_id, fn, title=title, atomic=atomic, timeout=timeout)
