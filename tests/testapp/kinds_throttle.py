"""Job kinds for the throttle tests (tests/integration/test_throttle.py, tests/e2e/test_throttle_fleet.py).

- ``throttled_sync``: at most 2 starts per second for each customer (``subject["customer"]``).
- ``throttled_hourly``: at most 2 starts per hour for each customer: in one test, the third waits.
"""

from __future__ import annotations

from django_durajobs import job


def customer(subject):
    return subject["customer"]


@job("throttled_sync", throttle="2/s", throttle_key=customer)
def throttled_sync(job, ctx):
    return ctx.step("sync", lambda: job.subject["customer"])


@job("throttled_hourly", throttle="2/h", throttle_key=customer)
def throttled_hourly(job, ctx):
    return ctx.step("sync", lambda: job.subject["customer"])
