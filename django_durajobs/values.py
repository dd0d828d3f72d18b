"""What may be stored as JSON: the checks behind ``invalid_input`` and ``unserializable_result``.

Stricter than ``json.dumps``: NaN and Infinity are not JSON, PostgreSQL's jsonb refuses NUL
characters, and no database stores a lone surrogate, so all are refused everywhere, identically
on every database. (``json.dumps`` escapes non-ASCII, so the JSON text's length is its size.)
"""

from __future__ import annotations

import json
import math
import reprlib
from datetime import timedelta
from typing import Any

from django.utils.functional import Promise, lazy
from django.utils.translation import gettext as _

from .conf import get_setting
from .errors import JobError

#: Integers a round trip through every database's JSON keeps exactly (64-bit).
_INT_RANGE = range(-(2**63), 2**63)
#: The largest id a job can have (a 64-bit primary key).
MAX_ID = 2**63 - 1
_short = reprlib.Repr()
_short.maxstring = _short.maxother = 40


def _formatted(template: str | Promise, params: dict[str, Any]) -> str:
    return str(template) % params


#: ``label(template, params)``: ``template % params``, translated only when it is shown. The name of
#: what a check reads (``what=``) is needed only by its error message: on the hot path, where every
#: step is checked, it costs no translation.
label = lazy(_formatted, str)


def short_repr(value: Any) -> str:
    """``repr(value)``, cut short: hostile input must not make a message huge."""
    return _short.repr(value)


def to_job_id(ref: Any, what: str | None = None) -> int:
    """The id that a job reference names: a ``Job`` (or another model instance), an int, or its
    decimal text. ``invalid_input`` for anything else, before any query is made."""
    pk = getattr(ref, "pk", ref) if hasattr(ref, "_meta") else ref
    if type(pk) is str and pk.isascii() and pk.isdecimal() and len(pk) <= 19:
        pk = int(pk)
    if type(pk) is not int or not 0 < pk <= MAX_ID:
        raise JobError(
            "invalid_input",
            _("%(what)s is named by a Job or its id (a positive integer), not %(value)s.")
            % {"what": _("A job") if what is None else what, "value": short_repr(ref)},
        )
    return pk


#: The longest timeout: a little over 31 years, far inside what a timedelta and a database hold.
MAX_TIMEOUT_SECONDS = 1_000_000_000


def to_timeout(value: Any, what: str | Promise | None = None) -> float | None:
    """A timeout in seconds (given as seconds or a ``timedelta``), or None for none;
    ``invalid_input`` unless it is more than zero and at most ``MAX_TIMEOUT_SECONDS``."""
    if value is None:
        return None
    if what is None:
        what = _("A timeout")
    seconds = value.total_seconds() if isinstance(value, timedelta) else value
    if isinstance(seconds, bool) or not isinstance(seconds, (int, float)) or not math.isfinite(seconds):
        raise JobError(
            "invalid_input",
            _("%(what)s must be seconds or a timedelta, not %(value)s.")
            % {"what": what, "value": short_repr(value)},
        )
    if not 0 < seconds <= MAX_TIMEOUT_SECONDS:
        raise JobError(
            "invalid_input",
            _("%(what)s must be more than 0 and at most %(limit)s seconds, not %(value)s.")
            % {"what": what, "limit": f"{MAX_TIMEOUT_SECONDS:,}", "value": short_repr(value)},
        )
    return float(seconds)


def check_length(text: str, limit: int, what: str | Promise, setting: str) -> str:
    """``text``, or ``invalid_input`` when it is longer than ``limit`` characters."""
    if len(text) > limit:
        raise JobError(
            "invalid_input",
            _("%(what)s is %(length)s characters long; the limit is %(limit)s (DURAJOBS[%(setting)s]).")
            % {"what": what, "length": f"{len(text):,}", "limit": f"{limit:,}", "setting": repr(setting)},
        )
    return text


def text_problem(text: str) -> str | None:
    """Why a database would refuse ``text``, or None."""
    if "\x00" in text:
        return _("a NUL character")
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        return _("a lone surrogate (not valid Unicode)")
    return None


def check_text(text: str, what: str | Promise) -> str:
    problem = text_problem(text)
    if problem:
        raise JobError(
            "invalid_input",
            _("%(what)s holds %(problem)s, which cannot be stored.") % {"what": what, "problem": problem},
        )
    return text


def check_message(text: str, what: str | Promise) -> str:
    """A text a run or an operator shows on the job (a wait reason, a question, an action's
    label), or ``invalid_input`` when it is longer than ``MAX_MESSAGE_CHARS``."""
    return check_length(text, get_setting("MAX_MESSAGE_CHARS"), what, "MAX_MESSAGE_CHARS")


def _find_unstorable(value: Any, path: str = "$") -> tuple[str, str] | None:
    """Where in a decoded JSON value a string is that a database would refuse, and why."""
    if isinstance(value, str):
        problem = text_problem(value)
        return (path, problem) if problem else None
    if isinstance(value, dict):
        for key, sub in value.items():
            problem = text_problem(key)
            found = (
                (_("%(path)s key %(key)s") % {"path": path, "key": repr(key)}, problem)
                if problem
                else _find_unstorable(sub, f"{path}.{key}")
            )
            if found:
                return found
    elif isinstance(value, list):
        for index, sub in enumerate(value):
            found = _find_unstorable(sub, f"{path}[{index}]")
            if found:
                return found
    return None


def to_json(
    value: Any,
    *,
    what: str | Promise,
    code: str = "invalid_input",
    max_bytes: int | None = None,
    setting: str | None = None,
) -> Any:
    """``value`` as it reads back from the database, or a ``JobError`` saying what is wrong with it.

    Returning the round-tripped value means a step gives its caller the same thing on its
    first run as on every replay (a tuple comes back as a list either way). ``code`` is for a
    value JSON cannot hold; one over ``max_bytes`` (the limit ``setting`` sets) is always
    ``invalid_input``.
    """
    if value is None or value is True or value is False or (type(value) is int and value in _INT_RANGE):
        return value  # a round trip changes none of these (most runs and steps return None)
    try:
        text = json.dumps(value, allow_nan=False)
    except ValueError as exc:
        if "integer string conversion" in str(exc):
            raise JobError(
                code, _("%(what)s holds an integer too long to store (over 4,300 digits).") % {"what": what}
            ) from None
        raise JobError(
            code,
            _("%(what)s holds NaN or Infinity, which JSON cannot store (%(error)s).")
            % {"what": what, "error": exc},
        ) from None
    except (TypeError, RecursionError) as exc:
        raise JobError(
            code, _("%(what)s is not JSON-serialisable: %(error)s.") % {"what": what, "error": exc}
        ) from None
    if max_bytes is not None and len(text) > max_bytes:
        limit = f"{max_bytes:,}" + (f" (DURAJOBS[{setting!r}])" if setting else "")
        raise JobError(
            "invalid_input",
            _("%(what)s is %(size)s bytes as JSON; the limit is %(limit)s.")
            % {"what": what, "size": f"{len(text):,}", "limit": limit},
        )
    decoded = json.loads(text)
    # json.dumps writes every NUL and every surrogate as an escape: without one, all is storable.
    unstorable = ("\\u0000" in text or "\\ud" in text) and _find_unstorable(decoded)
    if unstorable:
        raise JobError(
            code,
            _("%(what)s holds %(problem)s at %(path)s, which cannot be stored.")
            % {"what": what, "problem": unstorable[1], "path": unstorable[0]},
        )
    return decoded


def readable_id(step_id: str) -> str:
    """A step's id as a title, for a step met without one: "switch_back" -> "Switch back"."""
    words = step_id.replace("_", " ").replace("-", " ").strip()
    return words[:1].upper() + words[1:] if words else step_id


#: The longest event name (the ``Event.name`` and ``Job.waits_for_event`` columns).
EVENT_NAME_MAX_LENGTH = 200


def to_event_name(name: Any) -> str:
    """An event's name, or ``invalid_input``: a non-blank string of at most
    ``EVENT_NAME_MAX_LENGTH`` characters that a database stores."""
    if not isinstance(name, str) or not name.strip():
        raise JobError(
            "invalid_input",
            _("An event name must be a non-blank string, not %(value)s.") % {"value": short_repr(name)},
        )
    if len(name) > EVENT_NAME_MAX_LENGTH:
        raise JobError(
            "invalid_input",
            _("The event name %(name)s is %(length)s characters long; the limit is %(limit)s.")
            % {"name": short_repr(name), "length": f"{len(name):,}", "limit": EVENT_NAME_MAX_LENGTH},
        )
    return check_text(name, _("The event name %(name)s") % {"name": short_repr(name)})


def to_event_payload(payload: Any) -> Any:
    """An event's payload as it reads back from the database, or ``invalid_input``."""
    return to_json(
        payload,
        what=_("The event's payload"),
        max_bytes=get_setting("MAX_EVENT_PAYLOAD_BYTES"),
        setting="MAX_EVENT_PAYLOAD_BYTES",
    )
