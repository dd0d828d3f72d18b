"""Fixtures for every test.

- ``child_env``: the environment for a child Python process (a worker, a management command)
  that must use the test database; it commits data (``transactional_db``) so the child sees it.
- ``db_vendor``: ``"sqlite"``, ``"postgresql"`` or ``"mysql"``.
- ``runjobs``: start ``manage.py runjobs`` processes (with ``child_env``), killed at the end.

``tests.helpers.wait_for`` is the way to wait for something another thread or process does.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests.helpers import REPO_ROOT


@pytest.fixture(scope="session")
def django_db_modify_db_settings(django_db_modify_db_settings, django_db_keepdb):
    """Remove a stale SQLite WAL left by a killed run before the test database is created.

    Django deletes only the database file when it recreates it; an old ``-wal`` file beside a
    new database would be replayed into it.
    """
    from django.conf import settings

    db = settings.DATABASES["default"]
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
def runjobs(tmp_path):
    """Start ``python -m django runjobs ARGS``; every process is SIGKILLed and reaped afterwards.

    Each process's output (stdout and stderr) goes to its own file: ``proc.log_path``.
    """
    started = []

    def start(*args, env, extra_env=None):
        log_path = tmp_path / f"runjobs-{len(started)}.log"
        log = log_path.open("w")
        proc = subprocess.Popen(
            [sys.executable, "-m", "django", "runjobs", *args],
            env={**env, **(extra_env or {})},
            cwd=REPO_ROOT,
            stdout=log,
            stderr=subprocess.STDOUT,
        )
        proc.log_path = log_path
        started.append((proc, log))
        return proc

    yield start
    for proc, log in started:
        if proc.poll() is None:
            proc.kill()
        proc.wait(timeout=10)
        log.close()
