"""Job kinds for the schedule tests (tests/test_schedules*.py).

- ``scheduled_tick``: does nothing; what a test reads is the idempotency keys of the jobs a
  schedule made (``schedule:<name>:<moment>``).

None of them declares ``schedule=``: every worker a test starts would write it into its table.
Tests give schedules as rows or register a scheduled kind for themselves.
"""

from __future__ import annotations

from django_durajobs import job


@job("scheduled_tick", title="Scheduled: tick")
def scheduled_tick(job, ctx):
    return {"moment": job.idempotency_key}
