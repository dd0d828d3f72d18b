"""The README's examples run as pasted: its ``myapp`` modules are written to a package of that name
and a fresh Python process runs the README's own code against this run's test database.

scripts/check-quickstart runs the Installation example once more from an installed wheel, with a real
``runjobs`` worker.
"""

from __future__ import annotations

import re
import subprocess
import sys
import textwrap

import pytest

from django_durajobs import Job, Status
from tests.helpers import REPO_ROOT

pytestmark = pytest.mark.slow

README = (REPO_ROOT / "README.md").read_text(encoding="utf-8")


def block(first_line: str, after: str | None = None) -> str:
    """The README's Python block that starts with ``first_line`` (the first after the heading ``after``)."""
    text = README if after is None else README[README.index(after) :]
    for code in re.findall(r"```python\n(.*?)```", text, flags=re.DOTALL):
        if code.startswith(first_line):
            return code
    raise AssertionError(f"README.md has no Python block starting {first_line!r}")


def run_readme(tmp_path, child_env, modules: dict[str, str], script: str) -> str:
    package = tmp_path / "myapp"
    package.mkdir()
    (package / "__init__.py").write_text("")
    for name, code in modules.items():
        (package / name).write_text(code)
    program = "import django\ndjango.setup()\n" + script
    env = {**child_env, "PYTHONPATH": f"{tmp_path}:{child_env['PYTHONPATH']}"}
    finished = subprocess.run(
        [sys.executable, "-c", program], cwd=REPO_ROOT, env=env, capture_output=True, text=True, timeout=120
    )
    assert finished.returncode == 0, finished.stderr
    return finished.stdout


def test_writing_a_job_runs_as_pasted_and_its_revert_undoes_it(tmp_path, child_env):
    section = "## Writing a job"
    modules = {
        "hosting.py": block("# myapp/hosting.py", after=section),
        "jobs.py": block("# myapp/jobs.py", after=section),
    }
    script = block("# start and act on a job", after=section) + textwrap.dedent(
        """
        assert describe(job)["status"] == "reverted", describe(job)
        print(job.pk)
        """
    )
    pk = int(run_readme(tmp_path, child_env, modules, script).split()[-1])

    job = Job.objects.get(pk=pk)
    assert (job.kind, job.status, job.idempotency_key) == ("deploy_website", Status.REVERTED, "deploy-7-v42")
    assert job.result == {"url": "https://site-7.example.com/"}
    done = job.steps.filter(state="done")
    assert sorted(done.values_list("phase", "step_id")) == [
        ("revert", "restore_previous"),
        ("run", "build"),
        ("run", "switch"),
        ("run", "upload"),
    ]


def test_the_installation_example_enqueues_and_runs_a_first_job(tmp_path, child_env):
    section = "## Installation"
    modules = {"jobs.py": block("# myapp/jobs.py", after=section)}
    script = (
        block("from myapp.jobs import say_hello", after=section)
        + "\nfrom django_durajobs import drain\ndrain()\nprint(job.pk)\n"
    )
    pk = int(run_readme(tmp_path, child_env, modules, script).split()[-1])

    job = Job.objects.get(pk=pk)
    assert (job.kind, job.status, job.result) == ("say_hello", Status.DONE, {"greeting": "Hello, Ada!"})
