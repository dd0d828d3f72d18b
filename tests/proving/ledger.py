"""The effects ledger: what the proving jobs did, written by the jobs themselves, outside the database.

Each process appends JSON lines to a file of its own under ``$DURAJOBS_PROVE_LEDGER`` with one
``os.write`` per record (``O_APPEND``), so a record survives a SIGKILL of its writer the moment the
call returned, and no transaction of the engine can roll it back or hide it.
"""

from __future__ import annotations

import json
import os
import time
from dataclasses import dataclass
from pathlib import Path

LEDGER_ENV = "DURAJOBS_PROVE_LEDGER"


@dataclass(frozen=True)
class Entry:
    """One record: ``event`` is ``start``/``end`` (a step) or ``enter``/``leave`` (a run of the job)."""

    event: str
    job: int
    step: str
    attempt: int
    worker: str
    at: float


def record(event: str, job: int, step: str, attempt: int, worker: str) -> None:
    """Append one entry to this process's ledger file; a no-op when no ledger is configured."""
    directory = os.environ.get(LEDGER_ENV)
    if not directory:
        return
    line = json.dumps(
        {"event": event, "job": job, "step": step, "attempt": attempt, "worker": worker, "at": time.time()}
    )
    fd = os.open(Path(directory) / f"{os.getpid()}.jsonl", os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
    try:
        os.write(fd, (line + "\n").encode())
    finally:
        os.close(fd)


def read(directory: Path) -> list[Entry]:
    """Every entry of every process, in time order; a line cut short by a kill is left out."""
    entries = []
    for path in sorted(directory.glob("*.jsonl")):
        for line in path.read_text().splitlines():
            try:
                entries.append(Entry(**json.loads(line)))
            except (ValueError, TypeError):
                continue
    return sorted(entries, key=lambda entry: entry.at)
