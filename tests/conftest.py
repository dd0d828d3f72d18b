"""Fixtures for every test.

- ``child_env``: the environment for a child Python process (a worker, a management command)
  that must use the test database; it commits data (``transactional_db``) so the child sees it.
- ``db_vendor``: ``"sqlite"``, ``"postgresql"`` or ``"mysql"``.
- ``spawn``: start ``python -m MODULE`` children (such as ``tests.child_run``), killed at the end.
- ``runjobs``: start ``manage.py runjobs`` processes (with ``child_env``), killed at the end.

Tests whose outcome may differ between Django versions carry the ``django_versions`` mark, given
here by their file (``DJANGO_VERSIONS``): CI runs them on every Django line, and the rest on the
older line on SQLite only. Tests that never use the test run's database carry ``database_free``
(``DATABASE_FREE``): CI runs them on SQLite only, since the other databases would change nothing.

``tests.helpers.wait_for`` is the way to wait for something another thread or process does;
``tests.helpers.log_of`` reads what a child said.
"""

from __future__ import annotations

import os
import subprocess
import sys
from fnmatch import fnmatch
from pathlib import Path

import pytest

from tests.helpers import REPO_ROOT

#: The test files whose outcome may differ between Django versions (by pattern, from the
#: repository's root), and what of Django they lean on.
DJANGO_VERSIONS = {
    "tests/engine/test_checks.py": "the system checks framework",
    "tests/integration/test_admin*.py": "the admin's templates, views and actions",
    "tests/integration/test_*_admin.py": "the admin's templates, views and actions",
    "tests/integration/test_console.py": "the admin's templates and views",
    "tests/integration/test_korean.py": "Django's own catalogs beside the package's",
    "tests/integration/test_js_catalog.py": "Django's JavaScript catalog view",
    "tests/integration/test_example.py": "the example project's admin and settings",
    "tests/integration/test_tasks_*.py": "django.tasks on Django 6, the django-tasks backport on 5.2",
    "tests/e2e/test_tasks_*.py": "django.tasks on Django 6, the django-tasks backport on 5.2",
    "tests/e2e/test_*browser*.py": "the admin's templates, scripts and styles in a browser",
    "tests/e2e/test_async_asgi.py": "Django's ASGI handler and async views",
    "tests/e2e/test_console_truth.py": "the admin's templates, scripts and styles in a browser",
    "tests/e2e/test_example_languages.py": "the example project's settings, LocaleMiddleware and i18n views",
    "tests/integration/test_end_user*.py": "Django's views, CSRF, sessions and templates",
    "tests/e2e/test_end_user*.py": "Django's ASGI handler, streaming responses and a browser",
}

#: The test files that never use the test run's database, and why.
DATABASE_FREE = {
    "tests/engine/test_*.py": "pure rules: a test there that asks for the database fails",
    "tests/e2e/test_quick_start.py": "the demo, on a SQLite file of its own",
    "tests/e2e/test_missing_extras.py": "a new project, on a SQLite file of its own",
}

#: Fixtures that use the test run's database, or hand it to a child process.
USES_THE_DATABASE = {"db", "transactional_db", "live_server", "child_env", "runjobs", "spawn"}


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """Mark each test of a file in ``DJANGO_VERSIONS`` ``django_versions``, of one in
    ``DATABASE_FREE`` ``database_free``, and of tests/e2e/ ``e2e``."""
    for item in items:
        path = item.path.relative_to(REPO_ROOT).as_posix()
        if any(fnmatch(path, pattern) for pattern in DJANGO_VERSIONS):
            item.add_marker(pytest.mark.django_versions)
        if any(fnmatch(path, pattern) for pattern in DATABASE_FREE):
            fixtures = set(getattr(item, "fixturenames", ()))
            if item.get_closest_marker("django_db") or USES_THE_DATABASE & fixtures:
                message = f"{item.nodeid} asks for the database: take its file out of DATABASE_FREE"
                raise pytest.UsageError(message)
            item.add_marker(pytest.mark.database_free)
        if path.startswith("tests/e2e/"):
            item.add_marker(pytest.mark.e2e)
    if os.environ.get("DURAJOBS_TEST_JOBS_DATABASE"):
        _use_every_database(items)


def _use_every_database(items: list[pytest.Item]) -> None:
    """With the jobs in a database of their own (``DURAJOBS_TEST_JOBS_DATABASE``), every test that
    uses a database (by a mark or a fixture) may use both: its ``django_db`` mark, again, with
    every database."""
    for item in items:
        mark = item.get_closest_marker("django_db")
        if mark is None and "_django_db_helper" not in getattr(item, "fixturenames", ()):
            continue
        kwargs = {**(mark.kwargs if mark else {}), "databases": "__all__"}
        item.add_marker(pytest.mark.django_db(*(mark.args if mark else ()), **kwargs), append=False)


def pytest_configure(config: pytest.Config) -> None:
    """With the jobs in a database of their own, a test's ``override_settings(DURAJOBS=…)`` keeps
    them there unless it says otherwise."""
    if not os.environ.get("DURAJOBS_TEST_JOBS_DATABASE"):
        return
    from django.core.signals import setting_changed

    setting_changed.connect(_keep_jobs_database, weak=False)


def _keep_jobs_database(setting: str, value: object, **kwargs: object) -> None:
    if setting == "DURAJOBS" and isinstance(value, dict):
        value.setdefault("DATABASE", "jobs")


@pytest.fixture(scope="session")
def django_db_modify_db_settings(django_db_modify_db_settings, django_db_keepdb):
    """Remove a stale SQLite WAL left by a killed run before the test database is created.

    Django deletes only the database file when it recreates it; an old ``-wal`` file beside a
    new database would be replayed into it.
    """
    from django.conf import settings

    for db in settings.DATABASES.values():
        if db["ENGINE"] == "django.db.backends.sqlite3" and not django_db_keepdb:
            name = db.get("TEST", {}).get("NAME")
            if name:
                for suffix in ("", "-wal", "-shm"):
                    Path(f"{name}{suffix}").unlink(missing_ok=True)


@pytest.fixture
def child_env(transactional_db) -> dict[str, str]:
    """Environment for ``subprocess`` children that must connect to this run's test database.

    Use with ``sys.executable`` and ``cwd=REPO_ROOT``; data the test writes is committed
    (``transactional_db``), so the child sees it.
    """
    env = dict(os.environ)
    env["DURAJOBS_USE_TEST_DB"] = "1"
    env["DJANGO_SETTINGS_MODULE"] = "tests.settings"
    paths = [str(REPO_ROOT)] + [p for p in env.get("PYTHONPATH", "").split(os.pathsep) if p]
    env["PYTHONPATH"] = os.pathsep.join(dict.fromkeys(paths))
    return env


@pytest.fixture
def db_vendor() -> str:
    """The database vendor; reading it needs no database access."""
    from django.db import connection

    return connection.vendor


@pytest.fixture
def spawn(tmp_path):
    """Start ``python -m MODULE ARGS`` children; each one still alive at the end is SIGKILLed and reaped.

    A child's stdout and stderr go to one file, ``proc.log_path`` (``log_of(proc)`` reads it), and
    it runs unbuffered, so a test reads what a child said even when it killed the child, and with
    ``faulthandler`` on, so a child that hangs can be made to print its threads' stacks (SIGABRT).
    """
    started: list[subprocess.Popen] = []

    def start(
        module: str, *args: str, env: dict[str, str], extra_env: dict[str, str] | None = None
    ) -> subprocess.Popen:
        log_path = tmp_path / f"{module.rsplit('.', 1)[-1]}-{len(started)}.log"
        with log_path.open("w") as log:
            proc = subprocess.Popen(
                [sys.executable, "-m", module, *args],
                env={**env, "PYTHONUNBUFFERED": "1", "PYTHONFAULTHANDLER": "1", **(extra_env or {})},
                cwd=REPO_ROOT,
                stdout=log,
                stderr=subprocess.STDOUT,
            )
        proc.log_path = log_path
        started.append(proc)
        return proc

    yield start
    for proc in started:
        if proc.poll() is None:
            proc.kill()  # also ends a SIGSTOPped process
        proc.wait(timeout=10)


@pytest.fixture
def runjobs(spawn):
    """Start ``python -m django runjobs ARGS`` workers with ``env`` (and ``extra_env`` over it)."""

    def start(*args: str, env: dict[str, str], extra_env: dict[str, str] | None = None) -> subprocess.Popen:
        return spawn("django", "runjobs", *args, env=env, extra_env=extra_env)

    return start
