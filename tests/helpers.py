"""Helpers for the test suite. Tests synchronise by polling a condition, never by bare sleeps."""

from __future__ import annotations

import signal
import subprocess
import time
from collections.abc import Callable
from pathlib import Path
from typing import TypeVar

T = TypeVar("T")

REPO_ROOT = Path(__file__).resolve().parent.parent


def wait_for(
    predicate: Callable[[], T],
    timeout: float = 30,
    interval: float = 0.05,
    message: str | None = None,
) -> T:
    """Call ``predicate`` until it returns something truthy, and return that value.

    Raises ``AssertionError`` when ``timeout`` seconds pass first; the message names the
    predicate (or says ``message``) and its last return value.
    """
    deadline = time.monotonic() + timeout
    while True:
        value = predicate()
        if value:
            return value
        if time.monotonic() >= deadline:
            what = message or getattr(predicate, "__name__", repr(predicate))
            raise AssertionError(f"timed out after {timeout}s waiting for {what} (last value: {value!r})")
        time.sleep(interval)


def log_of(proc) -> str:
    """What a child started by the ``spawn`` or ``runjobs`` fixture wrote so far (stdout and stderr)."""
    return proc.log_path.read_text()


def fail_if_exited(procs) -> None:
    """Stop a wait early, with its output, when a child that should still run has exited."""
    for proc in procs:
        if proc.poll() is not None:
            raise AssertionError(f"process {proc.pid} exited with {proc.returncode}:\n{log_of(proc)}")


def sigkill(proc) -> None:
    """Kill a child the way a lost machine ends it: no signal handler, no cleanup."""
    proc.send_signal(signal.SIGKILL)
    assert proc.wait(timeout=10) == -signal.SIGKILL


def sigterm(proc) -> None:
    """Ask a ``runjobs`` worker to stop, once it has said it is starting: before that its SIGTERM
    handler may not be in place yet, and the signal would kill it instead of stopping it."""
    wait_for(
        lambda: "starting" in log_of(proc) or proc.poll() is not None, message=f"worker {proc.pid} to start"
    )
    proc.send_signal(signal.SIGTERM)


def stop_cleanly(procs) -> None:
    """SIGTERM the workers; each stops cleanly, with no traceback in its output."""
    for proc in procs:
        sigterm(proc)
    for proc in procs:
        assert exit_code(proc, timeout=60) == 0, log_of(proc)
        assert "Traceback" not in log_of(proc), log_of(proc)


def exit_code(proc, timeout: float) -> int:
    """How the child exited; one still running after ``timeout`` is aborted, and the assertion shows
    what each of its threads was doing (``PYTHONFAULTHANDLER`` prints their stacks on SIGABRT)."""
    try:
        return proc.wait(timeout=timeout)
    except subprocess.TimeoutExpired:
        proc.send_signal(signal.SIGABRT)
        proc.wait(timeout=10)
        raise AssertionError(
            f"process {proc.pid} still ran {timeout}s after SIGTERM:\n{log_of(proc)}"
        ) from None
