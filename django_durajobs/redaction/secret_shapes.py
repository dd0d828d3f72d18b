"""Where secrets are in free text: the shapes redaction knows, found in time linear in the text.

Each shape is found by a regular expression that begins with a literal character or a small set of
them ("://", the "_" of "ghp_", "-----BEGIN"), so the search skips everything else in C and Python
sees only candidates; keys and their values are found by ``secret_keys``. Quantifiers are
possessive and no pattern reads past its own token, line or value, so no input makes a search
slower than linear. What is found are spans of the text; overlapping spans become one
``[REDACTED]``.
"""

from __future__ import annotations

import re
from bisect import bisect_left
from collections.abc import Iterator

from .secret_keys import Span, grouped, key_finder

REDACTED = "[REDACTED]"

#: Vendors' tokens: a literal prefix and what follows it.
VENDOR_TOKENS = (
    *((f"gh{kind}_", r"[A-Za-z0-9]{30,}+") for kind in "pousr"),  # GitHub
    ("github_pat_", r"[A-Za-z0-9_]{30,}+"),
    *((f"gl{kind}-", r"[A-Za-z0-9_\-]{20,}+") for kind in ("pat", "dt", "rt", "ptt", "oas", "cbt", "imt")),
    *((f"xox{kind}-", r"[A-Za-z0-9\-]{10,}+") for kind in "abposrce"),  # Slack
    ("xapp-", r"[A-Za-z0-9\-]{10,}+"),
    *((f"{kind}k_{mode}_", r"[A-Za-z0-9]{10,}+") for kind in "sr" for mode in ("live", "test")),  # Stripe
    ("whsec_", r"[A-Za-z0-9]{20,}+"),
    ("sk-", r"[A-Za-z0-9_\-]{20,}+"),  # OpenAI (sk-, sk-proj-), Anthropic (sk-ant-)
    ("SG.", r"[A-Za-z0-9_\-]{16,}+\.[A-Za-z0-9_\-]{16,}+"),  # SendGrid
    ("SK", r"[0-9a-fA-F]{32}(?![0-9a-fA-F])"),  # Twilio API key
    ("npm_", r"[A-Za-z0-9]{36,}+"),
    ("pypi-", r"[A-Za-z0-9_\-]{50,}+"),
    ("AIza", r"[0-9A-Za-z_\-]{35}"),  # Google API key
    ("ya29.", r"[0-9A-Za-z_\-]{20,}+"),  # Google OAuth access token
    ("HRKU-", r"[A-Za-z0-9_\-]{20,}+"),  # Heroku
    *((f"do{kind}_v1_", r"[a-f0-9]{64}") for kind in "por"),  # DigitalOcean
    *((f"shp{kind}_", r"[a-fA-F0-9]{32}") for kind in ("at", "ss", "ca", "pa")),  # Shopify
    *((f"sq0{kind}-", r"[A-Za-z0-9_\-]{22,}+") for kind in ("atp", "csp")),  # Square
    ("EAAA", r"[A-Za-z0-9_\-]{60,}+"),
    ("key-", r"[0-9a-f]{32}(?![0-9a-f])"),  # Mailgun
    *((kind, r"[0-9A-Z]{16}(?![0-9A-Z])") for kind in ("AKIA", "ASIA", "ABIA", "ACCA")),  # AWS key ids
    ("ATATT3", r"[A-Za-z0-9_\-=]{30,}+"),  # Atlassian
)


def _vendor_alternatives() -> Iterator[str]:
    """Each vendor's token, anchored on the first sign of its prefix (the "_" of "ghp_"), where a
    search goes on only if the letter before the sign is one that some prefix has there; a prefix
    without a sign is anchored on its first letter ("A" of "AKIA"), at the start of a token."""
    signed: dict[str, dict[str, list[str]]] = {}
    unsigned: list[tuple[str, str]] = []
    for prefix, rest in VENDOR_TOKENS:
        sign_at = min((prefix.find(s) for s in "_-." if s in prefix), default=-1)
        if sign_at < 0:
            unsigned.append((prefix[0], re.escape(prefix[1:]) + rest))
            continue
        before, after = prefix[: sign_at + 1], prefix[sign_at + 1 :]
        pattern = rf"(?<=(?<![\w.\-]){re.escape(before)}){re.escape(after)}{rest}"
        signed.setdefault(prefix[sign_at], {}).setdefault(prefix[sign_at - 1], []).append(pattern)
    for sign, by_letter in signed.items():
        branches = "|".join(
            f"(?<={re.escape(letter + sign)})(?:{'|'.join(patterns)})"
            for letter, patterns in by_letter.items()
        )
        yield f"{re.escape(sign)}(?<=[{re.escape(''.join(by_letter))}]{re.escape(sign)})(?:{branches})"
    yield grouped(unsigned, check=r"(?<![\w.\-]{first})")


#: Every alternative starts with a literal character: the search skips to those characters in C.
#: A whole token (a JWT, a vendor's token) has no group of its own.
_FORWARD = re.compile(
    r"""
    # postgres://app:s3cret@db/x — the password runs to the last "@" (it may hold "@" and "/")
    # ("host:8080/..." is a port; "a://b:c" followed by "//" starts the next URL)
    ://[^\s:/@"'<>]*+:(?!//|[0-9]++/)(?P<url>)
    # a JSON Web Token (or base64url JSON: header and payload suffice when its end was cut off)
    | J(?<=(?<![\w.\-])eyJ)[\w\-]{10,}+(?:\.[\w\-]*+){0,2}+
    # a vendor's token, by its prefix, at the start of a token
    | <VENDOR_TOKENS>
    # "Bearer abc.def-123" outside a key (a credential has a digit or a sign: not "Basic health")
    | B(?<![\w.\-]B)(?:earer|EARER|asic|ASIC)[ \t]++(?P<credential><CREDENTIAL>)
    | b(?<![\w.\-]b)(?:earer|asic)[ \t]++(?P<lower_credential><CREDENTIAL>)
    # a Slack webhook: its path is the secret
    | hooks\.slack\.com/services/(?P<webhook>[A-Za-z0-9/_\-]++)
    # curl -u user:pass; mysql -pSECRET (judged by the command before it on its line)
    | -(?<![\w.\-]-)(?:
        (?:-user|u)[ \t]++["']?[^\s:"']++:(?P<user_password>[^\s"']++)
        | p(?P<mysql_password>[^\s"'\-=][^\s"'=]*+)(?!=)
    )
    """.replace("<VENDOR_TOKENS>", "\n    | ".join(_vendor_alternatives())).replace(
        "<CREDENTIAL>", r"(?=[A-Za-z]*+[0-9\-._~+/=])[A-Za-z0-9\-._~+/]{8,}+=*+"
    ),
    re.VERBOSE,
)
_TOKEN_CHARS = frozenset("_-.")
_RUN_END = re.compile(r"[\s\"'<>]")
_PEM_BEGIN = re.compile(r"-----BEGIN[A-Z0-9 ]{0,40}PRIVATE KEY(?: BLOCK)?-----")
_PEM_END = re.compile(r"-----END[A-Z0-9 ]{0,40}PRIVATE KEY(?: BLOCK)?-----")
_MYSQL_COMMANDS = ("mysql", "mariadb")
_COMMAND_REACH = 300  # how far back on its line "-pSECRET" looks for its command


def redact_shapes(text: str, words: tuple[str, ...]) -> str:
    """``text`` with every secret of a known shape replaced by ``[REDACTED]``; ``words`` are the
    secret words of key names (``secret_keys.SECRET_WORDS`` and the ``REDACT_KEYS``).

    Overlapping and touching secrets become one ``[REDACTED]``.
    """
    spans = secret_spans(text, words)
    spans.sort()
    pieces: list[str] = []
    secret_end = -1  # where the last secret ends: a span that overlaps or touches it joins it
    for start, end in spans:
        if start <= secret_end:
            secret_end = max(secret_end, end)
        elif end > start:
            pieces += (text[max(secret_end, 0) : start], REDACTED)
            secret_end = end
    if not pieces:
        return text
    pieces.append(text[secret_end:])
    return "".join(pieces)


def secret_spans(text: str, words: tuple[str, ...]) -> list[Span]:
    """Where the secrets are: ``(start, end)`` of each, in no particular order, maybe overlapping."""
    spans = list(_private_keys(text))
    spans += _Forward(text).spans()
    spans += key_finder(words).spans(text)
    return spans


def _private_keys(text: str) -> Iterator[Span]:
    """The body of each private-key block; one cut off before its END is redacted to the end."""
    position = 0
    while begin := _PEM_BEGIN.search(text, position):
        end = _PEM_END.search(text, begin.end())
        yield (begin.end(), end.start() if end else len(text))
        if end is None:
            return
        position = end.end()


class _Forward:
    """URL passwords, tokens, credentials after a scheme, and passwords of command-line options."""

    def __init__(self, text: str) -> None:
        self.text = text
        # The run of non-blank text a URL is in, read once for all the URLs in it:
        # (start, end, positions of "@", positions of "?").
        self._run: tuple[int, int, list[int], list[int]] = (0, 0, [], [])

    def spans(self) -> Iterator[Span]:
        for match in _FORWARD.finditer(self.text):
            kind = match.lastgroup
            if kind is None:
                yield self._whole_token(match)
            elif kind == "url":
                password = self._url_password(match.end())
                if password:
                    yield password
            elif kind != "mysql_password" or self._after_mysql(match.start()):
                yield match.span(kind)  # a credential after its scheme, a password after its option

    def _whole_token(self, match: re.Match[str]) -> Span:
        """A token's match starts at its anchor ("_" of "ghp_", "J" of "eyJ"): back to its start."""
        start = match.start()
        while start > 0 and (self.text[start - 1].isalnum() or self.text[start - 1] in _TOKEN_CHARS):
            start -= 1
        return (start, match.end())

    def _url_password(self, at: int) -> Span | None:
        """The password of ``scheme://user:password@host`` starting at ``at``: up to the last "@"
        of the URL (before its "?", if one comes before that "@")."""
        run_start, run_end, ats, questions = self._run
        if not run_start <= at < run_end:
            end = _RUN_END.search(self.text, at)
            run_end = end.start() if end else len(self.text)
            run = self.text[at:run_end]
            ats = [at + found.start() for found in re.finditer("@", run)]
            questions = [at + found.start() for found in re.finditer(r"\?", run)]
            self._run = (at, run_end, ats, questions)
        if not ats or ats[-1] < at:
            return None
        last = ats[-1]
        query = bisect_left(questions, at)
        if query < len(questions) and questions[query] < last:
            before_query = bisect_left(ats, questions[query]) - 1
            if before_query >= 0 and ats[before_query] >= at:
                last = ats[before_query]
        slash = self.text.find("/", at, last)
        if last == at or (slash >= 0 and self.text[at:slash].isdigit()):
            return None  # "user:@host", or host:8080/path?mail=a@b: a port, no password
        return (at, last)

    def _after_mysql(self, option_at: int) -> bool:
        reach = max(0, option_at - _COMMAND_REACH)
        line_start = self.text.rfind("\n", reach, option_at) + 1
        before = self.text[max(line_start, reach) : option_at]
        return any(command in before for command in _MYSQL_COMMANDS)
