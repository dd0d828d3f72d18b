"""The admin's job list at scale: the changelist rendered over a big job table (issue 27).

The table is filled with raw ``INSERT … SELECT`` statements (``generate_series`` on PostgreSQL, a
recursive CTE on SQLite, a cross join of digit tables on MariaDB/MySQL), in two sizes: the
quick run's 2,000 and 20,000 jobs, the full run's 100,000 and 1,000,000. A tenth of the jobs are
child jobs; 3 % failed, 5 % queued, the rest mostly done; five registered kinds, three queues.
After ``ANALYZE`` a superuser logged in through Django's test client renders the list: as it
opens, the failed jobs, one kind, a search, and page 20. Each figure is the median of a few
renders after one untimed render, with the number of queries one render makes and the time
they took (as Django's query log gives it, to the millisecond): on a loaded machine the render's
Python work moves most.
"""

from __future__ import annotations

import statistics
import time
from datetime import timedelta

from django.db import connection
from django.db.models import Max, Min
from django.test import Client
from django.test.utils import CaptureQueriesContext
from django.urls import reverse
from django.utils import timezone

from bench.report import Figure
from django_durajobs import Job, Status

RENDERS = 5  # timed renders of each page, after one untimed
#: Every CHILD_EVERY-th job of a fill is a child of one of the top-level jobs.
CHILD_EVERY = 10
#: Job number modulo 100 -> status; the rest are done.
STATUSES = ((range(0, 3), Status.FAILED), (range(3, 8), Status.QUEUED), (range(8, 9), Status.RUNNING))
#: Job number modulo 100 -> kind (cumulative percentages).
KINDS = (
    (60, "bench_noop0"),
    (85, "bench_noop1"),
    (95, "bench_noop5"),
    (99, "bench_fair"),
    (100, "bench_unfair"),
)
QUEUES = ((80, "default"), (95, "bulk"), (100, "critical"))
SEARCHED = 1234  # "Job 1234": one job by its whole label, more that start with it at a larger size


def admin_at_scale(bench) -> list[Figure]:
    """The changelist's renders at each size of ``bench.sizes.admin``."""
    bench.reset()
    client = superuser_client()
    figures: list[Figure] = []
    filled = 0
    for size in bench.sizes.admin:
        fill_jobs(filled, size - filled)
        filled = size
        bench.analyze()
        figures += render_figures(client, size)
    bench.reset()
    return figures


def superuser_client() -> Client:
    from django.contrib.auth import get_user_model

    user_model = get_user_model()
    user_model.objects.filter(username="bench-admin").delete()
    user = user_model.objects.create_superuser(username="bench-admin", email="bench@example.com")
    client = Client()
    client.force_login(user)
    return client


def pages(size: int) -> list[tuple[str, str, dict]]:
    """(key, what, query) of each render."""
    return [
        ("list", "job list as it opens", {}),
        ("failed", "failed jobs (status filter)", {"status__exact": Status.FAILED}),
        ("kind", "one kind (kind filter)", {"kind__exact": "bench_noop5"}),
        ("search", f'search "Job {SEARCHED}"', {"q": f"Job {SEARCHED}"}),
        ("page20", "page 20 of the list", {"p": "20"}),
    ]


def render_figures(client: Client, size: int) -> list[Figure]:
    url = reverse("admin:django_durajobs_job_changelist")
    figures = []
    for key, what, query in pages(size):
        response = client.get(url, query)  # templates compiled, caches warm, as on a live server
        if response.status_code != 200:
            raise RuntimeError(f"{url} {query}: HTTP {response.status_code}")
        with CaptureQueriesContext(connection) as capture:
            client.get(url, query)
        queries = capture.captured_queries  # now: the next request empties the log it reads
        times = []
        for _ in range(RENDERS):
            start = time.perf_counter()
            client.get(url, query)
            times.append((time.perf_counter() - start) * 1000)
        seconds = [float(query["time"]) for query in queries]
        figures.append(
            Figure(
                f"admin_{key}_{size}",
                f"admin changelist, {size:,} jobs: {what}",
                statistics.median(times),
                "ms",
                note=f"median of {RENDERS}; {len(queries)} queries, {sum(seconds) * 1000:.0f} ms in all, "
                f"slowest {max(seconds) * 1000:.0f} ms",
            )
        )
    return figures


# The fill --------------------------------------------------------------------------------------


def fill_jobs(first: int, count: int) -> None:
    """Add ``count`` jobs numbered from ``first``: the top-level ones, then the child jobs."""
    children = count // CHILD_EVERY
    top = count - children
    before = Job.objects.order_by("-id").values_list("id", flat=True).first() or 0
    insert_jobs(first, top, parents=None)
    # The new ids, one run of them (MariaDB may skip ids between two statements, not within one).
    new = Job.objects.filter(id__gt=before).aggregate(low=Min("id"), high=Max("id"))
    if new["high"] - new["low"] + 1 != top:
        raise RuntimeError(f"the {top:,} new jobs' ids are not one run: {new}")
    insert_jobs(first + top, children, parents=(new["low"], new["high"]))


def cases(variable: str, table: tuple[tuple[int, str], ...]) -> str:
    whens = " ".join(f"WHEN {variable} < {bound} THEN '{value}'" for bound, value in table)
    return f"CASE {whens} END"


def insert_jobs(first: int, count: int, parents: tuple[int, int] | None) -> None:
    """One ``INSERT … SELECT`` of ``count`` jobs numbered ``first + n`` (n from 1).

    The columns not set here hold a model instance's defaults, turned into values by Django, so
    the statement stays right whatever columns the job table gains.
    """
    vendor = connection.vendor
    number = f"({first} + n)"
    percent = f"({number} %% 100)"
    status_table = tuple((r.stop, str(s)) for r, s in STATUSES) + ((100, str(Status.DONE)),)
    base = timezone.now() - timedelta(days=30)
    seconds = f"({number} * 2)"  # one job every two seconds from 30 days ago
    if vendor == "postgresql":
        created, label = f"(%s::timestamptz + {seconds} * interval '1 second')", f"'Job ' || {number}"
    elif vendor == "sqlite":
        created = f"strftime('%%Y-%%m-%%d %%H:%%M:%%f', %s, '+' || {seconds} || ' seconds')"
        label = f"'Job ' || {number}"
    else:
        created, label = f"(%s + INTERVAL {seconds} SECOND)", f"CONCAT('Job ', {number})"
    expressions = {
        "label": label,
        "status": cases(percent, status_table),
        "kind": cases(f"(({number} * 7) %% 100)", KINDS),
        "queue": cases(f"(({number} * 13) %% 100)", QUEUES),
        "created_at": created,
        "updated_at": created,
        "parent_id": "NULL" if parents is None else f"({parents[0]} + n %% {parents[1] - parents[0] + 1})",
    }
    template = Job(kind="bench_noop0", label="-", attempt=1)
    fields = [field for field in Job._meta.concrete_fields if not field.primary_key]
    columns, values, params = [], [], []
    for field in fields:
        columns.append(connection.ops.quote_name(field.column))
        if field.column in expressions:
            values.append(expressions[field.column])
            if field.column in ("created_at", "updated_at"):
                params.append(
                    base if vendor == "postgresql" else connection.ops.adapt_datetimefield_value(base)
                )
        else:
            values.append("%s")
            params.append(field.get_db_prep_save(getattr(template, field.attname), connection))
    sql = numbered_rows_sql(vendor, Job._meta.db_table, columns, values, count)
    with connection.cursor() as cursor:
        cursor.execute(sql, params)


def numbered_rows_sql(vendor: str, table: str, columns: list[str], values: list[str], count: int) -> str:
    """``INSERT … SELECT`` of ``count`` rows, each with its number ``n`` (1 to ``count``)."""
    insert = f"INSERT INTO {table} ({', '.join(columns)}) SELECT {', '.join(values)}"
    if vendor == "postgresql":
        return f"{insert} FROM generate_series(1, {int(count)}) AS g(n)"
    if vendor == "sqlite":
        counter = f"WITH RECURSIVE c(n) AS (SELECT 1 UNION ALL SELECT n + 1 FROM c WHERE n < {int(count)})"
        return f"{counter} {insert} FROM c"
    width = max(1, len(str(count)))
    digits = "(SELECT 0 AS d UNION ALL " + " UNION ALL ".join(f"SELECT {d}" for d in range(1, 10)) + ")"
    joined = " CROSS JOIN ".join(f"{digits} AS d{place}" for place in range(width))
    n = " + ".join(f"d{place}.d * {10**place}" for place in range(width)) + " + 1"
    return f"{insert} FROM (SELECT {n} AS n FROM {joined}) AS c WHERE n <= {int(count)}"
