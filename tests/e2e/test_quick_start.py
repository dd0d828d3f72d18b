"""The README's quick start: ``scripts/demo --no-serve`` sets up a fresh directory (virtualenv
skipped, this interpreter used), creates the admin login and the demo data, runs the due jobs
once, and each demo job reaches the state the README describes; ``--reset`` starts it again from
nothing.
"""

from __future__ import annotations

import os
import re
import sqlite3
import subprocess
import sys
import tomllib
from contextlib import closing
from importlib.metadata import packages_distributions

from tests.helpers import REPO_ROOT

#: A child's sitecustomize.py (first on its path): the modules it names are not installed there.
BLOCKER = """
import sys

for name in {missing!r}:
    sys.modules[name] = None  # every "import name…" raises ImportError
"""


def demo_environment():
    """scripts/demo run as the test's interpreter, on SQLite in ``tmp_path``: nothing of this
    test run's database settings leaks into it."""
    env = {
        name: value
        for name, value in os.environ.items()
        if not name.startswith(("DATABASE_URL", "DURAJOBS_", "DEMO_", "DJANGO_"))
    }
    env.update(
        DEMO_NO_VENV="1",
        DEMO_PYTHON=sys.executable,
        DEMO_STEP_SECONDS="0",
        DEMO_DNS_PROPAGATION_SECONDS="3600",  # the deploy must find its DNS still propagating
    )
    return env


def run_demo(demo_dir, *options, **env):
    """``scripts/demo --no-serve`` on ``demo_dir``; its stderr, once it succeeded."""
    finished = subprocess.run(
        [str(REPO_ROOT / "scripts" / "demo"), "--no-serve", "--dir", str(demo_dir), *options],
        env={**demo_environment(), **env},
        cwd=demo_dir.parent,
        capture_output=True,
        text=True,
        timeout=240,
    )
    assert finished.returncode == 0, finished.stderr[-3000:]
    return finished.stderr


def test_the_quick_start_sets_up_a_fresh_directory_and_its_jobs_reach_their_states(tmp_path):
    demo_dir = tmp_path / "demo dir"  # a space: the script quotes its paths
    output = run_demo(demo_dir)
    assert "admin login: username admin, password " in output
    assert (demo_dir / "var" / "demo" / "backups" / "seed.json.gz").exists()

    with sqlite3.connect(demo_dir / "example.sqlite3") as database:
        rows = database.execute(
            "SELECT kind, status, attempt, error_code, parent_id FROM django_durajobs_job ORDER BY id"
        ).fetchall()
        assert database.execute("SELECT is_superuser FROM auth_user WHERE username = 'admin'").fetchone() == (
            1,
        )
    top = {
        kind: (status, attempt, error_code)
        for kind, status, attempt, error_code, parent in rows
        if parent is None
    }
    children = sorted(status for kind, status, _, _, parent in rows if parent is not None)

    assert top["backup_database"][0] == "done"
    assert top["restore_database"][0] == "needs_user"
    assert top["deploy_site"][0] == "awaiting_external"
    assert top["process_order"][0] == "awaiting_external"  # waiting for its payment event
    assert top["refund_order"][0] == "needs_user"
    assert top["update_module"] == ("failed", 1, "partial_rollout")
    assert children == ["done"] * 4 + ["failed"] * 2  # a partial family
    status, attempt, error_code = top["flaky_call"]
    assert (status, error_code) == ("queued", "transient") and attempt in (1, 2)  # waiting for its retry


def test_reset_starts_the_demo_again_from_nothing(tmp_path):
    """``--reset`` deletes the demo's database and files, so every story starts again; without it a
    second run keeps them (the demo's data and jobs are made once)."""
    demo_dir = tmp_path / "demo dir"
    run_demo(demo_dir)
    leftover = demo_dir / "var" / "demo" / "left-over"
    leftover.write_text("from the run before")
    with sqlite3.connect(demo_dir / "example.sqlite3") as database:
        database.execute("UPDATE django_durajobs_job SET label = 'seen before'")
        jobs = database.execute("SELECT COUNT(*) FROM django_durajobs_job").fetchone()

    run_demo(demo_dir)
    assert leftover.exists()
    with closing(sqlite3.connect(demo_dir / "example.sqlite3")) as database:
        assert database.execute("SELECT COUNT(*) FROM django_durajobs_job").fetchone() == jobs

    output = run_demo(demo_dir, "--reset")
    assert "--reset: deleting" in output
    assert not leftover.exists()
    with closing(sqlite3.connect(demo_dir / "example.sqlite3")) as database:
        assert database.execute("SELECT COUNT(*) FROM django_durajobs_job").fetchone() == jobs
        assert database.execute(
            "SELECT COUNT(*) FROM django_durajobs_job WHERE label = 'seen before'"
        ).fetchone() == (0,)


def test_the_demo_in_korean_seeds_korean_jobs_and_its_worker_writes_korean(tmp_path):
    """``--language ko``: the seeded jobs' labels and step titles, the questions the jobs ask and
    the wait reasons the worker writes are Korean; kinds, statuses and codes are the same."""
    from tests.integration.test_korean import ko

    demo_dir = tmp_path / "demo"
    run_demo(demo_dir, "--language", "ko")

    with closing(sqlite3.connect(demo_dir / "example.sqlite3")) as database:
        jobs = dict(database.execute("SELECT kind, label FROM django_durajobs_job WHERE parent_id IS NULL"))
        waits = dict(database.execute("SELECT kind, wait_reason FROM django_durajobs_job"))
        titles = {
            title
            for (title,) in database.execute(
                "SELECT s.title FROM django_durajobs_jobstep s JOIN django_durajobs_job j ON j.id = s.job_id "
                "WHERE j.kind = 'refund_order'"
            )
        }
        statuses = dict(
            database.execute("SELECT kind, status FROM django_durajobs_job WHERE parent_id IS NULL")
        )

    assert jobs["process_order"] == ko("Process order %(number)s") % {"number": 1002}
    assert waits["process_order"] == ko("Waiting for event %(name)s") % {"name": "payment:1002"}
    assert ko("Approval") in titles and ko("Pay the money back") in titles
    assert (statuses["refund_order"], statuses["process_order"]) == ("needs_user", "awaiting_external")


def distribution(requirement: str) -> str:
    return re.split(r"[\[<>=!~; ]", requirement, maxsplit=1)[0].lower().replace("_", "-")


def modules_outside_the_example_extra() -> set[str]:
    """The modules of this package's optional dependencies that ``pip install django-durajobs[example]``
    does not install, as pyproject.toml declares them (the test extra aside)."""
    extras = tomllib.loads((REPO_ROOT / "pyproject.toml").read_text())["project"]["optional-dependencies"]
    example = {distribution(requirement) for requirement in extras["example"]}
    others = {
        distribution(requirement)
        for extra, requirements in extras.items()
        if extra not in ("example", "test")
        for requirement in requirements
    } - example
    return {
        module
        for module, names in packages_distributions().items()
        if {name.lower().replace("_", "-") for name in names} & others
    }


def test_the_demo_needs_nothing_its_extra_does_not_install(tmp_path):
    """The demo's optional imports come from the ``example`` extra, not from this machine: with
    every other extra's packages missing (croniter among them, unless the extra lists it), the
    demo migrates, seeds and runs its jobs."""
    missing = modules_outside_the_example_extra()
    assert {"rich", "time_machine", "prometheus_client"} <= missing  # installed here, and blocked
    blocker = tmp_path / "blocker"
    blocker.mkdir()
    (blocker / "sitecustomize.py").write_text(BLOCKER.format(missing=sorted(missing)))
    demo_dir = tmp_path / "demo"

    output = run_demo(demo_dir, PYTHONPATH=str(blocker))
    assert "admin login: username admin" in output
    with closing(sqlite3.connect(demo_dir / "example.sqlite3")) as database:
        assert database.execute("SELECT kind FROM django_durajobs_schedule").fetchall() == [
            ("backup_database",)
        ]
