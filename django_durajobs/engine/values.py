"""What may be stored as JSON: the checks behind ``invalid_input`` and ``unserializable_result``.

Stricter than ``json.dumps``: NaN and Infinity are not JSON, and PostgreSQL's jsonb refuses
NUL characters, so both are refused everywhere, identically on every database.
"""

from __future__ import annotations

import json
from typing import Any

from ..errors import JobError


def _find_nul(value: Any, path: str = "$") -> str | None:
    if isinstance(value, str):
        return path if "\x00" in value else None
    if isinstance(value, dict):
        for key, sub in value.items():
            if "\x00" in key:
                return f"{path} key {key!r}"
            found = _find_nul(sub, f"{path}.{key}")
            if found:
                return found
    elif isinstance(value, (list, tuple)):
        for index, sub in enumerate(value):
            found = _find_nul(sub, f"{path}[{index}]")
            if found:
                return found
    return None


def to_json(value: Any, *, what: str, code: str = "invalid_input", max_bytes: int | None = None) -> Any:
    """``value`` as it reads back from the database, or a ``JobError`` saying what is wrong with it.

    Returning the round-tripped value means a step gives its caller the same thing on its
    first run as on every replay (a tuple comes back as a list either way).
    """
    try:
        text = json.dumps(value, allow_nan=False)
    except ValueError as exc:
        raise JobError(code, f"{what} holds NaN or Infinity, which JSON cannot store ({exc}).") from None
    except (TypeError, RecursionError) as exc:
        raise JobError(code, f"{what} is not JSON-serialisable: {exc}.") from None
    nul_at = _find_nul(value)
    if nul_at:
        raise JobError(code, f"{what} holds a NUL character (at {nul_at}), which cannot be stored.")
    if max_bytes is not None and len(text.encode()) > max_bytes:
        raise JobError(code, f"{what} is {len(text.encode()):,} bytes; the limit is {max_bytes:,}.")
    return json.loads(text)
