"""Guards for the test harness itself: child processes and threads reach this run's database."""

from __future__ import annotations

import os
import subprocess
import sys
import threading

import pytest
from django.db import connection, connections

from tests.helpers import REPO_ROOT
from tests.testapp.models import SideEffect

CHILD_SCRIPT = """
import django
django.setup()
from django.db import connection
from tests.testapp.models import SideEffect
print(connection.settings_dict["NAME"])
print(SideEffect.objects.filter(name="written-by-the-test").count())
"""


def test_child_process_sees_rows_written_by_the_test(child_env):
    SideEffect.objects.create(name="written-by-the-test")

    proc = subprocess.run(
        [sys.executable, "-c", CHILD_SCRIPT],
        env=child_env,
        cwd=REPO_ROOT,
        capture_output=True,
        text=True,
        timeout=120,
    )

    assert proc.returncode == 0, proc.stderr
    name, count = proc.stdout.splitlines()[-2:]
    assert name == str(connection.settings_dict["NAME"])  # the test database, not the main one
    assert count == "1"


def test_thread_sees_rows_written_by_the_test(transactional_db):
    SideEffect.objects.create(name="seen-by-a-thread")
    seen = []

    def read():
        try:
            seen.append(SideEffect.objects.filter(name="seen-by-a-thread").count())
        finally:
            connections.close_all()

    thread = threading.Thread(target=read)
    thread.start()
    thread.join(timeout=30)
    assert seen == [1]


def test_sqlite_test_database_is_a_wal_file(db, db_vendor):
    if db_vendor != "sqlite":
        pytest.skip("SQLite only")
    assert not connection.is_in_memory_db()
    with connection.cursor() as cursor:
        cursor.execute("PRAGMA journal_mode")
        assert cursor.fetchone()[0] == "wal"


def test_each_xdist_worker_has_a_test_database_of_its_own(db):
    """Under pytest-xdist the workers never share a database (nor do the processes they start: the
    child process test above sees the same name)."""
    worker = os.environ.get("PYTEST_XDIST_WORKER")
    if not worker:
        pytest.skip("not run on pytest-xdist workers")
    assert str(connection.settings_dict["NAME"]).endswith(f"_{worker}")
