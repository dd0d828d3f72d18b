"""``@job(throttle="N/s|m|h", throttle_key=…)``: at most N starts per period for each key, across the
fleet; a job over it stays queued and says why. Kinds: ``tests/testapp/kinds_throttle.py``; three
worker processes: ``tests/e2e/test_throttle_fleet.py``.
"""

from __future__ import annotations

import pytest

from django_durajobs import Job, describe, drain, enqueue, enqueue_many, job

pytestmark = pytest.mark.django_db


def test_each_key_starts_at_most_its_throttle_per_period_and_the_rest_wait_saying_why():
    jobs = enqueue_many("throttled_hourly", [{"subject": {"customer": c}} for c in "aaaaabbb"])
    assert drain() == 4  # two per customer in this hour

    done = Job.objects.filter(kind="throttled_hourly", status="done")
    assert sorted(done.values_list("concurrency_key", flat=True)) == ["a", "a", "b", "b"]
    waiting = [job for job, _ in jobs if Job.objects.get(pk=job.pk).status == "queued"]
    assert len(waiting) == 4
    assert describe(waiting[0])["wait_reason"] == (
        "Held back: throttled_hourly jobs with key 'a' started at their throttle of 2/h"
    )
    # Another key is not held back by them.
    enqueue("throttled_hourly", subject={"customer": "c"})
    assert drain() == 1


def test_a_throttle_is_checked_when_the_kind_is_declared():
    with pytest.raises(ValueError, match="rate_limit must be"):
        job("bad_throttle", throttle="often")(lambda job, ctx: None)
    with pytest.raises(ValueError, match="throttle_key"):
        job("key_without_throttle", throttle_key=lambda subject: 1)(lambda job, ctx: None)
    with pytest.raises(ValueError, match="concurrency_key"):
        job("two_keys", throttle="1/s", throttle_key=str, concurrency_key=str)(lambda job, ctx: None)
