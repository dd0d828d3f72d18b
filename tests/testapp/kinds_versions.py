"""Job kinds for the rolling-deploy test (tests/e2e/test_versions_workers.py).

- ``rolling_deploy``: its version is ``$DURAJOBS_TEST_KIND_VERSION`` (default "1"), so two worker
  processes run two versions of it; it waits for the job's version when it meets another
  (``on_version_change="wait"``). Step ``first``, then ``ctx.wait_for_event("rolling:<job id>")``,
  then step ``second``; each step returns the version and process that ran it.
"""

from __future__ import annotations

import os

from django_durajobs import job

VERSION = os.environ.get("DURAJOBS_TEST_KIND_VERSION", "1")


def ran_here() -> dict[str, object]:
    return {"version": VERSION, "pid": os.getpid()}


@job(
    "rolling_deploy",
    steps=[("first", "First"), ("second", "Second")],
    version=VERSION,
    on_version_change="wait",
)
def rolling_deploy(job, ctx):
    first = ctx.step("first", ran_here)
    ctx.wait_for_event(f"rolling:{job.pk}")
    second = ctx.step("second", ran_here)
    return {"first": first, "second": second}
