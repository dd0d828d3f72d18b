"""A throttle is never exceeded across worker processes: three ``runjobs`` processes claim 24 jobs
of two customers throttled to 2 starts per second each, and no customer's jobs start more than
twice in any second (judged on the database's clock, as the throttle is). Kind:
``tests/testapp/kinds_throttle.py``; the rules in one process: tests/integration/test_throttle.py.
"""

from __future__ import annotations

from datetime import timedelta

import pytest

from django_durajobs import Job, Status, enqueue_many
from tests.helpers import fail_if_exited, stop_cleanly, wait_for

WORKERS = 3
PER_CUSTOMER = 12


@pytest.mark.slow
def test_three_workers_never_start_a_customer_s_jobs_past_its_throttle(child_env, runjobs):
    specs = [{"subject": {"customer": customer}} for customer in "ab" for _ in range(PER_CUSTOMER)]
    ids = [job.pk for job, _ in enqueue_many("throttled_sync", specs)]
    fleet = [runjobs("--concurrency", "4", "--poll-interval", "0.05", env=child_env) for _ in range(WORKERS)]
    done = Job.objects.filter(pk__in=ids, status=Status.DONE)
    wait_for(lambda: fail_if_exited(fleet) or done.count() == len(ids), timeout=60, message="all done")
    stop_cleanly(fleet)

    for customer in "ab":
        jobs = Job.objects.filter(pk__in=ids, concurrency_key=customer).order_by("started_at")
        starts = [job.started_at for job in jobs]
        for first, third in zip(starts, starts[2:], strict=False):
            assert third - first >= timedelta(seconds=1), (customer, first, third)
        # Throttled, not slowed down further: two starts a second, give or take a poll.
        assert starts[-1] - starts[0] < timedelta(seconds=PER_CUSTOMER / 2 + 3)
