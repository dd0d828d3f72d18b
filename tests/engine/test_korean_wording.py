"""The Korean catalogs read as if written in Korean: no fallback particle ("을(를)", "이(가)"…), and
no particle that depends on the last sound of a value (을/를, 이/가…) right after a placeholder,
whose value's last sound the translator cannot know. Read from the compiled catalogs (stdlib gettext).
"""

from __future__ import annotations

import gettext
import re
from pathlib import Path

import pytest

from tests.helpers import REPO_ROOT

CATALOGS = sorted(
    [
        *(REPO_ROOT / "django_durajobs" / "locale" / "ko" / "LC_MESSAGES").glob("*.mo"),
        *(REPO_ROOT / "example_project" / "demo" / "locale" / "ko" / "LC_MESSAGES").glob("*.mo"),
    ]
)
#: Both forms of a particle, one in brackets: what a translation writes when it cannot choose.
FALLBACK = re.compile(r"\((을|를|이|가|은|는|와|과|으로|로|으|이라|라|아|야)\)|(을|이|은|와)/(를|가|는|과)")
#: A placeholder (``%(name)s``, ``%(lag).1f``, ``{{ name }}``, ``%s``), maybe quoted, then a particle
#: whose form depends on that value's last sound.
PLACEHOLDER = r"(%\(\w+\)[.\d]*[sdrf]|\{\{ ?\w+ ?\}\}|%[sd])[”’'\"]?"
SOUND_PARTICLE = re.compile(PLACEHOLDER + r"(을|를|이|가|은|는|와|과|으로|로)(?![가-힣])")


def translations(catalog: Path) -> list[tuple[str, str]]:
    with catalog.open("rb") as compiled:
        messages = gettext.GNUTranslations(compiled)._catalog  # type: ignore[attr-defined]
    return [(str(source), text) for source, text in messages.items() if source]


def test_there_are_korean_catalogs():
    assert {path.name for path in CATALOGS} >= {"django.mo", "djangojs.mo"}


@pytest.mark.parametrize("catalog", CATALOGS, ids=lambda path: str(path.relative_to(REPO_ROOT)))
def test_no_fallback_particle(catalog):
    found = [(source, text) for source, text in translations(catalog) if FALLBACK.search(text)]
    assert found == []


@pytest.mark.parametrize("catalog", CATALOGS, ids=lambda path: str(path.relative_to(REPO_ROOT)))
def test_no_particle_chosen_blind_after_a_value(catalog):
    found = [(source, text) for source, text in translations(catalog) if SOUND_PARTICLE.search(text)]
    assert found == []


def test_the_checks_find_what_they_look_for():
    assert FALLBACK.search("작업 %(id)s을(를) 재개했습니다.")
    assert SOUND_PARTICLE.search("작업 %(id)s을 재개했습니다.")
    assert SOUND_PARTICLE.search("“{{ kind }}”를 모릅니다")
    assert SOUND_PARTICLE.search("%(lag).1f가 늦었습니다")
    assert not SOUND_PARTICLE.search("#%(id)d이며 %(lag).1f초")  # the copula follows any sound
    assert not SOUND_PARTICLE.search("%(id)s번 작업을 재개했습니다.")
    assert not SOUND_PARTICLE.search("%(actor)s의 요청으로 %(count)s개")
