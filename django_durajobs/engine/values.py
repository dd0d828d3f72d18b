"""What may be stored as JSON: the checks behind ``invalid_input`` and ``unserializable_result``.

Stricter than ``json.dumps``: NaN and Infinity are not JSON, PostgreSQL's jsonb refuses NUL
characters, and no database stores a lone surrogate, so all are refused everywhere, identically
on every database. (``json.dumps`` escapes non-ASCII, so the JSON text's length is its size.)
"""

from __future__ import annotations

import json
from typing import Any

from ..errors import JobError


def text_problem(text: str) -> str | None:
    """Why a database would refuse ``text``, or None."""
    if "\x00" in text:
        return "a NUL character"
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        return "a lone surrogate (not valid Unicode)"
    return None


def check_text(text: str, what: str) -> str:
    problem = text_problem(text)
    if problem:
        raise JobError("invalid_input", f"{what} holds {problem}, which cannot be stored.")
    return text


def _find_unstorable(value: Any, path: str = "$") -> tuple[str, str] | None:
    """Where in a decoded JSON value a string is that a database would refuse, and why."""
    if isinstance(value, str):
        problem = text_problem(value)
        return (path, problem) if problem else None
    if isinstance(value, dict):
        for key, sub in value.items():
            problem = text_problem(key)
            found = (f"{path} key {key!r}", problem) if problem else _find_unstorable(sub, f"{path}.{key}")
            if found:
                return found
    elif isinstance(value, list):
        for index, sub in enumerate(value):
            found = _find_unstorable(sub, f"{path}[{index}]")
            if found:
                return found
    return None


def to_json(value: Any, *, what: str, code: str = "invalid_input", max_bytes: int | None = None) -> Any:
    """``value`` as it reads back from the database, or a ``JobError`` saying what is wrong with it.

    Returning the round-tripped value means a step gives its caller the same thing on its
    first run as on every replay (a tuple comes back as a list either way).
    """
    if value is None or value is True or value is False or type(value) is int:
        return value  # a round trip changes none of these (most runs and steps return None)
    try:
        text = json.dumps(value, allow_nan=False)
    except ValueError as exc:
        raise JobError(code, f"{what} holds NaN or Infinity, which JSON cannot store ({exc}).") from None
    except (TypeError, RecursionError) as exc:
        raise JobError(code, f"{what} is not JSON-serialisable: {exc}.") from None
    if max_bytes is not None and len(text) > max_bytes:
        raise JobError(code, f"{what} is {len(text):,} bytes as JSON; the limit is {max_bytes:,}.")
    decoded = json.loads(text)
    # json.dumps writes every NUL and every surrogate as an escape: without one, all is storable.
    unstorable = ("\\u0000" in text or "\\ud" in text) and _find_unstorable(decoded)
    if unstorable:
        raise JobError(code, f"{what} holds {unstorable[1]} at {unstorable[0]}, which cannot be stored.")
    return decoded
