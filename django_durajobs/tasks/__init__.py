"""Django's Tasks on durable jobs:
``TASKS = {"default": {"BACKEND": "django_durajobs.tasks.DurableBackend"}}``.

Importing this package lets workers find a task's job by its dotted path (docs/tasks.md).
"""

from ..registry import add_kind_finder
from .backend import DurableBackend, DurableTask
from .running import find_task_kind
from .unstartable import fail_unstartable_tasks

add_kind_finder(find_task_kind, cannot_start=fail_unstartable_tasks)

__all__ = ["DurableBackend", "DurableTask"]
