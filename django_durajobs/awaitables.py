"""``awaitable(fn)``: the async twin of a sync operation, as Django names them (``aresume`` for
``resume``). A twin runs its operation through ``sync_to_async``, thread-sensitive like Django's
own async ORM methods, so it behaves exactly as the operation, with the same ``JobError``s."""

from __future__ import annotations

import functools
from collections.abc import Callable, Coroutine
from typing import Any, ParamSpec, TypeVar

from asgiref.sync import sync_to_async

P = ParamSpec("P")
T = TypeVar("T")


def awaitable(fn: Callable[P, T]) -> Callable[P, Coroutine[Any, Any, T]]:
    """``fn``'s async twin, named ``a<name>``; a method's too, in a class body::

    aresume = awaitable(resume)
    """

    async def twin(*args: P.args, **kwargs: P.kwargs) -> T:
        return await sync_to_async(fn, thread_sensitive=True)(*args, **kwargs)

    functools.update_wrapper(twin, fn)
    twin.__name__ = f"a{fn.__name__}"
    twin.__qualname__ = f"{fn.__qualname__.rpartition('.')[0]}.a{fn.__name__}".lstrip(".")
    return twin
