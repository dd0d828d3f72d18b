"""Keeping secrets out of what a job shows.

Log lines, error text, wait reasons, user messages and run results are redacted before they are
stored; step results are stored intact (replay must return exactly what the step returned) and
redacted when shown.
"""

from __future__ import annotations

import re
from functools import lru_cache
from typing import Any

from ..conf import get_setting
from ..errors import JobError

REDACTED = "[REDACTED]"

BUILTIN_KEYS = (
    "password",
    "passwd",
    "passphrase",
    "secret",
    "token",
    "api_key",
    "apikey",
    "authorization",
    "private_key",
    "credential",
    "cookie",
    "session_id",
)

# Credentials that stand on their own inside free text.
_TEXT_PATTERNS = [
    # A bearer token outside a key: "sent Bearer abc.def-123".
    (re.compile(r"(?i)\b(bearer)(\s+)[A-Za-z0-9\-._~+/]{8,}=*"), r"\1\2" + REDACTED),
    # The password in URLs: postgres://app:s3cret@db/x, redis://:s3cret@host.
    (re.compile(r"(?i)\b([a-z][a-z0-9+.\-]*://[^\s:/@]*):[^\s@/]+@"), r"\1:" + REDACTED + "@"),
    # JSON Web Tokens.
    (re.compile(r"\beyJ[A-Za-z0-9_\-]{5,}\.[A-Za-z0-9_\-]{5,}\.[A-Za-z0-9_\-]*"), REDACTED),
    # Well-known key formats: GitHub, Slack, Stripe, OpenAI-style, AWS access key ids.
    (
        re.compile(
            r"\b(gh[pousr]_[A-Za-z0-9]{20,}|github_pat_[A-Za-z0-9_]{20,}|xox[abposr]-[A-Za-z0-9\-]{10,}"
            r"|[sr]k_(live|test)_[A-Za-z0-9]{10,}|sk-[A-Za-z0-9_\-]{20,}|AKIA[0-9A-Z]{16})\b"
        ),
        REDACTED,
    ),
]


def _normalise_key(key: object) -> str:
    return str(key).lower().replace("-", "_")


def _sensitive_words() -> tuple[str, ...]:
    return _words(tuple(get_setting("REDACT_KEYS")))


@lru_cache(maxsize=8)
def _words(extra_keys: tuple[Any, ...]) -> tuple[str, ...]:
    return BUILTIN_KEYS + tuple(_normalise_key(key) for key in extra_keys)


def is_sensitive_key(key: object, words: tuple[str, ...] | None = None) -> bool:
    normalised = _normalise_key(key)
    return any(word in normalised for word in (words or _sensitive_words()))


@lru_cache(maxsize=8)
def _key_value_pattern(words: tuple[str, ...]) -> re.Pattern[str]:
    # password=hunter2, "api_key": "abc", X-Api-Key: abc, Authorization: Bearer abc, DB_PASSWORD='x y'
    alternatives = "|".join(
        re.escape(word).replace("_", "[-_]") for word in sorted(words, key=len, reverse=True)
    )
    return re.compile(
        r"""(?ix)
        (?P<key>["']?[\w\-.]*(?:"""
        + alternatives
        + r""")[\w\-.]*["']?)                                   # a key that names a secret
        (?P<sep>\s*[:=]\s*|\s+is\s+)                            # = or : or " is "
        (?P<value>(?:(?:bearer|basic|token|digest)\s+)?         # an optional auth scheme
                  (?:"[^"]*"|'[^']*'|[^\s,;&"'}\])]+))          # the quoted or bare value
        """
    )


def storable_text(text: str) -> str:
    """``text`` that every database stores: no NUL characters, no lone surrogates."""
    return text.replace("\x00", "\ufffd").encode("utf-8", "replace").decode("utf-8")


def redact_text(text: str) -> str:
    """``text`` with credentials replaced by ``[REDACTED]``."""
    if not text:
        return text
    return _redacted_text(text, _sensitive_words())


@lru_cache(maxsize=256)
def _redacted_text(text: str, words: tuple[str, ...]) -> str:
    """Kept for the lines that come again and again ("Done.", "Waiting: DNS record not visible yet")."""
    text = _key_value_pattern(words).sub(lambda m: f"{m.group('key')}{m.group('sep')}{REDACTED}", text)
    for pattern, replacement in _TEXT_PATTERNS:
        text = pattern.sub(replacement, text)
    return text


def shown_text(value: Any, limit: int | None = None) -> str:
    """Text a job shows (log line, error, wait reason, message), fit to store: redacted, shortened."""
    return _shown_text(str(value), limit, _sensitive_words())


@lru_cache(maxsize=256)
def _shown_text(text: str, limit: int | None, words: tuple[str, ...]) -> str:
    """Kept, like ``_redacted_text``, for the lines every job writes ("Done.")."""
    text = storable_text(text)
    if text:
        text = _redacted_text(text, words)
    if limit is not None and len(text) > limit:
        text = text[: limit - 1] + "…"
    return text


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
