"""Fixtures of the proving ground. Its scenarios run only through ``scripts/prove``, which sets
``$DURAJOBS_PROVE`` (``short`` or ``full``) and collects the figures each scenario reports."""

from __future__ import annotations

import json
import os
import re
from pathlib import Path

import pytest

from tests.proving.ledger import LEDGER_ENV
from tests.proving.ledger import read as read_ledger

MODE_ENV = "DURAJOBS_PROVE"
REPORT_ENV = "DURAJOBS_PROVE_REPORT"


def pytest_collection_modifyitems(config, items):
    if os.environ.get(MODE_ENV):
        return
    skip = pytest.mark.skip(reason="a proving-ground scenario: run it with scripts/prove")
    for item in items:
        if "tests/proving/" in str(item.fspath).replace(os.sep, "/"):
            item.add_marker(skip)


@pytest.fixture
def short() -> bool:
    """True for the short version (CI), False for the full run."""
    return os.environ.get(MODE_ENV) != "full"


@pytest.fixture
def ledger(tmp_path, child_env):
    """The effects ledger's folder, in the workers' environment; ``ledger.entries()`` reads it."""
    directory = tmp_path / "ledger"
    directory.mkdir()
    child_env[LEDGER_ENV] = str(directory)

    class Ledger:
        path = directory

        @staticmethod
        def entries():
            return read_ledger(directory)

        @staticmethod
        def story(violations: list[str]) -> str:
            """The violations, and what the ledger says of the job the first one names."""
            found = re.search(r"job (\d+)", violations[0]) if violations else None
            if found is None:
                return "\n".join(violations[:20])
            job_id = int(found.group(1))
            lines = [
                f"{e.at:.3f} {e.event} {e.step} try {e.attempt} {e.worker}"
                for e in read_ledger(directory)
                if e.job == job_id
            ]
            return "\n".join([*violations[:20], f"ledger of job {job_id}:", *lines])

    return Ledger


@pytest.fixture
def report(request):
    """Record a scenario's figures (a dict with ``jobs``, ``kills``, ``restarts``, ``violations``
    and whatever else it measured), printed at once and summed up by ``scripts/prove``."""

    def write(**figures) -> None:
        figures = {"scenario": request.node.name.removeprefix("test_"), **figures}
        print("figures:", json.dumps(figures))
        path = os.environ.get(REPORT_ENV)
        if path:
            with Path(path).open("a") as out:
                out.write(json.dumps(figures) + "\n")

    return write
