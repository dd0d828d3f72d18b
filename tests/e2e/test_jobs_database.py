"""The jobs in a database of their own (``DURAJOBS["DATABASE"]``), with a real worker.

Run with the jobs database set up (skipped otherwise)::

    DURAJOBS_TEST_JOBS_DATABASE=1 scripts/test tests/e2e/test_jobs_database.py
    DURAJOBS_TEST_JOBS_DATABASE=postgres://postgres@127.0.0.1:5432/hjobs33 \\
        DATABASE_URL=postgres://postgres@127.0.0.1:5432/h33 scripts/test tests/e2e/test_jobs_database.py
"""

from __future__ import annotations

import logging

import pytest
from django.apps import apps
from django.conf import settings
from django.db import DEFAULT_DB_ALIAS, connections, transaction
from django.urls import reverse

from django_durajobs import Job, Status, enqueue, pause
from django_durajobs.testing import run_job
from tests.helpers import stop_cleanly, wait_for
from tests.testapp.kinds_durability import ATOMIC_STEPS, FIVE_STEPS, STEP_HOOKS, effect_counts
from tests.testapp.models import SideEffect

pytestmark = [
    pytest.mark.skipif("jobs" not in settings.DATABASES, reason="needs DURAJOBS_TEST_JOBS_DATABASE"),
    pytest.mark.django_db(transaction=True, databases="__all__"),
]

FAST = ("--poll-interval", "0.1")


def app_rows_in(alias: str) -> dict[str, int]:
    """How many rows each of the app's tables holds in ``alias`` (tables it lacks left out)."""
    db = connections[alias]
    tables = set(db.introspection.table_names())
    rows = {}
    for model in apps.get_app_config("django_durajobs").get_models():
        if model._meta.db_table in tables:
            rows[model._meta.db_table] = model._base_manager.using(alias).count()
    return rows


def status_of(job) -> str:
    return Job.objects.get(pk=job.pk).status


def test_jobs_run_retry_wait_and_resume_from_the_admin_without_a_row_in_default(
    child_env, runjobs, admin_client, admin_user, tmp_path
):
    """A worker runs, retries and resumes jobs held in the jobs database; the admin lists them
    with their creator (a user of ``default``) and resumes one; ``default`` gets no row of the app."""
    steps, _ = enqueue("durability_five_steps", created_by=admin_user)
    retried, _ = enqueue("resume_later_once", label="retried")
    atomic, _ = enqueue("durability_atomic_step")
    held, _ = enqueue("durability_three_steps")
    pause(held)
    worker = runjobs("--concurrency", "2", *FAST, env=child_env)

    for job in (steps, retried, atomic):
        wait_for(lambda job=job: status_of(job) == Status.DONE, timeout=60, message=f"job {job.pk} done")
    assert effect_counts(steps.pk, FIVE_STEPS) == dict.fromkeys(FIVE_STEPS, 1)
    assert effect_counts(atomic.pk, ATOMIC_STEPS) == dict.fromkeys(ATOMIC_STEPS, 1)
    assert SideEffect.objects.filter(name__startswith="later:").count() == 1  # it asked once
    assert SideEffect.objects.filter(name="ran:retried").count() == 1  # and ran to its end once
    assert status_of(held) == Status.PAUSED

    listing = admin_client.get(reverse("admin:django_durajobs_job_changelist"))
    assert listing.status_code == 200
    assert admin_user.username in listing.content.decode()  # the creator, read from default
    resumed = admin_client.post(
        reverse("admin:django_durajobs_job_changelist"),
        {"action": "resume_jobs", "_selected_action": [held.pk]},
    )
    assert resumed.status_code == 302
    wait_for(lambda: status_of(held) == Status.DONE, timeout=60, message="the resumed job done")
    stop_cleanly([worker])

    admin_user.delete()  # its jobs stay, created by nobody
    assert Job.objects.get(pk=steps.pk).created_by_id is None
    assert app_rows_in(DEFAULT_DB_ALIAS) == {}
    jobs_rows = app_rows_in("jobs")
    assert jobs_rows["django_durajobs_job"] == 4
    assert jobs_rows["django_durajobs_jobstep"] > 0


def test_an_atomic_step_that_fails_leaves_neither_its_rows_nor_its_checkpoint():
    """The step's own rows (on ``default``) and its checkpoint (on the jobs database) roll back
    together when the step raises."""
    job, _ = enqueue("durability_atomic_step", max_attempts=1)

    def refuse() -> None:
        raise RuntimeError("the write went wrong")

    STEP_HOOKS[(job.pk, "write")] = refuse
    try:
        job = run_job(job)
    finally:
        del STEP_HOOKS[(job.pk, "write")]
    assert job.status == Status.FAILED
    assert effect_counts(job.pk, ATOMIC_STEPS) == {"prepare": 1, "write": 0, "publish": 0}
    assert job.steps.get(step_id="write").state != "done"


def test_a_job_enqueued_in_a_transaction_of_default_stays_when_it_rolls_back(caplog, monkeypatch):
    """Documented: the jobs database is not part of a ``default`` transaction. The job is kept,
    and the log says so once per process, with the fix."""
    monkeypatch.setattr("django_durajobs.store.database._warned_outside", False)
    with caplog.at_level(logging.WARNING, logger="django_durajobs"):
        with pytest.raises(RuntimeError), transaction.atomic(using=DEFAULT_DB_ALIAS):
            first, _ = enqueue("resume_backlog")
            second, _ = enqueue("resume_backlog")
            raise RuntimeError("the caller's transaction rolls back")
    assert set(Job.objects.values_list("pk", flat=True)) == {first.pk, second.pk}
    warnings = [
        record.getMessage() for record in caplog.records if "transaction.on_commit" in record.getMessage()
    ]
    assert len(warnings) == 1
    assert "DURAJOBS['DATABASE']" in warnings[0]


def test_a_job_enqueued_in_transaction_on_commit_waits_for_default():
    """The documented fix: enqueued on commit, a job of a rolled-back transaction never exists."""
    with pytest.raises(RuntimeError), transaction.atomic(using=DEFAULT_DB_ALIAS):
        transaction.on_commit(lambda: enqueue("resume_backlog"), using=DEFAULT_DB_ALIAS)
        raise RuntimeError("the caller's transaction rolls back")
    assert not Job.objects.exists()
    with transaction.atomic(using=DEFAULT_DB_ALIAS):
        transaction.on_commit(lambda: enqueue("resume_backlog"), using=DEFAULT_DB_ALIAS)
    assert Job.objects.count() == 1
