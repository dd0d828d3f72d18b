"""How an answer to a job's question is logged, and found again by the job page."""

from __future__ import annotations

import functools
import re
from pathlib import Path
from typing import Any

from django.conf import settings
from django.utils import translation
from django.utils.translation import gettext_lazy

#: The log lines of a question's answer, which the job page shows as its "chosen action". They are
#: written in the language of whoever answered, so the page finds them in any of the package's.
ANSWERED = gettext_lazy("Resumed with %(action)s by %(actor)s.")
UNANSWERED = gettext_lazy("Nobody answered: resolved with %(action)s by its deadline.")


def chosen_label(actions: list[dict[str, Any]] | None, action: str) -> str:
    """The label a person saw on the action ``action`` (its id when it has none): what the log names."""
    offered = {entry["id"]: entry.get("label") for entry in actions or []}
    return str(offered.get(action) or action)


def answer_line_pattern() -> str:
    """A regular expression (portable to every database's ``__regex``) matching an answer's log
    line in English, in the site's language and in every language this package is translated into."""
    languages = {"en", settings.LANGUAGE_CODE, *translated_languages()}
    return _answer_line_pattern(tuple(sorted(languages)))


@functools.cache
def translated_languages() -> tuple[str, ...]:
    locale = Path(__file__).resolve().parent / "locale"
    return tuple(sorted(path.parent.parent.name for path in locale.glob("*/LC_MESSAGES/django.mo")))


@functools.cache
def _answer_line_pattern(languages: tuple[str, ...]) -> str:
    patterns = set()
    for language in languages:
        with translation.override(language):
            for template in (ANSWERED, UNANSWERED):
                pieces = re.split(r"%\(\w+\)s", str(template))
                patterns.add("^" + ".+".join(re.escape(piece) for piece in pieces) + "$")
    return "|".join(sorted(patterns))
