"""Texts built to make redaction slow: token-like runs and the shapes its patterns look for,
repeated. ``bench/workloads.py`` times redacting them; ``tests/test_redaction_limits.py`` holds
redaction to a bound on each of them.
"""

from __future__ import annotations

import base64
import random
from collections.abc import Callable


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
