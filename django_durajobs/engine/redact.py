"""Keeping secrets out of what a job shows.

Log lines, error text and run results are redacted before they are stored; step results are
stored intact (replay must return exactly what the step returned) and redacted when shown.
"""

from __future__ import annotations

import re
from functools import lru_cache
from typing import Any

from ..conf import get_setting

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
    # Authorization schemes: "Bearer abc.def", "Basic dXNlcjpwYXNz", "Token abc".
    (re.compile(r"(?i)\b(bearer|basic|token)(\s+)[A-Za-z0-9\-._~+/]{6,}=*"), r"\1\2" + REDACTED),
    # user:password@ in URLs (postgres://app:s3cret@db/..., https://u:p@host).
    (re.compile(r"(?i)\b([a-z][a-z0-9+.\-]*://[^\s:/@]+):[^\s@/]+@"), r"\1:" + REDACTED + "@"),
    # JSON Web Tokens.
    (re.compile(r"\beyJ[A-Za-z0-9_\-]{5,}\.[A-Za-z0-9_\-]{5,}\.[A-Za-z0-9_\-]*"), REDACTED),
    # Well-known key formats: GitHub, Slack, Stripe/OpenAI-style, AWS access key ids.
    (
        re.compile(
            r"\b(gh[pousr]_[A-Za-z0-9]{20,}|xox[abposr]-[A-Za-z0-9\-]{10,}|sk_(live|test)_[A-Za-z0-9]{10,}|sk-[A-Za-z0-9_\-]{20,}|AKIA[0-9A-Z]{16})\b"
        ),
        REDACTED,
    ),
]


def _sensitive_words() -> tuple[str, ...]:
    extra = tuple(str(key).lower().replace("-", "_") for key in get_setting("REDACT_KEYS"))
    return BUILTIN_KEYS + extra


def is_sensitive_key(key: object, words: tuple[str, ...] | None = None) -> bool:
    normalised = str(key).lower().replace("-", "_")
    return any(word in normalised for word in (words or _sensitive_words()))


@lru_cache(maxsize=8)
def _key_value_pattern(words: tuple[str, ...]) -> re.Pattern[str]:
    # password=hunter2, "api_key": "abc", token: abc, DB_PASSWORD='x y' ...
    alternatives = "|".join(re.escape(word) for word in sorted(words, key=len, reverse=True))
    return re.compile(
        r"""(?ix)
        (?P<key>["']?[\w\-.]*(?:"""
        + alternatives
        + r""")[\w\-.]*["']?)                      # a key that names a secret
        (?P<sep>\s*[:=]\s*|\s+is\s+)              # = or : or " is "
        (?P<value>"[^"]*"|'[^']*'|[^\s,;&"'}\])]+)  # the quoted or bare value
        """
    )


def redact_text(text: str) -> str:
    """``text`` with credentials replaced by ``[REDACTED]``."""
    if not text:
        return text
    words = _sensitive_words()
    text = _key_value_pattern(words).sub(lambda m: f"{m.group('key')}{m.group('sep')}{REDACTED}", text)
    for pattern, replacement in _TEXT_PATTERNS:
        text = pattern.sub(replacement, text)
    return text


def redact(value: Any) -> Any:
    """A copy of a JSON-like value with secret-named keys masked and secrets in strings removed."""
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
    """A redacted one-line account of an exception, fit to store as a job's error."""
    message = str(exc)
    text = f"{type(exc).__name__}: {message}" if message else type(exc).__name__
    text = redact_text(text)
    return text if len(text) <= limit else text[: limit - 1] + "…"
