"""Durable, multi-step jobs for Django.

The public API lives here. Names that need the models are imported on first use, so that
``from django_durajobs import job`` works in a ``jobs.py`` module while apps are still loading.
"""

from __future__ import annotations

from importlib import import_module
from typing import Any

from .errors import EventTimeout, JobError
from .registry import job
from .status import Status

__all__ = [
    "Event",
    "EventTimeout",
    "Job",
    "JobError",
    "JobLog",
    "JobStep",
    "Schedule",
    "Status",
    "acancel",
    "achildren_summary",
    "adescribe",
    "aenqueue",
    "aenqueue_many",
    "apause",
    "arecover",
    "aresume",
    "aretry",
    "arevert",
    "aupdate",
    "cancel",
    "children_summary",
    "describe",
    "asend_event",
    "drain",
    "enqueue",
    "enqueue_many",
    "job",
    "pause",
    "prune",
    "recover",
    "rerun",
    "resume",
    "retry",
    "revert",
    "send_event",
    "update",
]

_LAZY = {
    "Event": "models",
    "Job": "models",
    "JobLog": "models",
    "JobStep": "models",
    "Schedule": "models",
    "enqueue": "store",
    "enqueue_many": "store",
    "recover": "store",
    "prune": "store",
    "rerun": "reruns",
    "resume": "ops",
    "retry": "ops",
    "pause": "ops",
    "cancel": "ops",
    "revert": "ops",
    "update": "ops",
    "send_event": "ops",
    "asend_event": "ops",
    "drain": "draining",
    "children_summary": "engine.describe",
    **dict.fromkeys(
        [
            "aenqueue",
            "aenqueue_many",
            "arecover",
            "aresume",
            "aretry",
            "apause",
            "acancel",
            "arevert",
            "aupdate",
            "adescribe",
            "achildren_summary",
        ],
        "async_ops",
    ),
    "describe": "engine.describe",
}


def __getattr__(name: str) -> Any:
    module = _LAZY.get(name)
    if module is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    return getattr(import_module(f".{module}", __name__), name)
