"""A megabyte exception beside a healthy job, in a real ``runjobs`` process: describing and
redacting it never costs the healthy job its lease. The costs themselves are bounded in
``tests/engine/test_redaction_limits.py``.
"""

from __future__ import annotations

import signal

import pytest

from django_durajobs import Job, JobLog, Status, enqueue
from tests.helpers import wait_for
from tests.testapp.kinds_secrets import HEALTHY_STEPS, HUGE_SECRET, healthy_effect
from tests.testapp.models import SideEffect

SHORT_LEASES = {
    "DURAJOBS_LEASE_SECONDS": "2",
    "DURAJOBS_HEARTBEAT_SECONDS": "0.5",
    "DURAJOBS_BACKOFF_BASE_SECONDS": "0.1",
}


@pytest.mark.slow
def test_a_megabyte_exception_beside_a_healthy_job_never_costs_the_healthy_job_its_lease(child_env, runjobs):
    """The failing job raises three times while the healthy one runs steps for longer than its
    lease: the healthy job is never recovered and none of its finished steps runs again."""
    healthy, _ = enqueue("secrets_healthy")
    failing, _ = enqueue("secrets_huge_failure")

    worker = runjobs("--concurrency", "2", "-v", "2", env=child_env, extra_env=SHORT_LEASES)
    ended = Job.objects.filter(pk__in=[healthy.pk, failing.pk], status__in=[Status.DONE, Status.FAILED])
    wait_for(lambda: worker.poll() is not None or ended.count() == 2, timeout=120, message="both jobs to end")
    worker.send_signal(signal.SIGTERM)
    assert worker.wait(timeout=60) == 0, worker.log_path.read_text()[-3000:]

    healthy.refresh_from_db()
    failing.refresh_from_db()
    assert (healthy.status, healthy.attempt, healthy.worker_losses) == (Status.DONE, 1, 0)
    assert (failing.status, failing.attempt) == (Status.FAILED, 3)
    assert len(failing.error) <= 4000
    effects = [healthy_effect(healthy.pk, step) for step in HEALTHY_STEPS]
    assert sorted(SideEffect.objects.filter(name__in=effects).values_list("name", flat=True)) == effects
    assert not JobLog.objects.filter(job=healthy, line__contains="lost").exists()
    log = worker.log_path.read_text()
    assert "lost" not in log
    assert log.count("raised in try") == 3
    assert HUGE_SECRET not in log
    assert not JobLog.objects.filter(job=failing, line__contains=HUGE_SECRET).exists()
