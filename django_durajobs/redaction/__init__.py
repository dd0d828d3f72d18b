"""Keeping secrets out of what a job shows, and out of what the package logs.

Log lines, error text, wait reasons, user messages and run results are redacted before they are
stored; step results are stored intact (replay must return exactly what the step returned) and
redacted when shown. Text with a limit is cut before it is redacted: only a window a little
longer than the limit is read, so a huge text costs no more than a short one. Which keys name
secrets is in ``secret_keys``, the other shapes of secrets in ``secret_shapes``; docs/secrets.md
says what they are.
"""

from __future__ import annotations

import logging
import traceback
from functools import lru_cache
from types import TracebackType
from typing import Any

from ..conf import get_setting
from ..errors import JobError
from .secret_keys import SECRET_WORDS, is_sensitive, normalised_key
from .secret_shapes import REDACTED, redact_shapes

#: Texts up to this long are kept, redacted, in a cache ("Done.", "Waiting: DNS record not visible").
CACHED_CHARS = 1000
#: How far past its cut a text is read: a secret that starts before the cut is recognised from
#: what follows it within this margin (a URL password up to its "@", a key up to its value).
MARGIN_CHARS = 512
#: Redaction makes a text at most this many times longer (``pw=x`` becomes ``pw=[REDACTED]``).
_GROWTH = 4
#: Redacted text this far from the end of the window read may be cut mid-secret: never shown.
_UNSURE_CHARS = _GROWTH * MARGIN_CHARS + len(REDACTED)


def _sensitive_words() -> tuple[str, ...]:
    return _words(tuple(get_setting("REDACT_KEYS")))


@lru_cache(maxsize=8)
def _words(extra_keys: tuple[Any, ...]) -> tuple[str, ...]:
    return SECRET_WORDS + tuple(normalised_key(str(key)) for key in extra_keys)


def is_sensitive_key(key: object, words: tuple[str, ...] | None = None) -> bool:
    """Whether a dict key or a key in text names a secret (see ``secret_keys``)."""
    return is_sensitive(str(key), words or _sensitive_words())


def storable_text(text: str) -> str:
    """``text`` that every database stores: no NUL characters, no lone surrogates."""
    return text.replace("\x00", "\ufffd").encode("utf-8", "replace").decode("utf-8")


def redact_text(text: str) -> str:
    """``text`` with credentials replaced by ``[REDACTED]``, in time linear in its length."""
    if not text:
        return text
    words = _sensitive_words()
    if len(text) <= CACHED_CHARS:
        return _redacted_short_text(text, words)
    return redact_shapes(text, words)


@lru_cache(maxsize=256)
def _redacted_short_text(text: str, words: tuple[str, ...]) -> str:
    return redact_shapes(text, words)


def shown_text(value: Any, limit: int | None = None) -> str:
    """Text a job shows (log line, error, wait reason, message), fit to store: redacted, shortened."""
    text = str(value)
    words = _sensitive_words()
    if len(text) <= CACHED_CHARS:
        return _shown_short_text(text, limit, words)
    return _shown(text, limit, words)


@lru_cache(maxsize=256)
def _shown_short_text(text: str, limit: int | None, words: tuple[str, ...]) -> str:
    """Kept for the lines every job writes ("Done.")."""
    return _shown(text, limit, words)


def _shown(text: str, limit: int | None, words: tuple[str, ...]) -> str:
    if limit is None:
        return redact_shapes(storable_text(text), words) if text else text
    size = limit + _UNSURE_CHARS
    while True:
        redacted = redact_shapes(storable_text(text[:size]), words)
        # Secrets may have shrunk the window: read more until what is shown is far from its end.
        if size >= len(text) or len(redacted) >= limit + _UNSURE_CHARS:
            break
        size *= 2
    return redacted if len(redacted) <= limit else redacted[: limit - 1] + "…"


def redact(value: Any) -> Any:
    """A copy of a JSON-like value with secret-named keys masked and secrets in strings removed."""
    if not isinstance(value, (dict, list, tuple, str)):
        return value
    words = _sensitive_words()

    def walk(item: Any) -> Any:
        if isinstance(item, dict):
            return {
                key: (REDACTED if is_sensitive_key(key, words) and sub is not None else walk(sub))
                for key, sub in item.items()
            }
        if isinstance(item, (list, tuple)):
            return [walk(sub) for sub in item]
        if isinstance(item, str):
            return redact_text(item)
        return item

    return walk(value)


def describe_exception(exc: BaseException, limit: int = 4000) -> str:
    """A redacted account of an exception, fit to store as a job's error.

    A ``JobError`` a job raised on purpose speaks for itself; others are named by their class.
    """
    message = str(exc)
    if isinstance(exc, JobError) and message:
        return shown_text(message, limit)
    return shown_text(f"{type(exc).__name__}: {message}" if message else type(exc).__name__, limit)


# The package's own log records ---------------------------------------------------------------

#: Longest message of a warning (or worse) the package logs; each part of a traceback is cut
#: alike, and a whole traceback keeps its first and last parts within ``TRACEBACK_MAX_CHARS``.
LOG_MESSAGE_MAX_CHARS = 5000
TRACEBACK_MAX_CHARS = 50_000


class RedactingFilter(logging.Filter):
    """Gives a record of warning level or above, or with a traceback, only redacted, bounded text.

    The record's ``exc_info`` is replaced by its redacted text (``exc_text``), which formatters
    print as they would have printed the traceback; a handler that reads the exception itself
    (an error tracker's logging integration) gets no frames, so none of their local variables.
    Records below warning go through untouched: at those levels the package logs only ids, kind
    names and text redacted when it was stored, and a worker logs them for every job.
    """

    def filter(self, record: logging.LogRecord) -> bool:
        if record.levelno < logging.WARNING and not record.exc_info and not record.stack_info:
            return True
        words = _sensitive_words()
        try:
            message = record.getMessage()
        except Exception:  # a bad format string: logging would report it; show what there is
            message = f"{record.msg} {record.args}"
        record.msg, record.args = _shown(message, LOG_MESSAGE_MAX_CHARS, words), ()
        if record.exc_info:
            if record.exc_info[0] is not None:
                record.exc_text = redacted_traceback(*record.exc_info)
            record.exc_info = None
        if record.stack_info:
            record.stack_info = _shown(record.stack_info, TRACEBACK_MAX_CHARS, words)
        return True


def redacted_traceback(exc_type: type[BaseException], exc: BaseException, tb: TracebackType | None) -> str:
    """The traceback as logging formats it, each part (a frame, the exception's line) redacted and
    cut; a very long one keeps its first and last parts."""
    words = _sensitive_words()
    parts = [
        _shown(part, LOG_MESSAGE_MAX_CHARS, words)
        for part in traceback.TracebackException(exc_type, exc, tb).format()
    ]
    if sum(len(part) for part in parts) > TRACEBACK_MAX_CHARS:
        tail, size = len(parts), 0  # parts[tail:] are kept, half the budget at most
        while tail > 0 and size + len(parts[tail - 1]) <= TRACEBACK_MAX_CHARS // 2:
            tail -= 1
            size += len(parts[tail])
        head = 0  # parts[:head] are kept, in the rest of the budget
        while head < tail and size + len(parts[head]) <= TRACEBACK_MAX_CHARS:
            size += len(parts[head])
            head += 1
        left_out = f"  [… {tail - head} more parts of the traceback left out …]\n"
        parts = [*parts[:head], left_out, *parts[tail:]]
    return "".join(parts).removesuffix("\n")


_FILTER = RedactingFilter()


def package_logger(name: str) -> logging.Logger:
    """The logger ``name`` (``django_durajobs`` or below it), redacting what it records.

    A logger's filters do not see the records of the loggers below it: every logger of the
    package is made here.
    """
    if name != "django_durajobs" and not name.startswith("django_durajobs."):
        raise ValueError(f"{name!r} is not a logger of django_durajobs")
    logger = logging.getLogger(name)
    logger.addFilter(_FILTER)
    return logger


package_logger("django_durajobs")  # store and signals log through it too
