"""The corpus of secret shapes (``tests/secret_corpus.py``): each shape alone is redacted by
``redact_text``. End to end, in tables, pages and a worker's log: ``tests/e2e/test_secret_corpus.py``.
"""

from __future__ import annotations

import pytest

from django_durajobs.redaction import REDACTED, redact_text
from tests.secret_corpus import CORPUS, GROUPS, Shape, group_text


def test_the_corpus_has_sixty_shapes_each_with_a_secret_of_its_own():
    assert len(CORPUS) >= 60
    secrets = [shape.secret for shape in CORPUS]
    assert len(set(secrets)) == len(secrets)
    assert all(shape.secret in shape.text for shape in CORPUS)


@pytest.mark.parametrize("shape", CORPUS, ids=lambda shape: shape.name)
def test_each_shape_alone_is_redacted(shape: Shape):
    redacted = redact_text(shape.text)

    assert shape.secret not in redacted
    assert REDACTED in redacted


@pytest.mark.parametrize("group", GROUPS, ids=lambda group: " + ".join(shape.name for shape in group))
def test_a_group_of_shapes_is_redacted_as_each_of_them_alone(group: tuple[Shape, ...]):
    assert redact_text(group_text(group)) == "\n".join(redact_text(shape.text) for shape in group)


def test_every_shape_is_in_one_group():
    assert sorted(shape.name for group in GROUPS for shape in group) == sorted(shape.name for shape in CORPUS)
