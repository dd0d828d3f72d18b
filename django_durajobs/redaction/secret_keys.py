"""Keys that name secrets, and where their values are in free text.

A key's name is judged by its segments (split on ``_ - .`` and camelCase), so ``DB_PASS``,
``api-key`` and ``clientSecret`` name secrets and ``monkey``, ``author`` and ``passenger`` do not;
the same rule serves dict keys (``redact()``) and keys in text.

In text, a key comes before its separator, so keys are looked for in the reversed text, where the
separator ("=", ":", "=>", " is ", or a space after a config-style key) comes first and the key's
name is read on from it. Each search begins at a literal character or a small set of them and only
a key holding a hint of a secret ("pw", "key", "token", ...) makes a match, so ordinary text costs
no Python; the name itself is judged once per distinct key. Quantifiers are possessive and no
pattern reads past its key, value or line: the time is linear in the text.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Iterator
from functools import lru_cache
from typing import cast

Span = tuple[int, int]

#: A key is sensitive if one of its segments is one of these: ``DB_PASS``, ``api-key``,
#: ``clientSecret``, ``idempotency_key``; not ``monkey``, ``author``, ``passenger``, ``keyboard``.
SECRET_SEGMENTS = frozenset(
    {
        "pass",
        "pwd",
        "pw",
        "key",
        "secret",
        "secrets",
        "token",
        "auth",
        "otp",
        "totp",
        "signature",
        "sig",
        "credential",
        "credentials",
        "creds",
        "jwt",
        "bearer",
    }
)

#: ... or if the key contains one of these (lower-cased, ``-`` read as ``_``), or one of
#: ``REDACT_KEYS``: ``PGPASSWORD``, ``requirepass``, ``x-api-key``.
SECRET_WORDS = (
    "password",
    "passwd",
    "passphrase",
    "passcode",
    "secret",
    "api_key",
    "apikey",
    "access_key",
    "accesskey",
    "authorization",
    "private_key",
    "privatekey",
    "credential",
    "cookie",
    "session_id",
    "sessionid",
    "sessid",
    "requirepass",
    "masterauth",
)

#: A segment ending in "token" names one too (``csrftoken``, ``accessToken``); ``max_tokens`` not.
SECRET_SUFFIX = "token"

#: Words that start an ordinary sentence as often as a config line: "key rotated", "token expired".
PROSE_WORDS = frozenset(
    word + plural
    for word in ("pass", "password", "passphrase", "key", "secret", "token", "auth", "cookie", "credential")
    for plural in ("", "s")
)

#: An exception's name before its message ("KeyError: 'id'", "TokenExpiredError: ...") is no key.
EXCEPTION_SEGMENTS = frozenset({"error", "exception", "warning"})

#: Keys whose bare value is the rest of the line (an HTTP header: "Authorization: Digest a=1, b=2").
HEADER_KEYS = frozenset({"authorization", "proxy_authorization", "cookie", "set_cookie"})

_SEGMENT = re.compile(r"[A-Z]+(?![a-z])|[A-Z]?[a-z]+|[0-9]+")
_CONFIG_STYLE = re.compile(r"^-|[_.\-]\w|[a-z0-9][A-Z]|^[A-Z0-9]*[A-Z][A-Z0-9]*$")
_LONGEST_KEY = 100  # a longer "key" is judged by its end: what comes before a "=" is no name
NOT_SECRET, SECRET, HEADER = range(3)


def key_segments(key: str) -> list[str]:
    """``"clientSecret"`` → ``["client", "secret"]``; ``"X-Api-Key"`` → ``["x", "api", "key"]``."""
    return [segment.lower() for segment in _SEGMENT.findall(key)]


def normalised_key(key: str) -> str:
    return key.lower().replace("-", "_")


def _secret_segment(segment: str) -> bool:
    return segment in SECRET_SEGMENTS or segment.endswith(SECRET_SUFFIX)


def is_sensitive(key: str, words: tuple[str, ...], spaced: bool = False) -> bool:
    """Whether ``key`` names a secret; ``words`` are ``SECRET_WORDS`` and the ``REDACT_KEYS``.

    ``spaced``: a key followed by its value with only a space between them (``CLIENT_SECRET abc``)
    must look like a config key (``_``, ``-`` or ``.`` inside, ALL-CAPS, camelCase, or a leading
    ``--``) and end with a secret word: "pass-through mode" and "key-value store" are prose.
    """
    return _is_sensitive(key[-_LONGEST_KEY:], words, spaced)


@lru_cache(maxsize=4096)
def _is_sensitive(key: str, words: tuple[str, ...], spaced: bool) -> bool:
    normalised = normalised_key(key)
    segments = key_segments(key)
    if segments and segments[-1] in EXCEPTION_SEGMENTS:
        return False
    if spaced:
        return (
            _CONFIG_STYLE.search(key.rstrip("-.")) is not None
            and bool(segments)
            and (_secret_segment(segments[-1]) or normalised.rstrip("_.").endswith(words))
        )
    return any(word in normalised for word in words) or any(_secret_segment(seg) for seg in segments)


def _line_key_is_sensitive(key: str, words: tuple[str, ...]) -> bool:
    """A lower-case key alone with its value on a line, as in redis.conf: ``requirepass foobared``."""
    return key not in PROSE_WORDS and (_secret_segment(key_segments(key)[-1]) or key.endswith(words))


# Patterns --------------------------------------------------------------------------------------


def grouped(alternatives: Iterable[tuple[str, str]], check: str = "") -> str:
    """``(first character, pattern for the rest)`` pairs as one alternation grouped by their first
    character, so that a position costs one comparison per group, not one per alternative;
    ``check`` (``{first}`` standing for the character) is tested once after it."""
    groups: dict[str, list[str]] = {}
    for first, rest in alternatives:
        groups.setdefault(first, []).append(rest)
    return "|".join(
        re.escape(first) + check.format(first=re.escape(first)) + f"(?:{'|'.join(rests)})"
        for first, rests in groups.items()
    )


def _literals(words: Iterable[str], then: str = "") -> Iterator[tuple[str, str]]:
    """Literal words for ``grouped``; "_" in one matches "-" too (``api_key``, ``api-key``)."""
    for word in words:
        yield word[0], re.escape(word[1:]).replace("_", "[_\\-]") + then


def _cases(word: str) -> tuple[str, ...]:
    return tuple(dict.fromkeys((word, word.capitalize(), word.upper())))


#: What a key naming a secret holds, in lower, Capitalised or UPPER case: the test that spares
#: Python the keys of ordinary text ("a=1", "at 10:00").
_KEY_HINTS = (
    "pw",
    "pass",
    "key",
    "secret",
    "token",
    "auth",
    "otp",
    "sig",
    "cred",
    "jwt",
    "bearer",
    "cookie",
    "sess",
)

_WORD = r"""[^\s,;&"'<>(){}\[\]|]++"""  # a bare value's word; "[" never starts one: [REDACTED] stays
_ONE_WORD = re.compile(_WORD)
#: A value is a quoted text (to its closing quote; unclosed: to the end of its line), bare words up
#: to the next key or a sign, or nothing.
_BLANKS = re.compile(r"[ \t]*+")
_QUOTED = re.compile(r""""(?:[^"\\\n]++|\\.)*+"?|'(?:[^'\\\n]++|\\.)*+'?""")
_MORE_WORDS = re.compile(r"[ \t]++(?![\w.\-]++[ \t]*+[:=])" + _WORD)
_LINE_BREAK = re.compile(r"[\r\n]")


class _Reach:
    """Where the values in one text end, each stretch of it read once.

    The values of many keys can share their words and lines ("password=password=...",
    "Authorization: Authorization: ..."): what was found for a key further on serves every key
    before it, so a text costs the same however many keys it holds. Keys are met from the end of the
    text backwards, so each window below only grows towards the start.
    """

    def __init__(self, text: str) -> None:
        self.text = text
        size = len(text)
        self._word = (size, size)  # text[start:end] is part of one word, and end where it ends
        self._line = (size, size)  # text[start:end] is within one line, and end where it ends
        self._words_end: dict[int, int] = {}  # a word's end -> where the bare words from it end

    def word_end(self, at: int) -> int:
        """Where the word starting at ``at`` ends (``at`` when none starts there)."""
        start, end = self._word
        if start <= at < end:
            return end
        word = _ONE_WORD.match(self.text, at, start if at < start else len(self.text))
        if word is None:
            return at
        self._word = (at, end if at < start and word.end() == start else word.end())
        return self._word[1]

    def header_end(self, at: int, quote: str) -> int:
        """A header's value is the rest of its line ("Digest a=1, b=2"), or of the quotes it is in."""
        line_end = self._line_end(at)
        if quote in ("'", '"'):
            closing = self.text.find(quote, at, line_end)
            if closing >= 0:
                return closing
        return line_end

    def _line_end(self, at: int) -> int:
        start, end = self._line
        if start <= at <= end:
            return end
        found = _LINE_BREAK.search(self.text, at, start if at < start else len(self.text))
        self._line = (at, found.start() if found else end if at < start else len(self.text))
        return self._line[1]

    def value(self, at: int) -> Span:
        """The value after a key's separator at ``at``: quoted, bare words or nothing."""
        start = cast("re.Match[str]", _BLANKS.match(self.text, at)).end()
        if self.text[start : start + 1] in ("'", '"'):
            return cast("re.Match[str]", _QUOTED.match(self.text, start)).span()
        return (start, self._words_end_from(start))

    def _words_end_from(self, at: int) -> int:
        position = self.word_end(at)
        if position == at:
            return at
        passed = []
        while (end := self._words_end.get(position)) is None:
            passed.append(position)
            more = _MORE_WORDS.match(self.text, position)
            if more is None:
                end = position
                break
            position = more.end()
        self._words_end.update(dict.fromkeys(passed, end))
        return end


class _KeyFinder:
    """The patterns for one set of words (the built-in ones and the ``REDACT_KEYS``)."""

    def __init__(self, words: tuple[str, ...]) -> None:
        self.words = words
        self._verdicts: dict[str, int] = {}  # key -> its verdict: the same keys come again
        extra = tuple(word for word in words if word not in SECRET_WORDS)
        hints = grouped(_literals(case[::-1] for word in (*_KEY_HINTS, *extra) for case in _cases(word)))
        endings = []  # the end of a spaced key: "_secret", "Secret" after a small letter, "SECRET"
        for word in sorted({*SECRET_SEGMENTS, SECRET_SUFFIX, *SECRET_WORDS, *extra}):
            endings += [*_literals([word[::-1]], r"(?=[_.\-])"), *_literals([word.upper()[::-1]])]
            if "_" not in word:
                endings += _literals([word.capitalize()[::-1]], "(?=[a-z0-9])")
        # In the reversed text, where a key's separator comes before it. The one character a search
        # looks for comes first; the lookbehinds after it tell which one it was (a ":" before "//"
        # is a URL's). A hint counts in the key's last 100 characters, the ones that are judged.
        self.backwards = re.compile(
            r"""[:=>\ \t](?:
                # "password=x", "'api_key': 'x'", "token => x", "key := x" (reversed "=>": ">=")
                (?:(?<=>)=|(?<==):?|(?<=:)(?<!/:))[ \t]*+\]?["']?
                (?P<key>(?=[\w.\-]{0,99}?(?:<HINTS>))[\w.\-]++)
                # (from the first blank of a run only: each blank of a long run would read the rest)
                | (?<=(?<![ \t])[ \t])[ \t]*+(?:
                    # "token is x" (reversed: " si ")
                    si[ \t]++\]?["']?(?P<is_key>(?=[\w.\-]{0,99}?(?:<HINTS>))[\w.\-]++)
                    # "CLIENT_SECRET x", "clientSecret x", "--password x": a value, a space, a key
                    | (?P<spaced_key>(?:<ENDINGS>)[\w.\-]*+)
                )
            )""".replace("<HINTS>", hints).replace("<ENDINGS>", grouped(endings)),
            re.VERBOSE,
        )
        # In the text: a line of a lower-case key and its value.
        self.lines = re.compile(
            r"""\n(?=[a-z][a-z0-9]*+[ \t]++[^\s\#"'\[]++[ \t\r]*+(?:\#|\n|\Z))
            (?P<key>(?=[a-z0-9]*?(?:<HINTS>))[a-z][a-z0-9]*+)[ \t]++(?P<value>[^\s\#"'\[]++)
            """.replace("<HINTS>", grouped(_literals((*_KEY_HINTS, *extra)))),
            re.VERBOSE,
        )

    def _verdict(self, key: str) -> int:
        """``NOT_SECRET``, ``SECRET`` or ``HEADER`` (a secret whose bare value is its line's rest)."""
        verdict = self._verdicts.get(key)
        if verdict is None:
            if len(self._verdicts) > 4096:
                self._verdicts.clear()
            verdict = NOT_SECRET
            if is_sensitive(key, self.words):
                verdict = HEADER if normalised_key(key).lstrip("_") in HEADER_KEYS else SECRET
            self._verdicts[key] = verdict
        return verdict

    def spans(self, text: str) -> Iterator[Span]:
        """The values of keys that name secrets: ``password=x``, ``API_KEY x``, ``requirepass x``."""
        size, backwards = len(text), text[::-1]
        reach, verdicts = _Reach(text), self._verdicts
        for match in self.backwards.finditer(backwards):
            # 1: key, 2: is_key, 3: spaced_key; each alternative ends in its group, so never None.
            group = cast(int, match.lastindex)
            key_start, key_end = size - match.end(), size - match.start(group)
            if key_end - key_start > _LONGEST_KEY:
                key_start = key_end - _LONGEST_KEY
            key = text[key_start:key_end]
            at = size - match.start()
            if group == 3:
                end = reach.word_end(at)
                if end > at and text[at:end] != "is" and is_sensitive(key, self.words, spaced=True):
                    yield (at, end)
                continue
            verdict = verdicts.get(key)
            if verdict is None:
                verdict = self._verdict(key)
            if verdict == NOT_SECRET:
                continue
            if group == 2:  # "password is x": one word
                end = reach.word_end(at)
                if end > at:
                    yield (at, end)
                continue
            start, end = reach.value(at)
            if end > start and text[start] in "\"'":  # keep the quotes: "password": "[REDACTED]"
                yield (start + 1, end - (end - start > 1 and text[end - 1] == text[start]))
            elif verdict == HEADER and text[key_end : key_end + 1] not in ("'", '"'):
                yield (start, reach.header_end(start, quote=text[key_start - 1 : key_start]))
            else:
                yield (start, end)
        for match in self.lines.finditer("\n" + text):
            if _line_key_is_sensitive(match.group("key"), self.words):
                start, end = match.span("value")
                yield (start - 1, end - 1)


@lru_cache(maxsize=8)
def key_finder(words: tuple[str, ...]) -> _KeyFinder:
    return _KeyFinder(words)
