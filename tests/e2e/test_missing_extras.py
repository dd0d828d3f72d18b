"""A cron schedule in a virtualenv without croniter: the user reads the command that fixes it.

The virtualenv is real (``python -m venv``) and holds Django and this package only, so croniter
is missing as it is for a user who installed ``django-durajobs`` without the ``cron`` extra. A
small project on SQLite meets the schedule where a user does: at ``@job``, in ``manage.py check``
(and so ``migrate``), and in the worker's log for a schedule added in the admin.
"""

from __future__ import annotations

import importlib.util
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

pytestmark = pytest.mark.slow

THE_FIX = 'Install it with: pip install "django-durajobs[cron]"'

#: What the virtualenv holds: Django, what Django needs, and this package.
PACKAGES = ("django", "asgiref", "sqlparse", "django_durajobs")

SETTINGS = """
import os
SECRET_KEY = "missing-extras"
USE_TZ = True
INSTALLED_APPS = ["django.contrib.contenttypes", "django.contrib.auth", "django_durajobs"]
if os.environ.get("WITH_CRON_APP"):
    INSTALLED_APPS.append("cronapp")
DATABASES = {"default": {"ENGINE": "django.db.backends.sqlite3", "NAME": "db.sqlite3"}}
DEFAULT_AUTO_FIELD = "django.db.models.BigAutoField"
if os.environ.get("WITH_CRON_SETTING"):
    DURAJOBS = {"SCHEDULES": {"nightly": {"kind": "nightly_report", "cron": "0 3 * * *"}}}
"""

JOBS = """
from django_durajobs import job


@job("nightly_report", schedule="0 3 * * *")
def nightly_report(job, ctx):
    pass
"""

ADMIN_SCHEDULE = """
from datetime import timedelta
from django.utils import timezone
from django_durajobs.models import Schedule
Schedule.objects.create(
    name="from-the-admin", kind="nightly_report", cron="0 3 * * *", source=Schedule.Source.ADMIN,
    next_run_at=timezone.now() - timedelta(minutes=1),
)
"""


@pytest.fixture(scope="module")
def project(tmp_path_factory) -> Path:
    """A project directory whose ``venv/bin/python`` has no croniter."""
    root = tmp_path_factory.mktemp("without-croniter")
    subprocess.run(
        [sys.executable, "-m", "venv", "--without-pip", str(root / "venv")], check=True, timeout=120
    )
    [site_packages] = (root / "venv" / "lib").glob("python3.*/site-packages")
    for name in PACKAGES:
        spec = importlib.util.find_spec(name)
        assert spec is not None and spec.submodule_search_locations, name
        (site_packages / name).symlink_to(spec.submodule_search_locations[0])
    (root / "settings.py").write_text(SETTINGS)
    (root / "cronapp").mkdir()
    (root / "cronapp" / "__init__.py").write_text("")
    (root / "cronapp" / "jobs.py").write_text(JOBS)
    (root / "manage.py").write_text(
        "import sys\nfrom django.core.management import execute_from_command_line\n"
        "execute_from_command_line(sys.argv)\n"
    )
    assert run(root, "-c", "import croniter").returncode == 1  # the virtualenv is what it claims
    return root


def run(root: Path, *arguments: str, **env: str) -> subprocess.CompletedProcess[str]:
    """``venv/bin/python ARGUMENTS`` in the project, nothing of this test run in its environment."""
    environment = {
        name: value
        for name, value in os.environ.items()
        if not name.startswith(("DATABASE_URL", "DURAJOBS_", "DJANGO_", "PYTHON", "VIRTUAL_ENV"))
    }
    environment.update(DJANGO_SETTINGS_MODULE="settings", PYTHONPATH=str(root), **env)
    return subprocess.run(
        [str(root / "venv" / "bin" / "python"), *arguments],
        cwd=root,
        env=environment,
        capture_output=True,
        text=True,
        timeout=120,
    )


def test_the_decorator_names_the_schedule_and_the_fix_where_it_is_written(project):
    started = run(project, "-c", "import django; django.setup()", WITH_CRON_APP="1")
    assert started.returncode == 1
    assert f'cronapp{os.sep}jobs.py", line 5' in started.stderr  # the traceback points at @job
    assert started.stderr.strip().splitlines()[-1] == (
        "django_durajobs.errors.JobError: Schedule 'nightly_report' is a cron schedule and needs "
        f"croniter, which is not installed. {THE_FIX}"
    )


def test_manage_py_check_and_migrate_name_the_fix(project):
    for command in (["check"], ["migrate", "--noinput"]):
        refused = run(project, "manage.py", *command, WITH_CRON_SETTING="1")
        assert refused.returncode == 1, refused.stderr
        assert (
            "?: (durajobs.E007) Schedule 'nightly' is a cron schedule and needs croniter, which is "
            f"not installed. {THE_FIX}"
        ) in refused.stderr


def test_the_worker_logs_the_fix_for_a_cron_schedule_added_in_the_admin(project):
    assert run(project, "manage.py", "migrate", "--noinput", "-v", "0").returncode == 0
    assert run(project, "manage.py", "shell", "-c", textwrap.dedent(ADMIN_SCHEDULE)).returncode == 0

    worker = run(project, "manage.py", "runjobs", "--burst")
    assert worker.returncode == 0, worker.stderr
    assert (
        "Schedule from-the-admin enqueues nothing: Schedule 'from-the-admin' is a cron schedule and "
        f"needs croniter, which is not installed. {THE_FIX}"
    ) in worker.stderr
