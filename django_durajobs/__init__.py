"""Durable, multi-step jobs for Django.

The public API lives here. Names that need the models are imported on first use, so that
``from django_durajobs import job`` works in a ``jobs.py`` module while apps are still loading.
"""

from __future__ import annotations

from importlib import import_module
from typing import Any

from .errors import JobError
from .registry import job
from .status import Status

__all__ = [
    "Job",
    "JobError",
    "JobLog",
    "JobStep",
    "Status",
    "cancel",
    "children_summary",
    "describe",
    "drain",
    "enqueue",
    "enqueue_many",
    "job",
    "pause",
    "recover",
    "resume",
    "retry",
    "revert",
    "update",
]

_LAZY = {
    "Job": "models",
    "JobLog": "models",
    "JobStep": "models",
    "enqueue": "store",
    "enqueue_many": "store",
    "recover": "store",
    "resume": "ops",
    "retry": "ops",
    "pause": "ops",
    "cancel": "ops",
    "revert": "ops",
    "update": "ops",
    "drain": "worker",
    "children_summary": "engine.describe",
    "describe": "engine.describe",
}


def __getattr__(name: str) -> Any:
    module = _LAZY.get(name)
    if module is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    return getattr(import_module(f".{module}", __name__), name)
