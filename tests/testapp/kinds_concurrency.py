"""Kinds under limits, for the tests of tests/integration and tests/e2e named test_concurrency_limits*.

- ``limits_backup`` and ``limits_restore`` share one key space (``server-<n>``, limit 1): a
  backup and a restore of one server never run at once. Each sleeps ``subject["seconds"]`` in a
  step and returns when it ran (``time.time()`` before and after).
- ``limits_pair``: keys given per enqueue, two may run at once with one key.
- ``limits_two_at_a_time``: ``max_running=2``.
- ``limits_rated`` (10 starts a second) and ``limits_rated_hourly`` (3 an hour).
- ``limits_plain``: no limit of its own (a queue's limit may still apply).
"""

from __future__ import annotations

import time

from django_durajobs import job

KEY_KINDS = ("limits_backup", "limits_restore")


def server_key(subject):
    return f"server-{subject['server']}"


def _work(seconds: float) -> dict:
    began = time.time()
    time.sleep(seconds)
    return {"began": began, "ended": time.time()}


@job("limits_backup", title="Limits: back up a server", concurrency_key=server_key)
def limits_backup(job, ctx):
    return ctx.step("work", lambda: _work(job.subject.get("seconds", 0)))


@job("limits_restore", title="Limits: restore a server", concurrency_key=server_key, concurrency_limit=1)
def limits_restore(job, ctx):
    return ctx.step("work", lambda: _work(job.subject.get("seconds", 0)))


@job("limits_pair", title="Limits: two at a time per key", concurrency_limit=2)
def limits_pair(job, ctx):
    return ctx.step("work", lambda: _work(job.subject.get("seconds", 0)))


@job("limits_two_at_a_time", title="Limits: two of the kind at a time", max_running=2)
def limits_two_at_a_time(job, ctx):
    return ctx.step("work", lambda: _work(job.subject.get("seconds", 0)))


@job("limits_rated", title="Limits: ten starts a second", rate_limit="10/s")
def limits_rated(job, ctx):
    return {"began": time.time()}


@job("limits_rated_hourly", title="Limits: three starts an hour", rate_limit="3/h")
def limits_rated_hourly(job, ctx):
    return {"began": time.time()}


@job("limits_plain", title="Limits: none of its own")
def limits_plain(job, ctx):
    return ctx.step("work", lambda: _work(job.subject.get("seconds", 0)))
