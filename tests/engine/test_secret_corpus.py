"""The corpus of secret shapes (``tests/secret_corpus.py``): each shape alone is redacted by
``redact_text``. End to end, in tables, pages and a worker's log: ``tests/e2e/test_secret_corpus.py``.
"""

from __future__ import annotations

import pytest

from django_durajobs.redaction import REDACTED, redact_text
from tests.secret_corpus import CORPUS, Shape


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
