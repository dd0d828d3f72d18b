"""A family at scale: one child's settle costs the same among 3 siblings as among 300, and what a
waiting parent shows stays current though its children's settles leave its row alone.

A settle asks only whether an open sibling is left (one indexed lookup); the last one counts
the family once, for the parent's log line. The parent's "Waiting for X of Y child jobs" is
counted as a screen reads the parent: ``describe()``, ``row_summaries()``, the admin's list,
job page and live summary, the streams' versions.
"""

from __future__ import annotations

import re

import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext

from django_durajobs import Job, Status, describe, drain, store
from django_durajobs.engine.describe import row_summaries
from django_durajobs.engine.runner import execute
from django_durajobs.views.watching import job_versions
from tests.admin_pages import between, change_url, list_url, logged_in, staff_user, summary_part, summary_url
from tests.job_rows import children_of, fresh
from tests.testapp.kinds_family import fan_out, settled_lines

pytestmark = pytest.mark.django_db


def parked_parent(children: int):
    """A parent that created ``children`` quick children and waits for them."""
    parent = fan_out([{}] * children, child_kind="family_quick", priority=10)  # before its children
    assert drain(max_jobs=1) == 1
    parent = fresh(parent)
    assert (parent.status, parent.waits_for_children) == (Status.AWAITING_EXTERNAL, True)
    return parent


def settle_one() -> list[str]:
    """Claim the next child and run it to its end as a worker does; the statements of its run and
    settle, numbers and quoted values blanked out."""
    worker_id = store.new_worker_id("test")
    lease = store.claim(worker_id)
    assert lease is not None and lease.job.parent_id is not None
    with CaptureQueriesContext(connection) as queries:
        execute(lease)
    assert fresh(lease.job).status == Status.DONE
    return [re.sub(r"'[^']*'|\d+", "?", query["sql"]) for query in queries.captured_queries]


def counts_siblings(sql: str) -> bool:
    """A statement that counts a parent's children."""
    return "COUNT(" in sql.upper() and "PARENT_ID" in sql.upper()


def left_alone(parent, children: int) -> None:
    """The parent's row as it parked: nothing written to it by a child's settle; the screens count."""
    row = fresh(parent)
    assert (row.status, row.updated_at) == (Status.AWAITING_EXTERNAL, parent.updated_at)
    assert row.wait_reason == f"Waiting for {children} of {children} child jobs"
    assert describe(parent)["wait_reason"] == f"Waiting for {children - 1} of {children} child jobs"


def test_a_childs_settle_makes_the_same_statements_among_3_siblings_as_among_300():
    small = parked_parent(3)
    among_3 = settle_one()
    left_alone(small, 3)
    Job.objects.all().delete()
    large = parked_parent(300)
    among_300 = settle_one()
    left_alone(large, 300)

    assert among_300 == among_3
    assert not [sql for sql in among_300 if counts_siblings(sql)]


def test_the_last_child_wakes_its_parent_once_counting_the_family_once():
    parent = parked_parent(3)
    settle_one()
    settle_one()
    last = settle_one()

    assert len([sql for sql in last if counts_siblings(sql)]) == 1  # for the log line
    assert fresh(parent).status == Status.QUEUED
    assert settled_lines(parent) == ["All 3 child jobs have settled; queued again."]
    assert store.wake_forgotten_parents() == 0  # woken already: nothing left to wake


def test_a_waiting_parent_shows_how_many_children_are_open_now(django_user_model):
    parent = parked_parent(4)
    before = job_versions([parent.pk])[parent.pk]
    settle_one()
    settle_one()
    settle_one()

    shown = "Waiting for 1 of 4 child jobs"
    summary = describe(parent)
    assert summary["wait_reason"] == shown
    assert summary["eta_unknown_reason"] == f"Depends on an outside event: {shown}"
    assert row_summaries([fresh(parent)])[0]["wait_reason"] == shown
    assert job_versions([parent.pk])[parent.pk] != before  # an open stream shows it
    client = logged_in(staff_user(django_user_model, "olga", "view_job"))
    page = client.get(change_url(parent)).content.decode()
    assert shown in between(page, "field-shown_wait_reason", "</div>")
    assert shown in summary_part(page)
    # Only its log still says what it said as it parked.
    assert page.count("Waiting for 4 of 4") == page.count("Waiting: Waiting for 4 of 4 child jobs") == 1
    live = client.get(summary_url(parent)).json()
    assert live["fields"]["shown_wait_reason"] == shown
    assert shown in live["fragments"]["durajobs-summary"]
    listed = client.get(list_url()).content.decode()
    assert shown in listed and "Waiting for 4 of 4" not in listed

    settle_one()
    assert describe(parent)["wait_reason"] is None  # woken: queued, waiting for nothing
    assert [child.status for child in children_of(parent)] == [Status.DONE] * 4
