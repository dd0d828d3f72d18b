"""A newcomer's first project, made with the docs' own text (run by scripts/check-quickstart).

Runs in a fresh virtualenv where only the built wheel is installed, in an empty directory:
``django-admin startproject``, ``startapp myapp``, the README's Installation section (its
INSTALLED_APPS, its ``migrate``, its ``myapp/jobs.py`` and the code that enqueues the job), the
deploy kind of docs/writing-jobs.md with the README's stand-ins for its helpers, and
``runjobs --burst``. Each code block is taken from the docs as they are, so a renamed name or a
snippet that no longer runs fails here. Exit status: 0 when both jobs are done.
"""

from __future__ import annotations

import ast
import os
import re
import shlex
import subprocess
import sys
import time
from pathlib import Path

HERE = Path.cwd()
REPO = Path(os.environ["QUICKSTART_REPO"])
README = (REPO / "README.md").read_text(encoding="utf-8")
WRITING_JOBS = (REPO / "docs" / "writing-jobs.md").read_text(encoding="utf-8")

#: What the walk-through's last command prints: each job's kind, status and result.
REPORT = """
from django_durajobs import Job
for job in Job.objects.order_by("pk"):
    print("job:", job.kind, job.status, job.result)
"""

#: What the "Start one" block of docs/writing-jobs.md takes from the view around it.
VIEW_AROUND = """
from types import SimpleNamespace
from django.contrib.auth.models import User
from myapp.jobs import deploy_site
release = "v42"
request = SimpleNamespace(user=User.objects.create_user("ada"))
"""


def fail(message: str) -> None:
    sys.exit(f"check-quickstart: {message}")


def blocks(text: str, language: str, section: str) -> list[str]:
    """The ``language`` code blocks of the markdown section that starts with heading ``section``."""
    start = text.index(section)
    end = text.find("\n## ", start + len(section))
    return re.findall(rf"```{language}\n(.*?)```", text[start : end if end > 0 else None], flags=re.DOTALL)


def block(text: str, language: str, section: str, first_line: str) -> str:
    for code in blocks(text, language, section):
        if code.startswith(first_line):
            return code
    fail(f"{section!r} has no {language} block starting {first_line!r}")
    raise AssertionError  # unreachable: fail() exits


def run(*command: str, code: str = "", what: str = "") -> str:
    """Run ``command`` (with ``-c code``, shown as ``what``) in the project, ``python`` being this
    virtualenv's, and print how long it took."""
    shown = shlex.join(command) + (f" -c <{what}>" if code else "")
    if command[0] == "python":
        command = (sys.executable, *command[1:])
    started = time.monotonic()
    done = subprocess.run(
        [*command, *(["-c", code] if code else [])], cwd=HERE, capture_output=True, text=True, timeout=300
    )
    print(f"  {time.monotonic() - started:5.1f} s  {shown}")
    if done.returncode:
        fail(f"{shown} failed ({done.returncode}):\n{done.stdout}{done.stderr}")
    return done.stdout


def readme_shell_commands(section: str) -> list[list[str]]:
    """The README's shell commands of ``section``, comments dropped, ``pip install`` left out
    (the wheel is installed already: SQLite needs no extra)."""
    commands = []
    for code in blocks(README, "sh", section):
        for line in code.splitlines():
            words = shlex.split(line, comments=True)
            if words and words[:2] != ["pip", "install"]:
                commands.append(words)
    return commands


def add_installed_apps() -> None:
    """The apps of the README's INSTALLED_APPS block (and ``myapp``) added to the new settings."""
    code = block(README, "python", "## Installation", "INSTALLED_APPS = [")
    wanted = [app for app in ast.literal_eval(code.split("=", 1)[1].strip()) if app is not Ellipsis]
    settings = HERE / "mysite" / "settings.py"
    added = f"""
# The README's Installation section; startproject lists the admin already.
INSTALLED_APPS = list(dict.fromkeys([*INSTALLED_APPS, *{wanted!r}, "myapp"]))
"""
    settings.write_text(settings.read_text() + added)


def write_jobs() -> None:
    """myapp/jobs.py: the README's first job and the deploy kind of docs/writing-jobs.md."""
    app = HERE / "myapp"
    (app / "hosting.py").write_text(block(README, "python", "## Writing a job", "# myapp/hosting.py"))
    deploy = block(WRITING_JOBS, "python", "# Writing jobs", "# shop/jobs.py")
    installation = block(README, "python", "## Installation", "# myapp/jobs.py")
    (app / "jobs.py").write_text(installation + "\n\n" + deploy)


def main() -> None:
    run("django-admin", "startproject", "mysite", ".")
    run("python", "manage.py", "startapp", "myapp")
    add_installed_apps()
    write_jobs()
    commands = readme_shell_commands("## Installation")
    migrate = [words for words in commands if words[2:3] == ["migrate"]]
    if not migrate:
        fail("the README's Installation section runs no migrate")
    run(*migrate[0])
    enqueue = block(README, "python", "## Installation", "from myapp.jobs import")
    run("python", "manage.py", "shell", code=enqueue, what="README.md: from myapp.jobs import say_hello …")
    start_one = next(code for code in blocks(WRITING_JOBS, "python", "# Writing jobs") if ".enqueue(" in code)
    run("python", "manage.py", "shell", code=VIEW_AROUND + start_one, what="writing-jobs.md: Start one")
    worker = [words for words in commands if words[2:3] == ["runjobs"]]
    if not worker:
        fail("the README's Installation section starts no worker")
    run(*worker[0], "--burst")
    report = run("python", "manage.py", "shell", code=REPORT, what="the jobs' states")
    jobs = [line for line in report.splitlines() if line.startswith("job: ")]
    print("  " + "\n  ".join(jobs))
    expected = [
        "job: say_hello done {'greeting': 'Hello, Ada!'}",
        "job: deploy_site done {'url': 'https://site-7.example.com/'}",
    ]
    if jobs != expected:
        fail(f"the jobs are not done as the docs say: {jobs} (expected {expected})")


if __name__ == "__main__":
    main()
