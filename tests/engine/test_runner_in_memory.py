"""The runner's scenarios (tests/runner_scenarios.py) on the store in memory: its stages with no
database. The same scenarios run on the database in tests/integration/test_runner_on_database.py."""

from __future__ import annotations

import pytest

from django_durajobs.testing_store import MemoryStore
from tests.runner_scenarios import RunnerScenarios


class TestRunnerInMemory(RunnerScenarios):
    @pytest.fixture
    def store(self) -> MemoryStore:
        return MemoryStore()
