"""Arguments as an operator types them, turned into what the operations and the store take.

Each is an ``argparse`` type: bad text is refused with a message before anything is read.
"""

from __future__ import annotations

import argparse
import json
import re
from datetime import timedelta
from typing import Any

from django.utils.translation import gettext as _

#: ``--older-than`` units: seconds, minutes, hours, days, weeks.
AGE_UNITS = {"s": "seconds", "m": "minutes", "h": "hours", "d": "days", "w": "weeks"}
_AGE = re.compile(r"(\d+(?:\.\d+)?)([smhdw])")
#: Far more than anyone keeps jobs, far inside what a timedelta holds.
MAX_AGE = timedelta(days=100 * 365)


def age(text: str) -> timedelta:
    """``30d``, ``12h``, ``90m``, ``2w``, ``45s``: how long ago a job must have ended."""
    match = _AGE.fullmatch(text.strip())
    if match is None:
        raise argparse.ArgumentTypeError(
            _("%(text)r is not an age such as 30d: a number and one of s, m, h, d, w.") % {"text": text}
        )
    number, unit = match.groups()
    value = float(number)
    if value > MAX_AGE / timedelta(**{AGE_UNITS[unit]: 1}):
        raise argparse.ArgumentTypeError(_("%(text)r is more than a hundred years.") % {"text": text})
    return timedelta(**{AGE_UNITS[unit]: value})


def json_value(text: str) -> Any:
    """``--data``: JSON text (``resume()`` checks the value as it checks any data)."""
    try:
        return json.loads(text)
    except ValueError as error:
        raise argparse.ArgumentTypeError(_("--data is not JSON: %(error)s") % {"error": error}) from None


def subject_filter(text: str) -> dict[str, Any]:
    """One ``--subject``: a JSON object the subject must contain, ``KEY=TEXT`` or ``KEY:=JSON``.

    ``KEY`` may name a nested key with dots: ``server.name=web-1`` is ``{"server": {"name":
    "web-1"}}``. ``=`` compares with text, ``:=`` with a JSON value: ``site_id:=7`` matches the
    number 7 and ``site_id=7`` the text "7".
    """
    stripped = text.strip()
    if stripped.startswith("{"):
        try:
            value = json.loads(stripped)
        except ValueError as error:
            raise argparse.ArgumentTypeError(
                _("--subject is not a JSON object: %(error)s") % {"error": error}
            ) from None
        if not isinstance(value, dict):
            raise argparse.ArgumentTypeError(_("--subject must be a JSON object."))
        return value
    key, colon_equals, raw = text.partition(":=")
    if not colon_equals:
        key, equals, raw = text.partition("=")
        if not equals:
            raise argparse.ArgumentTypeError(
                _("--subject %(text)r is none of KEY=TEXT, KEY:=JSON or a JSON object.") % {"text": text}
            )
    value = raw
    if colon_equals:
        try:
            value = json.loads(raw)
        except ValueError as error:
            raise argparse.ArgumentTypeError(
                _("The value of --subject %(text)r is not JSON: %(error)s") % {"text": text, "error": error}
            ) from None
    path = key.strip().split(".")
    if not all(path):
        raise argparse.ArgumentTypeError(_("--subject %(text)r names an empty key.") % {"text": text})
    for name in reversed(path):
        value = {name: value}
    return value


def merged(filters: list[dict[str, Any]]) -> dict[str, Any]:
    """Several ``--subject`` filters as one object that the subject must contain."""
    result: dict[str, Any] = {}
    for each in filters:
        _merge_into(result, each)
    return result


def _merge_into(target: dict[str, Any], extra: dict[str, Any]) -> None:
    for key, value in extra.items():
        if isinstance(value, dict) and isinstance(target.get(key), dict):
            _merge_into(target[key], value)
        else:
            target[key] = value
