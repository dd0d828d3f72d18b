"""The runner's scenarios (tests/runner_scenarios.py) on the database store: the same test code
as on the store in memory (tests/engine/test_runner_in_memory.py)."""

from __future__ import annotations

import pytest

from django_durajobs import ops, store
from django_durajobs.engine.runner import Ran, execute
from django_durajobs.models import Job, JobLog, JobStep
from django_durajobs.status import Phase
from tests.runner_scenarios import RunnerScenarios


class DatabaseStore:
    """``MemoryStore``'s calls, made through the store and the operations on the database."""

    def __init__(self, capture_on_commit_callbacks) -> None:
        self._on_commit = capture_on_commit_callbacks

    def enqueue(self, kind: str, subject=None, **options) -> Job:
        return store.enqueue(kind, subject=subject, **options)[0]

    def operate(self, job_id: int, operation: str, **arguments) -> None:
        getattr(ops, operation)(job_id, **arguments)

    def send_event(self, name: str, payload=None) -> bool:
        with self._on_commit(execute=True):  # its wake-ups are made once it committed
            return ops.send_event(name, payload)

    def take_over(self, job_id: int) -> None:
        Job.objects.filter(pk=job_id).update(lease_token=store.new_token(), locked_by="another worker")

    def run_next(self) -> Ran | None:
        store.wake_due_waits()
        lease = store.claim("scenarios")
        return None if lease is None else execute(lease)

    def job(self, job_id: int) -> Job:
        return Job.objects.get(pk=job_id)

    def steps(self, job_id: int, phase: str = Phase.RUN) -> list[JobStep]:
        return list(JobStep.objects.filter(job_id=job_id, phase=phase).order_by("position"))

    def log(self, job_id: int) -> list[str]:
        return list(JobLog.objects.filter(job_id=job_id).order_by("id").values_list("line", flat=True))

    def children(self, parent_id: int) -> list[Job]:
        return list(store.children_of(parent_id))


@pytest.mark.django_db
class TestRunnerOnDatabase(RunnerScenarios):
    @pytest.fixture
    def store(self, django_capture_on_commit_callbacks) -> DatabaseStore:
        return DatabaseStore(django_capture_on_commit_callbacks)
