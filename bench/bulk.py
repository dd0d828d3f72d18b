"""Bulk enqueue against the driver's ``executemany`` of the same rows.

``enqueue_many`` writes a job row of every column django-durajobs keeps, into a table with the
indexes its claims, screens and searches need, and a row per declared step. The ceiling is what a
hand-written bulk insert of those very rows costs: the job rows, made ready for the driver before
the clock starts, go in with ``executemany``; their new ids come back (PostgreSQL: ``RETURNING``
through ``executemany``; elsewhere one ``SELECT`` of the ids above the largest before), and the
step rows follow with one more ``executemany``; one transaction per batch. Both write into the
same tables, a batch of each in turn, so that the tables grow alike under both and a busy spell
of the machine weighs on both.

The raw queue's ``executemany`` of its own three-column rows is given too, as the floor of an
insert: it is what a queue that keeps nothing but a payload pays.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from functools import partial
from typing import Any

from django.db import connection
from django.utils import timezone

from bench.harness import BATCH, WorkloadFailed
from bench.report import Figure
from django_durajobs import Job, enqueue_many
from django_durajobs.models import JobStep
from django_durajobs.registry import get_kind
from django_durajobs.status import Phase, StepState

KIND = "bench_noop1"
#: The columns ``enqueue_many`` writes for a declared step (the others keep their defaults).
STEP_COLUMNS = ("job_id", "phase", "position", "step_id", "title", "state", "detail", "error")


def enqueue_in_bulk(bench) -> list[Figure]:
    count = bench.sizes.bulk
    batches = [range(first, min(first + BATCH, count)) for first in range(0, count, BATCH)]
    bench.reset()
    floor = count / _seconds(lambda: [bench.raw.insert_many(numbers) for numbers in batches])
    job_rows = [_job_rows(numbers) for numbers in batches]
    bench.reset()
    raw_seconds = ours_seconds = 0.0
    for numbers, rows in zip(batches, job_rows, strict=True):  # interleaved: a busy spell hits both
        specs = [{"subject": {"n": n}} for n in numbers]
        raw_seconds += _seconds(partial(_insert_same_rows, bench.raw, rows))
        ours_seconds += _seconds(partial(enqueue_many, KIND, specs))
    _expect_jobs(2 * count)
    same_rows, ours = count / raw_seconds, count / ours_seconds
    label = f"bulk enqueue, enqueue_many × {BATCH:,} (1-step)"
    return [
        Figure(
            "enqueue_many",
            label,
            ours,
            "jobs/s",
            same_rows,
            note=f"raw: executemany × {BATCH:,} of the same job and step rows",
        ),
        Figure(
            "enqueue_many_floor",
            f"{label}, against the raw queue's own rows",
            ours,
            "jobs/s",
            floor,
            note=f"raw: executemany × {BATCH:,} of a 3-column row",
        ),
    ]


def _seconds(work: Callable[[], object]) -> float:
    started = time.perf_counter()
    work()
    return time.perf_counter() - started


def _job_rows(numbers: range) -> list[tuple[Any, ...]]:
    """The rows ``enqueue_many`` would write for these jobs, as Django hands them to the driver."""
    definition = get_kind(KIND)
    now = timezone.now()
    fields = _job_fields()
    rows = []
    for n in numbers:
        job = Job(
            kind=definition.name,
            kind_version=definition.version,
            label=str(definition.title)[:255],
            status="queued",
            subject={"n": n},
            queue=definition.queue,
            priority=definition.priority,
            max_attempts=definition.max_attempts,
            timeout=definition.timeout,
            next_run_at=now,
            created_at=now,
            updated_at=now,
        )
        rows.append(
            tuple(field.get_db_prep_save(getattr(job, field.attname), connection) for field in fields)
        )
    return rows


def _job_fields() -> list:
    return [field for field in Job._meta.concrete_fields if not field.primary_key]


def _insert_same_rows(raw, rows: list[tuple[Any, ...]]) -> None:
    declared = [
        (position, step_id, str(title))
        for position, (step_id, title) in enumerate(get_kind(KIND).step_rows())
    ]
    mark = raw.placeholder
    job_table, step_table = Job._meta.db_table, JobStep._meta.db_table
    columns = ", ".join(field.column for field in _job_fields())
    job_sql = f"INSERT INTO {job_table} ({columns}) VALUES ({', '.join([mark] * len(rows[0]))})"
    step_marks = ", ".join([mark] * len(STEP_COLUMNS))
    step_sql = f"INSERT INTO {step_table} ({', '.join(STEP_COLUMNS)}) VALUES ({step_marks})"
    raw.begin()
    ids = raw.insert_returning_ids(job_sql, rows, job_table)
    raw.conn.cursor().executemany(
        step_sql,
        [
            (pk, Phase.RUN, position, step_id, title, StepState.PENDING, "", "")
            for pk in ids
            for position, step_id, title in declared
        ],
    )
    raw.commit()


def _expect_jobs(count: int) -> None:
    found = Job.objects.count()
    if found != count:
        raise WorkloadFailed(f"expected {count} jobs, found {found}")
