"""``manage.py jobs`` as an operator runs it: real ``manage.py`` processes, with rich and with
rich made unimportable, exit statuses, ``--json`` read back, and ``watch`` following a job that
a real ``runjobs`` worker runs to its end."""

from __future__ import annotations

import json
import os
import pty
import re
import subprocess
import sys
import threading

import pytest

from django_durajobs import Job, Status, enqueue
from tests.factories import JobFactory
from tests.helpers import REPO_ROOT, log_of, sigterm, stop_cleanly, wait_for
from tests.testapp.gates import go_file, started_markers

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.slow]


def manage(*args: str, env: dict[str, str], rich: bool = True) -> subprocess.CompletedProcess:
    """``manage.py ARGS`` run to its end, its output to a pipe (as wide as rich makes a pipe: no
    ``COLUMNS``, which pytest-xdist sets); without rich, where ``import rich`` fails."""
    module = "django" if rich else "tests.child_run_without_rich"
    env = {name: value for name, value in env.items() if name != "COLUMNS"}
    return subprocess.run(
        [sys.executable, "-m", module, *args],
        env=env,
        cwd=REPO_ROOT,
        capture_output=True,
        text=True,
        timeout=120,
    )


def test_list_with_rich_and_without_shows_the_same_jobs(child_env):
    failed = JobFactory(kind="cli_steps", status=Status.FAILED, error="disk [red]full", error_code="failed")
    queued = JobFactory(kind="cli_question", label="Ask [bold]me", status=Status.QUEUED)

    with_rich = manage("jobs", "list", env=child_env)
    plain = manage("jobs", "list", env=child_env, rich=False)

    assert with_rich.returncode == plain.returncode == 0, with_rich.stderr + plain.stderr
    for output in (with_rich.stdout, plain.stdout):
        assert str(failed.pk) in output and str(queued.pk) in output
        assert "disk [red]full" in output and "Ask [bold]me" in output  # shown as stored, never as markup
    assert "──" in with_rich.stdout and "──" not in plain.stdout  # rich's rule under the header
    assert plain.stdout.splitlines()[1].startswith("--")


def test_show_and_stats_json_read_back_without_rich(child_env):
    job, _ = enqueue("cli_steps")

    shown = manage("jobs", "show", str(job.pk), "--json", env=child_env, rich=False)
    stats = manage("jobs", "stats", "--json", env=child_env, rich=False)

    assert json.loads(shown.stdout)["id"] == job.pk
    assert json.loads(stats.stdout)["by_status"] == {"queued": 1}


def test_a_refused_operation_prints_why_and_exits_1(child_env):
    job = JobFactory(kind="cli_steps", status=Status.DONE)

    retried = manage("jobs", "retry", str(job.pk), env=child_env)
    missing = manage("jobs", "cancel", "987654", env=child_env)

    assert retried.returncode == 1 and missing.returncode == 1
    assert f"Job {job.pk} is done; only" in retried.stderr and "(job_not_retryable)" in retried.stderr
    assert "Job 987654 does not exist. (job_not_found)" in missing.stderr
    assert retried.stdout == missing.stdout == ""


def test_an_operation_exits_0_and_json_describes_the_job(child_env):
    job = JobFactory(kind="cli_steps", status=Status.FAILED)

    retried = manage("jobs", "retry", str(job.pk), "--json", env=child_env)

    assert retried.returncode == 0, retried.stderr
    assert json.loads(retried.stdout)["status"] == Status.QUEUED


class Terminal:
    """A child whose output goes to a pseudo-terminal, as when an operator runs it; a thread reads
    what it prints (rich's control sequences removed) into ``text``."""

    def __init__(self, args: list[str], env: dict[str, str]) -> None:
        controller, child = pty.openpty()
        self.proc = subprocess.Popen(
            args, env={**env, "COLUMNS": "120", "TERM": "xterm"}, cwd=REPO_ROOT, stdout=child, stderr=child
        )
        os.close(child)
        self.chunks: list[bytes] = []
        self.reader = threading.Thread(target=self._read, args=(controller,), daemon=True)
        self.reader.start()

    def _read(self, fd: int) -> None:
        while True:
            try:
                chunk = os.read(fd, 65536)
            except OSError:  # the child closed the terminal
                break
            if not chunk:
                break
            self.chunks.append(chunk)
        os.close(fd)

    @property
    def text(self) -> str:
        return re.sub(r"\x1b\[[0-9;?]*[A-Za-z]", "", b"".join(self.chunks).decode(errors="replace"))


def test_watch_on_a_terminal_is_a_live_view_of_a_job_a_worker_runs(child_env, runjobs, tmp_path):
    job, _ = enqueue("cli_steps", subject={"dir": str(tmp_path)})
    worker = runjobs("--poll-interval", "0.1", env=child_env)
    wait_for(lambda: started_markers(tmp_path, job.pk, "middle"), timeout=60)
    watcher = Terminal(
        [sys.executable, "-m", "django", "jobs", "watch", str(job.pk), "--interval", "0.1"], child_env
    )
    try:
        wait_for(lambda: "▶" in watcher.text and "Work on it" in watcher.text, timeout=60)
        assert "33%" in watcher.text and "Fetch the thing" in watcher.text
        go_file(tmp_path, job.pk).touch()
        assert watcher.proc.wait(timeout=60) == 0, watcher.text
    finally:
        watcher.proc.kill()
    watcher.reader.join(timeout=10)
    assert f"#{job.pk} CLI: three steps · done" in watcher.text and "100%" in watcher.text
    assert "Traceback" not in watcher.text
    stop_cleanly([worker])


@pytest.mark.parametrize("rich", [True, False], ids=["rich", "without-rich"])
def test_watch_to_a_pipe_prints_a_line_per_change(child_env, runjobs, spawn, tmp_path, rich):
    job, _ = enqueue("cli_steps", subject={"dir": str(tmp_path)})
    worker = runjobs("--poll-interval", "0.1", env=child_env)
    wait_for(lambda: started_markers(tmp_path, job.pk, "middle"), timeout=60)
    module = "django" if rich else "tests.child_run_without_rich"
    watcher = spawn(module, "jobs", "watch", str(job.pk), "--interval", "0.1", env=child_env)
    wait_for(lambda: "Work on it" in log_of(watcher), timeout=60)
    go_file(tmp_path, job.pk).touch()

    assert watcher.wait(timeout=60) == 0, log_of(watcher)
    lines = log_of(watcher).splitlines()
    assert " running · 33% · 1 step done · Work on it (running)" in lines[0]
    assert lines[-1].endswith(" done · 100% · 3 steps done"), lines
    stop_cleanly([worker])


def test_watch_exits_1_when_the_job_fails_and_2_on_timeout(child_env, runjobs, tmp_path):
    failing, _ = enqueue("cli_steps", subject={"fail": True})
    waiting, _ = enqueue("cli_question")
    worker = runjobs("--poll-interval", "0.1", env=child_env)

    failed = manage("jobs", "watch", str(failing.pk), "--interval", "0.1", "--json", env=child_env)
    wait_for(lambda: Job.objects.get(pk=waiting.pk).status == Status.NEEDS_USER, timeout=60)
    timed_out = manage("jobs", "watch", str(waiting.pk), "--timeout", "1", "--plain", env=child_env)

    assert failed.returncode == 1, failed.stdout + failed.stderr
    frames = [json.loads(line) for line in failed.stdout.splitlines()]
    assert frames[-1]["status"] == Status.FAILED and frames[-1]["error_code"]
    assert "the finish broke" in failed.stderr
    assert timed_out.returncode == 2
    assert "Approve the thing?" in timed_out.stdout and "has not ended yet" in timed_out.stderr
    sigterm(worker)  # its log has the failed job's traceback
    assert worker.wait(timeout=60) == 0
