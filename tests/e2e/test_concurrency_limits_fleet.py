"""Limits across real ``runjobs`` processes: 20 jobs sharing a key with limit 1 on 4 workers never
run two at a time (sampled from the database throughout), a queue limit of 5 is never exceeded, and
a rate of 10/s holds over 5 s.

Kinds: ``tests/testapp/kinds_concurrency.py``.
"""

from __future__ import annotations

import time

import pytest

from django_durajobs import Job, Status, enqueue, enqueue_many
from tests.helpers import wait_for

pytestmark = pytest.mark.django_db(transaction=True)

LIMITED_QUEUE = "limits-five"


def sample_while(condition, sample, timeout):
    """Call ``sample()`` until ``condition()`` holds; the largest sample seen."""
    seen = [0]

    def sampled():
        seen.append(sample())
        return condition()

    wait_for(sampled, timeout=timeout, interval=0.02)
    return max(seen)


def held_with_key(key):
    return Job.objects.held().filter(concurrency_key=key).exclude(locked_by="").count()


def all_done(ids):
    return lambda: Job.objects.filter(pk__in=ids, status=Status.DONE).count() == len(ids)


def test_twenty_jobs_sharing_a_key_on_four_workers_never_run_two_at_once(child_env, runjobs):
    ids = [
        enqueue(kind, subject={"server": 9, "seconds": 0.05})[0].pk
        for kind in ("limits_backup", "limits_restore") * 10
    ]
    workers = [runjobs("--concurrency", "2", "--poll-interval", "0.2", env=child_env) for _ in range(4)]
    most = sample_while(all_done(ids), lambda: held_with_key("server-9"), timeout=180)
    assert most == 1
    intervals = sorted((job.result["began"], job.result["ended"]) for job in Job.objects.filter(pk__in=ids))
    for (_, ended), (began, _) in zip(intervals, intervals[1:], strict=False):
        assert began >= ended, intervals
    assert all(proc.poll() is None for proc in workers)


def test_a_queue_limit_of_five_is_never_exceeded(child_env, runjobs):
    ids = [enqueue("limits_plain", subject={"seconds": 0.2}, queue=LIMITED_QUEUE)[0].pk for _ in range(30)]
    env = {"DURAJOBS_QUEUE_LIMITS": f'{{"{LIMITED_QUEUE}": 5}}'}
    for _ in range(3):
        runjobs("--concurrency", "4", "--poll-interval", "0.2", env=child_env, extra_env=env)

    def running_in_queue():
        return Job.objects.held().filter(queue=LIMITED_QUEUE).exclude(locked_by="").count()

    most = sample_while(all_done(ids), running_in_queue, timeout=180)
    assert 2 <= most <= 5, most


def test_a_rate_of_ten_a_second_holds_over_five_seconds(child_env, runjobs):
    ids = [job.pk for job, _ in enqueue_many("limits_rated", [{}] * 80)]
    for _ in range(2):
        runjobs("--concurrency", "4", "--poll-interval", "0.1", env=child_env)

    def started():
        return Job.objects.filter(pk__in=ids).exclude(started_at=None).count()

    wait_for(lambda: started() >= 1, timeout=60)
    first = time.monotonic()
    wait_for(lambda: time.monotonic() - first >= 6 or started() == len(ids), timeout=60)
    moments = sorted(
        moment.timestamp()
        for moment in Job.objects.filter(pk__in=ids)
        .exclude(started_at=None)
        .values_list("started_at", flat=True)
    )
    assert len(moments) >= 20, len(moments)  # it did run, at about the rate
    # A rate-limited job is claimed at the moment the database's clock allowed it: of any eleven
    # starts, the last is a second or more after the first.
    for earlier, later in zip(moments, moments[10:], strict=False):
        assert later - earlier >= 0.999, (earlier, later)
    in_five_seconds = [moment for moment in moments if moment < moments[0] + 5]
    assert len(in_five_seconds) <= 50, len(in_five_seconds)
