"""The engine layer: pure rules, no database.

pytest-django refuses database access to a test that asks for no database; a test here that asks
for one (the ``django_db`` mark, ``db``, ``transactional_db`` or a fixture built on them, such as
``child_env``) fails before it runs, so a rule that needs the database cannot hide here. No
fixture of this folder may ask for the database either.
"""

from __future__ import annotations

import pytest

DATABASE_FIXTURES = {
    "db",
    "transactional_db",
    "django_db_reset_sequences",
    "django_db_serialized_rollback",
    "live_server",
}


def pytest_runtest_setup(item: pytest.Item) -> None:
    wanted = DATABASE_FIXTURES.intersection(getattr(item, "fixturenames", ()))
    if item.get_closest_marker("django_db") or wanted:
        pytest.fail(
            f"{item.nodeid} asks for the database ({', '.join(sorted(wanted)) or 'django_db'}): "
            "tests/engine/ is for rules that need none; put it in tests/integration/",
            pytrace=False,
        )
