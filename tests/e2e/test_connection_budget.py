"""How many database connections a worker holds: a known number for its ``--concurrency``, that
does not grow with the number of jobs it runs (docs/databases.md has the budget)."""

from __future__ import annotations

import threading

import pytest
from django.conf import settings
from django.db import connections

from django_durajobs import Job, Status, enqueue
from django_durajobs.conf import get_setting
from tests.helpers import stop_cleanly, wait_for

pytestmark = pytest.mark.django_db(transaction=True)

CONCURRENCY = 4


def other_connections() -> int:
    """Connections to the test databases, but the test's own (PostgreSQL counts them for us)."""
    names = [connections[alias].settings_dict["NAME"] for alias in settings.DATABASES]
    with connections["default"].cursor() as cursor:
        cursor.execute(
            "SELECT count(*) FROM pg_stat_activity WHERE datname = ANY(%s) AND pid <> pg_backend_pid()",
            [names],
        )
        return cursor.fetchone()[0]


class Peak:
    """The most connections seen, sampled every 20 ms in a thread of the test."""

    def __init__(self) -> None:
        self.most = 0
        self._done = threading.Event()
        self._thread = threading.Thread(target=self._sample, daemon=True)

    def __enter__(self) -> Peak:
        self._thread.start()
        return self

    def __exit__(self, *exc_info: object) -> None:
        self._done.set()
        self._thread.join()

    def _sample(self) -> None:
        try:
            while not self._done.wait(0.02):
                self.most = max(self.most, other_connections())
        finally:
            connections.close_all()


def run(kind: str, count: int) -> None:
    jobs = [enqueue(kind)[0] for _ in range(count)]
    for job in jobs:
        wait_for(lambda job=job: Job.objects.get(pk=job.pk).status == Status.DONE, timeout=120)


def test_a_worker_holds_a_known_number_of_connections_whatever_it_runs(child_env, runjobs, db_vendor):
    """Concurrency N (4), sync jobs: N job threads, the housekeeping thread, the listener, the
    event loop's thread (the test app has async kinds) and, for a moment at the start, the
    listener's self-check. Async jobs add ``ASYNC_DATABASE_THREADS`` and up to N threads of
    sync step functions. The same after 240 jobs as after 40."""
    if db_vendor != "postgresql":
        pytest.skip("counted in pg_stat_activity")
    worker = runjobs("--concurrency", str(CONCURRENCY), "--poll-interval", "0.2", env=child_env)
    with Peak() as sync_jobs:
        run("lifecycle_quick", 20)
    with Peak() as both:
        run("async_three_steps", 20)
    with Peak() as later:
        run("lifecycle_quick", 100)
        run("async_three_steps", 100)
    stop_cleanly([worker])
    print(f"connections: {sync_jobs.most} (sync jobs), {both.most} (and async ones), {later.most} (200 more)")
    budget = 2 * CONCURRENCY + get_setting("ASYNC_DATABASE_THREADS") + 4
    assert sync_jobs.most <= CONCURRENCY + 4
    assert both.most <= budget
    # 200 jobs more stay within the same budget: no connection is kept per job. (Not the peak the
    # first 40 happened to reach: the threads of async jobs' sync steps come as the jobs overlap.)
    assert later.most <= budget
