"""The job list reads no more than its page, however many jobs there are (issue 27).

A render of the list makes a pinned number of queries; none of them counts every job or reads
the distinct values of a column over the job table (the filters' choices come from the code, the
settings and the latest jobs); the count stops at a cap and the list then says "More than …".
"""

from __future__ import annotations

import re

import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext, override_settings

from django_durajobs import Job, store
from django_durajobs.admin.jobs import creators_beside_jobs
from django_durajobs.admin.listing import CappedPaginator
from tests.admin_pages import list_url, shown_ids
from tests.factories import JobFactory

pytestmark = pytest.mark.django_db

#: The renders an operator makes most, as the bench measures them (bench/scale_admin.py).
RENDERS = [
    pytest.param({}, id="list"),
    pytest.param({"status__exact": "failed"}, id="failed"),
    pytest.param({"kind": "states_basic"}, id="kind"),
    pytest.param({"queue": "bulk"}, id="queue"),
    pytest.param({"q": "Job 1"}, id="search"),
    pytest.param({"p": "2"}, id="page_2"),
]
#: The session, the user, the filters' latest values, the capped count, the page, its steps and
#: its families' counts.
QUERIES = 7


@pytest.fixture
def many_jobs():
    """120 top-level jobs, failed and done, in two queues, and 30 child jobs."""
    parents = Job.objects.bulk_create(
        Job(
            kind="states_basic",
            label=f"Job {n}",
            status="failed" if n % 3 == 0 else "done",
            queue="bulk" if n % 2 else "default",
        )
        for n in range(120)
    )
    Job.objects.bulk_create(
        Job(kind="states_basic", label=f"Child {n}", status="done", parent=parents[n]) for n in range(30)
    )
    return parents


def job_table_queries(queries) -> list[str]:
    table = connection.ops.quote_name(Job._meta.db_table)
    return [query["sql"] for query in queries if table in query["sql"]]


@pytest.mark.parametrize("query", RENDERS)
def test_a_render_makes_a_pinned_number_of_queries_none_over_all_jobs(admin_client, many_jobs, query):
    admin_client.get(list_url(), query)  # caches warm, as on a live server

    jobs_connection = store.jobs_connection()
    with CaptureQueriesContext(connection) as default, CaptureQueriesContext(jobs_connection) as jobs:
        response = admin_client.get(list_url(), query)
    captured = list(default.captured_queries)
    if jobs_connection.alias != connection.alias:  # a jobs database of its own
        captured += jobs.captured_queries

    assert response.status_code == 200
    assert shown_ids(response)
    if creators_beside_jobs():
        assert len(captured) == QUERIES, [q["sql"][:120] for q in captured]
    else:  # the creators from their own database: one query more
        assert len(captured) <= QUERIES + 1, [q["sql"][:120] for q in captured]
    for sql in job_table_queries(captured):
        assert "DISTINCT" not in sql.upper(), sql
        if re.search(r"COUNT\(\*\)", sql):  # Django's full count would be COUNT(*) FROM the table
            assert re.search(r"FROM \(SELECT .* LIMIT 10001\)", sql), sql
    # The page counts its jobs' children, by their ids: never the whole table.
    counts = [sql for sql in job_table_queries(captured) if "COUNT(" in sql.upper()]
    assert len(counts) == 2, counts


def test_the_count_stops_at_the_cap_and_the_list_says_more_than(admin_client, many_jobs, monkeypatch):
    monkeypatch.setattr(CappedPaginator, "cap", 100)

    content = admin_client.get(list_url()).content.decode()
    searched = admin_client.get(list_url(), {"q": "job"}).content.decode()
    failed = admin_client.get(list_url(), {"status__exact": "failed"}).content.decode()

    assert "More than 100 jobs" in content
    assert "Select all jobs that match (more than 100)" in content
    assert re.search(r'href="\?p=2"( class="end")?>2</a>', content)  # the pages up to the cap's
    assert "More than 100 results" in searched
    # Below the cap, the number, as Django shows it.
    assert "40 jobs" in failed and "More than" not in failed


def test_the_list_shows_its_pages_and_how_many_jobs(admin_client, many_jobs):
    content = admin_client.get(list_url(), {"p": "3"}).content.decode()

    assert "120 jobs" in content
    assert re.search(r'aria-current="page">3</a>|<span class="this-page">3</span>', content)
    assert len(shown_ids(admin_client.get(list_url(), {"p": "3"}))) == 20


def filter_links(content: str, parameter: str) -> list[str]:
    return re.findall(rf'href="\?{parameter}=([^"&]+)"', content)


@override_settings(DURAJOBS={"QUEUE_LIMITS": {"limited": 2}, "FAIR_QUEUES": ["fair"]})
def test_filters_offer_the_known_and_recent_values_without_reading_the_table(admin_client):
    JobFactory(kind="states_basic", queue="adhoc", actor_type="api")
    JobFactory(kind="old_kind_not_registered", queue="default")

    content = admin_client.get(list_url()).content.decode()

    kinds = filter_links(content, "kind")
    assert "states_ask" in kinds  # registered, no job of it
    assert "old_kind_not_registered" in kinds  # among the latest jobs
    assert kinds == sorted(kinds)
    queues = filter_links(content, "queue")
    assert {"default", "adhoc", "limited", "fair"} <= set(queues)
    assert "special" in queues  # a queue of the Tasks backend (tests/settings.py TASKS)
    assert filter_links(content, "actor_type") == ["api", "system", "user"]
    assert ">API</a>" in content and ">System</a>" in content


def test_a_value_the_address_asks_for_filters_and_is_offered_selected(admin_client):
    hidden = JobFactory(kind="states_basic", queue="rare")
    JobFactory.create_batch(3, kind="states_basic", queue="default")
    from django_durajobs.admin import filters

    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(filters, "RECENT", 1)  # the rare queue is not among the latest jobs
        response = admin_client.get(list_url(), {"queue": "rare"})
        content = response.content.decode()

    assert shown_ids(response) == [hidden.pk]
    assert re.search(r'<li class="selected">\s*<a href="\?queue=rare">rare</a>', content)
