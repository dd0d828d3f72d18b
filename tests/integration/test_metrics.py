"""The Prometheus endpoint (``django_durajobs.metrics``, at /metrics/ in tests/urls.py): parsed by
prometheus-client's own parser, its figures checked against known jobs, counters that pruning
does not lower, who may scrape, and a scrape of a million jobs on PostgreSQL."""

from __future__ import annotations

import statistics
import threading
import time
from datetime import timedelta

import pytest
from django.contrib.auth.models import Permission, User
from django.db import connection, connections
from django.test.utils import CaptureQueriesContext
from prometheus_client.parser import text_string_to_metric_families

from django_durajobs import Job, Status, enqueue, prune
from django_durajobs.models import FinishedTally
from django_durajobs.store import metrics as figures
from django_durajobs.testing import clock, run_job
from tests.factories import JobFactory

pytestmark = pytest.mark.django_db

TOKEN = "scrape-me-4f1c"
URL = "/metrics/"


@pytest.fixture(autouse=True)
def metrics_token(settings):
    settings.DURAJOBS = {"METRICS_TOKEN": TOKEN}


def scrape(client) -> dict[str, dict[tuple, float]]:
    """The scrape's samples: per sample name, its value per sorted label items."""
    response = client.get(URL, HTTP_AUTHORIZATION=f"Bearer {TOKEN}")
    assert response.status_code == 200, response.content
    assert response["Content-Type"].startswith("text/plain; version=")
    samples: dict[str, dict[tuple, float]] = {}
    for family in text_string_to_metric_families(response.content.decode()):
        for sample in family.samples:
            samples.setdefault(sample.name, {})[tuple(sorted(sample.labels.items()))] = sample.value
    return samples


def test_unfinished_jobs_are_counted_by_status_kind_and_queue_with_the_lag_of_each_queue(client):
    with clock() as moment:
        for _ in range(3):
            JobFactory(
                kind="traced_steps", status=Status.QUEUED, next_run_at=moment.now() - timedelta(seconds=40)
            )
        JobFactory(kind="traced_steps", status=Status.QUEUED, next_run_at=moment.now() - timedelta(seconds=5))
        JobFactory(
            kind="traced_steps",
            status=Status.QUEUED,
            queue="later",
            next_run_at=moment.now() + timedelta(hours=1),
        )
        JobFactory(kind="traced_flaky", status=Status.AWAITING_EXTERNAL)
        JobFactory(kind="traced_flaky", status=Status.DONE)  # finished: counted by the counter, not here

        samples = scrape(client)

    assert samples["durajobs_jobs"] == {
        (("kind", "traced_steps"), ("queue", "default"), ("status", "queued")): 4,
        (("kind", "traced_steps"), ("queue", "later"), ("status", "queued")): 1,
        (("kind", "traced_flaky"), ("queue", "default"), ("status", "awaiting_external")): 1,
    }
    assert samples["durajobs_queue_lag_seconds"] == {
        (("queue", "default"),): 40.0,
        (("queue", "later"),): 0.0,
    }


def test_finished_jobs_and_their_durations_are_counted_once_and_pruning_does_not_lower_them(client):
    with clock(tick=True) as moment:
        scrape(client)  # the first scrape sets the mark: counting starts there
        done = [enqueue("traced_steps", subject={"n": n})[0] for n in range(3)]
        failed, _ = enqueue("traced_steps", subject={"fail": True})
        for job in [*done, failed]:
            run_job(job)
        moment.move(figures.SETTLE_SECONDS + 1)

        first = scrape(client)
        again = scrape(client)
        moment.move(timedelta(days=2))
        assert prune(timedelta(days=1)).jobs == 4
        after_pruning = scrape(client)

    finished = first["durajobs_jobs_finished_total"]
    assert finished == {
        (("kind", "traced_steps"), ("outcome", "done")): 3,
        (("kind", "traced_steps"), ("outcome", "failed")): 1,
    }
    kind = (("kind", "traced_steps"),)
    assert first["durajobs_job_duration_seconds_count"] == {kind: 4}
    assert first["durajobs_job_duration_seconds_bucket"][(("kind", "traced_steps"), ("le", "+Inf"))] == 4
    buckets = first["durajobs_job_duration_seconds_bucket"]
    assert buckets[(("kind", "traced_steps"), ("le", "60.0"))] == 4  # each took well under a minute
    counts = [
        buckets[(("kind", "traced_steps"), ("le", le))]
        for le in [*map(repr, figures.DURATION_BUCKETS), "+Inf"]
    ]
    assert counts == sorted(counts)  # cumulative
    assert 0 <= first["durajobs_job_duration_seconds_sum"][kind] < 60
    for later in (again, after_pruning):
        assert later["durajobs_jobs_finished_total"] == finished
        assert later["durajobs_job_duration_seconds_count"] == {kind: 4}


def test_a_scrape_counts_a_job_that_ended_at_the_same_moment_as_the_mark_once(client):
    with clock() as moment:  # the clock stands still: every job ends at the same moment
        scrape(client)
        mark = moment.now() - timedelta(seconds=figures.SETTLE_SECONDS)
        [
            JobFactory(kind="traced_flaky", status=Status.DONE, started_at=mark, ended_at=mark)
            for _ in range(2)
        ]
        moment.move(1)
        counted = figures.advance_tallies()
        recount = figures.advance_tallies()

    assert (counted, recount) == (2, 0)
    assert scrape(client)["durajobs_jobs_finished_total"] == {
        (("kind", "traced_flaky"), ("outcome", "done")): 2
    }


@pytest.mark.parametrize(
    ("headers", "status"),
    [
        pytest.param({}, 401, id="no token"),
        pytest.param({"HTTP_AUTHORIZATION": "Bearer wrong"}, 401, id="a wrong token"),
        pytest.param({"HTTP_AUTHORIZATION": TOKEN}, 401, id="not a bearer token"),
        pytest.param({"HTTP_AUTHORIZATION": f"Bearer {TOKEN}"}, 200, id="the token"),
    ],
)
def test_a_scrape_needs_the_token(client, headers, status):
    response = client.get(URL, **headers)

    assert response.status_code == status
    if status == 401:
        assert response["WWW-Authenticate"].startswith("Bearer")
        assert b"durajobs_jobs" not in response.content


def test_without_a_token_configured_no_bearer_token_is_accepted(client, settings):
    settings.DURAJOBS = {}

    assert client.get(URL, HTTP_AUTHORIZATION="Bearer ").status_code == 401
    assert client.get(URL, HTTP_AUTHORIZATION="Bearer None").status_code == 401


def test_a_logged_in_user_needs_view_job(client):
    user = User.objects.create_user("watcher", password="pw")
    client.force_login(user)
    assert client.get(URL).status_code == 403

    user.user_permissions.add(
        Permission.objects.get(codename="view_job", content_type__app_label="django_durajobs")
    )
    response = client.get(URL)

    assert response.status_code == 200
    assert b"# TYPE durajobs_jobs gauge" in response.content


def test_without_prometheus_client_an_allowed_scrape_says_what_to_install(client, monkeypatch):
    from django_durajobs import metrics

    monkeypatch.setattr(metrics, "PROMETHEUS", False)  # as where the prometheus extra is missing
    response = client.get(URL, HTTP_AUTHORIZATION=f"Bearer {TOKEN}")

    assert response.status_code == 501
    assert response.content.decode().endswith('Install it with: pip install "django-durajobs[prometheus]"')
    assert client.get(URL).status_code == 401  # refused all the same without permission


def test_a_scrape_is_a_get(client):
    assert client.post(URL, HTTP_AUTHORIZATION=f"Bearer {TOKEN}").status_code == 405


# A million jobs ----------------------------------------------------------------------------------

MILLION = 1_000_000
UNFINISHED_JOBS = 10_000


def insert_a_million_jobs() -> None:
    """PostgreSQL: a million jobs in one INSERT … SELECT: mostly done over the last 30 days, the
    last 10,000 unfinished (queued, running or waiting) in three kinds and two queues."""
    fields = [field for field in Job._meta.concrete_fields if not field.primary_key]
    template = Job(kind="traced_steps", status=Status.DONE)
    computed = {
        "kind": "(ARRAY['traced_steps','traced_flaky','traced_async'])[1 + n %% 3]",
        "queue": "(ARRAY['default','mail'])[1 + n %% 2]",
        "status": f"CASE WHEN n <= {MILLION - UNFINISHED_JOBS} THEN 'done' "
        "ELSE (ARRAY['queued','running','awaiting_external'])[1 + n %% 3] END",
        "created_at": "now() - make_interval(secs => n * 2.5)",
        "updated_at": "now() - make_interval(secs => n * 2.5)",
        "next_run_at": "now() - make_interval(secs => n %% 60)",
        "started_at": "now() - make_interval(secs => n * 2.5)",
        "ended_at": f"CASE WHEN n <= {MILLION - UNFINISHED_JOBS} "
        "THEN now() - make_interval(secs => n * 2.5) + make_interval(secs => n %% 100) END",
    }
    columns, values, params = [], [], []
    for field in fields:
        columns.append(connection.ops.quote_name(field.column))
        if field.attname in computed:
            values.append(computed[field.attname])
        else:
            values.append("%s")
            params.append(field.get_db_prep_save(getattr(template, field.attname), connection))
    with connection.cursor() as cursor:
        cursor.execute(
            f"INSERT INTO {Job._meta.db_table} ({', '.join(columns)}) "
            f"SELECT {', '.join(values)} FROM generate_series(1, {MILLION}) AS n",
            params,
        )
        cursor.execute(f"ANALYZE {Job._meta.db_table}")


@pytest.mark.serial
@pytest.mark.slow
@pytest.mark.skipif(connection.vendor != "postgresql", reason="the million-job scrape is timed on PostgreSQL")
def test_a_scrape_of_a_million_jobs_answers_in_under_100_ms_without_a_seq_scan(client):
    insert_a_million_jobs()
    scrape(client)  # warm-up, and the mark: counting starts here
    for _ in range(1000):  # jobs that end after the mark, for the next scrape to count
        JobFactory(kind="traced_steps", status=Status.DONE, declared_steps=False)
    time.sleep(figures.SETTLE_SECONDS + 0.5)

    timings = []
    for _ in range(7):
        started = time.perf_counter()
        samples = scrape(client)
        timings.append(time.perf_counter() - started)
    with CaptureQueriesContext(connection) as scrape_queries:
        scrape(client)
    plans = []
    with connection.cursor() as cursor:
        for query in scrape_queries.captured_queries:
            if query["sql"].startswith("SELECT") and Job._meta.db_table in query["sql"]:
                cursor.execute(f"EXPLAIN {query['sql']}")
                plans.append("\n".join(row[0] for row in cursor.fetchall()))
    median = statistics.median(timings)
    print(
        f"\nmetrics scrape of {Job.objects.count():,} jobs: median {median * 1000:.1f} ms, "
        f"first {timings[0] * 1000:.1f} ms, best {min(timings) * 1000:.1f} ms"
    )

    assert median < 0.1
    assert plans and not [plan for plan in plans if f"Seq Scan on {Job._meta.db_table}" in plan], plans
    assert sum(samples["durajobs_jobs"].values()) == UNFINISHED_JOBS
    assert samples["durajobs_jobs_finished_total"] == {(("kind", "traced_steps"), ("outcome", "done")): 1000}


@pytest.mark.django_db(transaction=True)
@pytest.mark.skipif(connection.vendor == "sqlite", reason="concurrent writers need PostgreSQL or MariaDB")
def test_concurrent_scrapes_count_each_ended_job_once():
    with clock() as moment:
        figures.advance_tallies()  # the mark
        ended = moment.now()
        JobFactory.create_batch(
            50, kind="traced_flaky", status=Status.DONE, ended_at=ended, declared_steps=False
        )
        moment.move(figures.SETTLE_SECONDS + 1)
        start = threading.Barrier(4)
        counted: list[int] = []

        def scrape_at_once() -> None:
            try:
                start.wait()
                counted.append(figures.advance_tallies())
            finally:
                connections.close_all()

        threads = [threading.Thread(target=scrape_at_once) for _ in range(4)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()

    assert sorted(counted) == [0, 0, 0, 50]
    assert FinishedTally.objects.get(kind="traced_flaky", outcome="done").count == 50
