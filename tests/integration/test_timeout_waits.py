"""A job's ``timeout`` measures one try: the time it spends waiting on purpose (for a person, or
paused) counts for nothing (docs/writing-jobs.md#timeouts, docs/deploying.md)."""

from __future__ import annotations

import math
import re
import time

import pytest

from django_durajobs import drain, enqueue, job, store
from django_durajobs.registry import unregister
from tests.admin_pages import change_url

pytestmark = pytest.mark.django_db

TIMEOUT = 0.3
LONGER = 0.5  # longer than the timeout, spent waiting between two tries


@pytest.fixture
def waiting_kind():
    @job("timeout_waits", steps=["before", "after"], timeout=TIMEOUT)
    def timeout_waits(job, ctx):
        ctx.step("before", lambda: "before")
        if ctx.resume_action != "go" and job.subject["wait"] == "question":
            ctx.needs_user("Go on?", actions=["go"])
        return ctx.step("after", lambda: "after")

    yield timeout_waits
    unregister("timeout_waits")


@pytest.mark.parametrize("wait", ["question", "paused"])
def test_a_wait_longer_than_the_timeout_does_not_time_the_job_out(waiting_kind, wait):
    started, _ = enqueue(
        "timeout_waits", subject={"wait": wait}, initial_status="paused" if wait == "paused" else None
    )
    drain()
    time.sleep(LONGER)  # the job's clock would be past its timeout if it counted this
    started.refresh_from_db()
    if wait == "question":
        started.resume(action="go")
    elif wait == "paused":
        started.resume()
    drain()
    started.refresh_from_db()
    assert (started.status, started.error_code, started.result) == ("done", "", "after")


def test_the_admin_shows_the_time_left_of_a_running_try_and_none_spent_while_waiting(
    waiting_kind, admin_client
):
    waiting, _ = enqueue("timeout_waits", subject={"wait": "question"}, timeout=60)
    drain()
    page = admin_client.get(change_url(waiting)).content.decode()
    assert "60 s for its next try; waiting counts for nothing" in page

    waiting.resume(action="go")
    claimed = time.monotonic()
    lease = store.claim(store.new_worker_id("test"))
    assert lease is not None and lease.job.pk == waiting.pk
    assert lease.job.try_started_at is not None
    page = admin_client.get(change_url(waiting)).content.decode()
    # Whole seconds since the claim, as a loaded machine may take more than one to show the page.
    shown = re.search(r"\b(\d+) s of 60 s\b", page)
    assert shown, page
    assert 60 - math.ceil(time.monotonic() - claimed) - 1 <= int(shown[1]) <= 60
