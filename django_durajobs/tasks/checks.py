"""System checks of a ``DurableBackend`` (run by Django's Tasks checks)."""

from __future__ import annotations

from typing import TYPE_CHECKING

from django.core import checks

if TYPE_CHECKING:
    from .backend import DurableBackend


def backend_errors(backend: DurableBackend) -> list[checks.CheckMessage]:
    from .backend import QUEUE_MAX_LENGTH

    where = f"TASKS[{backend.alias!r}]"
    errors: list[checks.CheckMessage] = []
    if backend.options:
        errors.append(
            checks.Error(
                f"{where}['OPTIONS'] is not read by DurableBackend: {sorted(backend.options)!r}.",
                hint="django-durajobs is set up in DURAJOBS; a task's own options go in @task(...).",
                id="durajobs.E023",
            )
        )
    for queue in sorted(backend.queues, key=repr):
        if not isinstance(queue, str) or not queue.strip() or len(queue) > QUEUE_MAX_LENGTH:
            errors.append(
                checks.Error(
                    f"{where}['QUEUES'] holds {queue!r:.60}: each queue name must be a non-blank "
                    f"string of at most {QUEUE_MAX_LENGTH} characters.",
                    id="durajobs.E024",
                )
            )
    return errors
