"""No secret of the corpus (``tests/secret_corpus.py``) leaves in clear.

End to end (each shape alone is checked in ``tests/engine/test_secret_corpus.py``), a real
``runjobs`` process runs jobs (``tests.testapp.kinds_secrets``) that put each shape into log
lines, a step result, an exception (raised inside a step, with the secret in a local variable, and
by the run itself), a wait reason, a question and a run result, with the shape in the job's
subject too. Then no secret is in any column of any table (read with raw SQL), in any admin page
of those jobs (the dashboard and the list's live answer too), in ``describe()`` or
``children_summary()``, or in the worker's log; and no log record of ``drain()`` holds one.
Subjects and step results are stored as given (DESIGN.md §3 and §6): those two columns are read
to show that the raw read does see a secret when one is there, and are masked wherever shown.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Iterator

import pytest
from django.contrib.admin.models import LogEntry
from django.db import connection
from django.test import Client
from django.urls import reverse
from django.utils.html import escape

from django_durajobs import Job, JobStep, Status, children_summary, describe, drain, enqueue
from django_durajobs.admin.console import LIVE_ROWS
from django_durajobs.redaction import REDACTED
from tests.secret_corpus import CORPUS, GROUPS, group_text
from tests.testapp.kinds_secrets import ENDINGS

#: The admin pages of one job, by URL name (they take the job's id). Add a page here when the
#: admin gets one: every page is read for every job of the corpus.
JOB_PAGES = (
    "admin:django_durajobs_job_change",
    "admin:django_durajobs_job_live",
    "admin:django_durajobs_job_log",
    "admin:django_durajobs_job_history",
)
#: The admin pages that list jobs, read page by page.
LIST_PAGES = ("admin:django_durajobs_job_changelist",)
#: The admin pages about all jobs at once: the dashboard and its live answer.
OVERVIEW_PAGES = ("admin:django_durajobs_job_dashboard", "admin:django_durajobs_job_dashboard_live")
#: The list's live answer, asked for the rows of every job, as many at a time as it answers.
LIST_LIVE = "admin:django_durajobs_job_list_live"
#: Columns stored as given, by design: a job's subject and a step's result (masked when shown).
STORED_AS_GIVEN = {(Job._meta.db_table, "subject"), (JobStep._meta.db_table, "result")}
#: Where each ending leaves the job.
FINAL_STATUS = {
    "raise_in_step": Status.FAILED,
    "raise": Status.FAILED,
    "wait": Status.AWAITING_EXTERNAL,
    "ask": Status.NEEDS_USER,
    "done": Status.DONE,
}


# End to end ---------------------------------------------------------------------------------------


def spellings(secret: str) -> set[str]:
    """The secret as it reads in text, in JSON, in HTML, and in either inside the other."""
    quoted = (json.dumps(secret)[1:-1], escape(secret))
    return {secret, *quoted, escape(quoted[0]), json.dumps(quoted[1])[1:-1]}


#: Each shape's name and its secret's spellings, made once: ``leaks`` reads tens of thousands of texts.
SPELLINGS = [(shape.name, spellings(shape.secret)) for shape in CORPUS]


def leaks(text: str) -> list[str]:
    """Names of the shapes whose secret is in ``text``."""
    return [name for name, spelled in SPELLINGS if any(spelling in text for spelling in spelled)]


def enqueue_corpus() -> tuple[Job, list[Job]]:
    """A parent, and below it one job per group of shapes and ending; each subject holds its
    group's texts (``GROUPS``: a group is redacted as each of its shapes alone)."""
    parent, _ = enqueue("secrets_family")
    jobs = [
        enqueue("secrets_everywhere", parent=parent, subject={"text": group_text(group), "ending": ending})[0]
        for group in GROUPS
        for ending in ENDINGS
    ]
    return parent, jobs


def table_cells() -> Iterator[tuple[str, str, str]]:
    """(table, column, text) of every cell of every table of the database, read with raw SQL."""
    with connection.cursor() as cursor:
        for table in connection.introspection.table_names(cursor):
            cursor.execute(f"SELECT * FROM {connection.ops.quote_name(table)}")
            columns = [column[0] for column in cursor.description]
            for row in cursor.fetchall():
                for column, value in zip(columns, row, strict=True):
                    if value is not None:
                        text = value if isinstance(value, str) else json.dumps(value, default=str)
                        yield table, column, text


def admin_pages(client: Client, jobs: list[Job]) -> Iterator[tuple[str, str]]:
    """(url, content) of every page of ``LIST_PAGES``, ``OVERVIEW_PAGES``, the list's live answer
    for every job, and ``JOB_PAGES`` for each job."""
    for name in LIST_PAGES:
        first = client.get(reverse(name))
        assert first.status_code == 200, reverse(name)
        for number in first.context["cl"].paginator.page_range:
            url = f"{reverse(name)}?p={number}"
            yield url, client.get(url).content.decode()
    for name in OVERVIEW_PAGES:
        response = client.get(reverse(name))
        assert response.status_code == 200, reverse(name)
        yield reverse(name), response.content.decode()
    for start in range(0, len(jobs), LIVE_ROWS):
        ids = ",".join(str(job.pk) for job in jobs[start : start + LIVE_ROWS])
        response = client.get(reverse(LIST_LIVE), {"ids": ids})
        assert response.status_code == 200 and not response.json()["gone"], ids
        yield f"{reverse(LIST_LIVE)}?ids={ids}", response.content.decode()
    for job in jobs:
        for name in JOB_PAGES:
            url = reverse(name, args=[job.pk])
            response = client.get(url)
            assert response.status_code == 200, url
            yield url, response.content.decode()


@pytest.mark.slow
@pytest.mark.timeout(900)  # the worker alone may take 600 s on a loaded machine
def test_no_secret_reaches_a_table_a_page_describe_or_the_worker_log(child_env, runjobs, django_user_model):
    parent, jobs = enqueue_corpus()

    worker = runjobs("--burst", "--concurrency", "2", "-v", "2", env=child_env)
    assert worker.wait(timeout=600) == 0, worker.log_path.read_text()[-5000:]

    for job in jobs:
        job.refresh_from_db()
        assert job.status == FINAL_STATUS[job.subject["ending"]], (job.subject, job.error)
    failed_in_step = [job for job in jobs if job.subject["ending"] == "raise_in_step"]
    assert all(JobStep.objects.get(job=job, step_id="use").state == "failed" for job in failed_in_step)
    superuser = django_user_model.objects.create_superuser("sam", "sam@example.com", "pw")
    client = Client()
    client.force_login(superuser)
    waiting = [job for job in jobs if job.status == Status.AWAITING_EXTERNAL][:5]
    for job in waiting:  # an operator's action is written to Django's admin log too
        client.post(reverse("admin:django_durajobs_job_operate", args=[job.pk, "cancel"]))
    assert LogEntry.objects.count() == len(waiting)

    cells = list(table_cells())
    assert [
        (table, column, leaks(text))
        for table, column, text in cells
        if (table, column) not in STORED_AS_GIVEN and leaks(text)
    ] == []
    assert any(
        leaks(text) for table, column, text in cells if (table, column) in STORED_AS_GIVEN
    )  # the read sees them
    pages = list(admin_pages(client, jobs))
    assert sorted({name for url, content in pages for name in leaks(content)}) == []
    assert all(REDACTED in content for url, content in pages if "/change/" in url)
    assert leaks(json.dumps([describe(job) for job in jobs])) == []
    summary = children_summary(parent)
    assert summary["total"] == len(jobs)
    assert leaks(json.dumps(summary)) == []
    worker_log = worker.log_path.read_text()
    assert "Traceback (most recent call last)" in worker_log  # tracebacks are logged, redacted
    assert leaks(worker_log) == []


@pytest.mark.django_db
def test_no_secret_reaches_a_log_record_of_drain(caplog):
    _, jobs = enqueue_corpus()

    with caplog.at_level(logging.DEBUG, logger="django_durajobs"):
        assert drain(max_jobs=len(jobs) + 1) == len(jobs) + 1

    records = [record for record in caplog.records if record.name.startswith("django_durajobs")]
    raised = sum(1 for job in jobs if job.subject["ending"] in ("raise_in_step", "raise"))
    tracebacks = [record for record in records if record.exc_text]
    assert len(tracebacks) == raised
    assert all("ConnectionError: could not connect with" in record.exc_text for record in tracebacks)
    assert all(record.exc_info is None for record in records)
    assert leaks("\n".join(record.getMessage() for record in records)) == []
    assert leaks("\n".join(record.exc_text for record in tracebacks)) == []
    assert leaks(caplog.text) == []
