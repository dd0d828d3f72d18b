"""Guards for the test harness itself: the engine layer has no database, ``wait_for`` waits, and
the tests that may differ between Django versions are marked so (CI runs them on every line)."""

from __future__ import annotations

from types import SimpleNamespace

import pytest

from django_durajobs import Job
from tests.conftest import DJANGO_VERSIONS, pytest_collection_modifyitems
from tests.engine.conftest import pytest_runtest_setup
from tests.helpers import REPO_ROOT, wait_for


def test_a_query_in_the_engine_layer_is_refused():
    with pytest.raises(RuntimeError, match="Database access not allowed"):
        Job.objects.count()


@pytest.mark.parametrize(
    "fixturenames, mark",
    [(["db"], None), (["child_env", "transactional_db"], None), ([], "django_db")],
    ids=["db", "a fixture built on transactional_db", "the django_db mark"],
)
def test_an_engine_test_that_asks_for_the_database_fails_before_it_runs(fixturenames, mark):
    item = SimpleNamespace(
        nodeid="tests/engine/test_x.py::test_x",
        fixturenames=fixturenames,
        get_closest_marker=lambda name: object() if name == mark else None,
    )
    with pytest.raises(pytest.fail.Exception, match="put it in tests/integration/"):
        pytest_runtest_setup(item)


def test_an_engine_test_that_asks_for_no_database_runs():
    item = SimpleNamespace(nodeid="t", fixturenames=["tmp_path"], get_closest_marker=lambda name: None)
    pytest_runtest_setup(item)


def test_wait_for_returns_the_truthy_value():
    calls = iter([0, None, "ready"])
    assert wait_for(lambda: next(calls), timeout=5, interval=0) == "ready"


def test_wait_for_raises_on_timeout():
    with pytest.raises(AssertionError, match="timed out"):
        wait_for(lambda: False, timeout=0.05, interval=0.01)


@pytest.mark.parametrize("pattern", sorted(DJANGO_VERSIONS))
def test_each_pattern_of_the_django_versions_mark_names_test_files(pattern):
    """A renamed file would otherwise drop out of the runs on the older Django line unseen."""
    assert list(REPO_ROOT.glob(pattern)), f"{pattern} matches no test file"


def test_the_marks_follow_the_file_of_each_test():
    def item(path: str) -> SimpleNamespace:
        found = SimpleNamespace(path=REPO_ROOT / path, marks=[])
        found.add_marker = lambda mark: found.marks.append(mark.name)
        return found

    items = [
        item("tests/integration/test_admin_edges.py"),
        item("tests/e2e/test_tasks_workers.py"),
        item("tests/e2e/test_fleet.py"),
        item("tests/integration/test_retry_rules.py"),
    ]
    pytest_collection_modifyitems(items)
    assert [found.marks for found in items] == [["django_versions"], ["django_versions", "e2e"], ["e2e"], []]
