"""The operations for async code, such as ASGI views: ``await aenqueue(...)``, ``await acancel(job)``.

Each is its sync operation's twin (``awaitable``): same arguments, same result, same ``JobError``.
"""

from __future__ import annotations

from . import ops, store
from .awaitables import awaitable
from .engine import describe as describing

__all__ = [
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
]

aenqueue = awaitable(store.enqueue)
aenqueue_many = awaitable(store.enqueue_many)
arecover = awaitable(store.recover)
aresume = awaitable(ops.resume)
aretry = awaitable(ops.retry)
apause = awaitable(ops.pause)
acancel = awaitable(ops.cancel)
arevert = awaitable(ops.revert)
aupdate = awaitable(ops.update)
adescribe = awaitable(describing.describe)
achildren_summary = awaitable(describing.children_summary)
