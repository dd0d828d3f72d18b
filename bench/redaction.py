"""The redaction workload, and the texts built to make redaction slow: token-like runs and the
shapes its patterns look for, repeated. ``tests/engine/test_redaction_limits.py`` holds redaction to a
bound on each of these texts.
"""

from __future__ import annotations

import base64
import random
import time
from collections.abc import Callable

from bench.report import Figure


def _repeated(piece: str) -> Callable[[int], str]:
    return lambda size: (piece * (size // len(piece) + 1))[:size]


def _random_bytes(size: int) -> bytes:
    return random.Random(size).randbytes(size)


#: The token-like texts: what a job might really print (a blob, a dump), each one run or many.
TOKEN_LIKE: dict[str, Callable[[int], str]] = {
    "base64 run": lambda size: base64.b64encode(_random_bytes(size)).decode()[:size],
    "base64url run": lambda size: base64.urlsafe_b64encode(_random_bytes(size)).decode()[:size],
    "hex run": lambda size: _random_bytes(size // 2 + 1).hex()[:size],
    "word run": _repeated("abcdefghijklmnopqrstuvwxyz"),
    "token and password inside one run": _repeated("tokentoken_password"),
    "token and password as words": _repeated("token password key secret auth "),
    'password=" without closing quotes': _repeated('password="' + "Zm9vYmFy" * 8 + "\n"),
    "many ://": _repeated("a://"),
}

#: Texts made of what each pattern looks for, as densely as it comes.
HOSTILE: dict[str, Callable[[int], str]] = {
    **TOKEN_LIKE,
    'password=" unclosed, densely': _repeated('password="'),
    'password=" and a word, unclosed': _repeated('password="x '),
    "URLs with a port and an @": _repeated("a://b:1/@"),
    "URLs with a password": _repeated("postgres://u:p@h/ "),
    "separators": _repeated("a=1 "),
    "keys holding a hint": _repeated("monkey=1 "),
    "a secret every five characters": _repeated("pw=x "),
    "config keys and a space": _repeated("API_KEY x "),
    "key lines": _repeated("requirepass x\n"),
    "private key headers without an end": _repeated("-----BEGIN RSA PRIVATE KEY-----"),
    "JWT starts": _repeated("eyJ"),
    "Bearer and a space": _repeated("Bearer "),
    "mysql -p": _repeated("mysql -px "),
    "quotes": _repeated('"'),
    "backslashes in a quoted value": _repeated('password="\\'),
    "dashes": _repeated("-"),
    "signs after letters": _repeated("e-s_G."),
    "A_B": _repeated("A_B "),
    # Each key's value would run over every key after it: read once, however many keys share it.
    "secret keys and their separators, densely": _repeated("password=api_key:"),
    "header keys, densely": _repeated("Authorization: cookie="),
    "keys inside a config key's value": _repeated("CLIENT_SECRET a=token is b="),
    "blanks": _repeated(" \t "),
    "JSON": _repeated('{"user": "bob", "api_key": "abc", "n": 1}, '),
    "prose": _repeated("The token expired, retrying in 5 s; key rotation finished for bob@example.com. "),
}


def token_like_mix(size: int, chunk: int = 16_384) -> str:
    """``size`` characters of the token-like texts in turn, ``chunk`` characters of each."""
    makers = list(TOKEN_LIKE.values())
    pieces, total = [], 0
    while total < size:
        piece = makers[len(pieces) % len(makers)](min(chunk, size - total))
        pieces.append(piece + "\n")
        total += len(piece) + 1
    return "".join(pieces)[:size]


def redaction(bench) -> list[Figure]:
    """Milliseconds per megabyte to redact token-like text, and the slowest of each kind of text;
    and what showing a megabyte-long log line costs (only a window past its limit is read).

    No database and no raw queue: redaction is plain Python. The best of a few runs each.
    """
    from django_durajobs.conf import get_setting
    from django_durajobs.redaction import redact_text, shown_text

    size = bench.sizes.redaction
    per_megabyte = 1_000_000 / size
    on = f"best of 3 on {size:,} characters"

    def ms_per_megabyte(text: str) -> float:
        return best_seconds(lambda: redact_text(text)) * 1000 * per_megabyte

    mix = ms_per_megabyte(token_like_mix(size))
    token_like = {name: ms_per_megabyte(make(size)) for name, make in TOKEN_LIKE.items()}
    hostile = {name: token_like.get(name) or ms_per_megabyte(make(size)) for name, make in HOSTILE.items()}
    slowest_token_like = max(token_like, key=token_like.get)
    slowest = max(hostile, key=hostile.get)
    limit = get_setting("LOG_LINE_MAX_CHARS")
    line = HOSTILE["a secret every five characters"](1_000_000)
    shown = best_seconds(lambda: shown_text(line, limit)) * 1000
    return [
        Figure("redact_token_like", "redact 1 MB of token-like text (mixed)", mix, "ms", note=on),
        Figure(
            "redact_token_like_slowest",
            "redact 1 MB of token-like text (the slowest kind)",
            token_like[slowest_token_like],
            "ms",
            note=slowest_token_like,
        ),
        Figure(
            "redact_hostile_slowest",
            "redact 1 MB of hostile text (the slowest kind)",
            hostile[slowest],
            "ms",
            note=slowest,
        ),
        Figure(
            "redact_line_shown",
            f"show a 1 MB log line at {limit} characters",
            shown,
            "ms",
            note="a window is read",
        ),
    ]


def best_seconds(work: Callable[[], object], runs: int = 3) -> float:
    best = float("inf")
    for _ in range(runs):
        start = time.perf_counter()
        work()
        best = min(best, time.perf_counter() - start)
    return best
