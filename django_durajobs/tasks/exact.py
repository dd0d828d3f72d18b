"""Task arguments and return values read back exactly as ``json.dumps``/``json.loads`` would.

PostgreSQL's ``jsonb`` keeps numbers as decimals: ``1e+20`` comes back as the integer
``100000000000000000000`` and ``-0.0`` as ``0``. Where a value holds such a float, its JSON text
is stored beside it, and read back instead.
"""

from __future__ import annotations

import json
import math
from typing import Any

#: The key of the exact JSON text, beside the values it repeats.
EXACT_KEY = "json"


def _changes_in_jsonb(value: Any) -> bool:
    if isinstance(value, float):
        return value.is_integer() and ("e" in repr(value) or math.copysign(1.0, value) < 0)
    if isinstance(value, dict):
        return any(_changes_in_jsonb(item) for item in value.values())
    if isinstance(value, list):
        return any(_changes_in_jsonb(item) for item in value)
    return False


def storable(values: dict[str, Any]) -> dict[str, Any]:
    """``values`` (made JSON already) to store, with their exact text when a database could change them."""
    if not _changes_in_jsonb(values):
        return values
    return {**values, EXACT_KEY: json.dumps(values)}


def read_back(stored: Any) -> dict[str, Any]:
    """What ``storable`` was given, from what the database returned."""
    if not isinstance(stored, dict):
        return {}
    text = stored.get(EXACT_KEY)
    exact = json.loads(text) if isinstance(text, str) else None
    return exact if isinstance(exact, dict) else stored
