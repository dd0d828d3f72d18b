"""What ``Job``'s and ``JobKind``'s methods do: ``job.resume()``, ``job.describe()``, ``kind.enqueue()``.

The models and the registry sit below the store, the operations and the engine, and import none
of them: the app config hands this module over when Django is ready (``registry.facades()``).
"""

from __future__ import annotations

from .async_ops import aenqueue
from .engine.describe import children_summary, describe
from .ops import cancel, pause, resume, retry, revert, update
from .reruns import rerun
from .store import enqueue

__all__ = [
    "aenqueue",
    "cancel",
    "children_summary",
    "describe",
    "enqueue",
    "pause",
    "rerun",
    "resume",
    "retry",
    "revert",
    "update",
]
