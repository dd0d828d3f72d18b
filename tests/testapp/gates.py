"""A gate holds a running step still until its test says go, so the test can act while the step is
known to be in flight (kill its worker, drop its session, cancel its job).

A step calls ``hold_until_go(job, where)``: it creates a *started* marker file
``<job id>-<where>.started.<pid>.<random>`` under ``job.subject["dir"]``, then waits for the
job's go file ``<job id>.go`` there. Files, not rows: a row written inside an ``atomic=True`` step
would be rolled back with it, on SQLite it would wait behind the step's own write transaction, and
a test about to drop the worker's connection could not rely on it. Creating a file is one atomic
act, so a worker killed right after it leaves a whole marker; each arrival at the gate leaves one
(also two in one process). The wait is bounded, so a worker nobody releases gives up instead of
hanging.
"""

from __future__ import annotations

import os
import time
import uuid
from pathlib import Path

HOLD_DEADLINE_SECONDS = 30


def go_file(directory: Path | str, job_id: int) -> Path:
    """When it exists, every gate of the job lets its step carry on at once."""
    return Path(directory) / f"{job_id}.go"


def started_markers(directory: Path | str, job_id: int, where: str) -> list[Path]:
    """One file per arrival at the gate ``where`` of the job."""
    return sorted(Path(directory).glob(f"{job_id}-{where}.started.*"))


def marker_pids(directory: Path | str, job_id: int, where: str) -> list[int]:
    """The process id of each arrival at the gate, so a test knows which worker is holding."""
    return [int(path.name.split(".")[2]) for path in started_markers(directory, job_id, where)]


def hold_until_go(job, where: str) -> None:
    """Mark the arrival at the gate ``where``, then wait for the job's go file."""
    directory = Path(job.subject["dir"])
    (directory / f"{job.pk}-{where}.started.{os.getpid()}.{uuid.uuid4().hex}").touch(exist_ok=False)
    go = go_file(directory, job.pk)
    deadline = time.monotonic() + HOLD_DEADLINE_SECONDS
    while not go.exists():
        if time.monotonic() > deadline:
            raise TimeoutError(f"{go} did not appear within {HOLD_DEADLINE_SECONDS} s")
        time.sleep(0.02)


async def ahold_until_go(job, where: str) -> None:
    """``hold_until_go`` for an async step: it waits with ``asyncio.sleep``, so the event loop
    (and the worker's other async jobs) go on meanwhile."""
    import asyncio

    directory = Path(job.subject["dir"])
    (directory / f"{job.pk}-{where}.started.{os.getpid()}.{uuid.uuid4().hex}").touch(exist_ok=False)
    go = go_file(directory, job.pk)
    deadline = time.monotonic() + HOLD_DEADLINE_SECONDS
    while not go.exists():
        if time.monotonic() > deadline:
            raise TimeoutError(f"{go} did not appear within {HOLD_DEADLINE_SECONDS} s")
        await asyncio.sleep(0.02)
