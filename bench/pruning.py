"""Pruning at scale: ``prune()`` over a job table of finished jobs, at two sizes (issue 27).

The table is filled with ``INSERT … SELECT`` statements (bench/scale_admin.py's numbered rows):
jobs done 60 days ago, a tenth of them in families (a parent with four children), each job with
a step row and a log line, and an event for every hundredth job. After ``ANALYZE``,
``prune(timedelta(days=30))`` deletes it all. Its rate is the jobs deleted per second; its memory
is the peak of Python's allocations while it runs (``tracemalloc``, in a second prune of the same
fill: tracing slows what it watches; the rows the driver reads become Python objects, so they
count). Flat costs: the large size's rate is the
small one's, and so is its memory.
"""

from __future__ import annotations

import time
import tracemalloc
from datetime import timedelta

from django.db import connection
from django.db.models import Max, Min, Model
from django.utils import timezone

from bench.harness import WorkloadFailed
from bench.report import Figure
from bench.scale_admin import numbered_rows_sql
from django_durajobs import Event, Job, JobLog, JobStep, Status, prune

#: A family is a parent with CHILDREN children; FAMILY_SHARE of the jobs are in one.
CHILDREN = 4
FAMILY_SHARE = 10
EVENT_EVERY = 100  # jobs per event sent
AGE = timedelta(days=60)  # how long ago the jobs ended; prune() takes what ended 30 days ago


def prune_at_scale(bench) -> list[Figure]:
    """``prune()``'s rate and memory at each of ``bench.sizes.prune``: the rate untraced, the memory
    in a second prune of the same fill with ``tracemalloc`` on (it slows what it watches)."""
    measured = []
    for size in bench.sizes.prune:
        seconds = pruned(bench, size)
        tracemalloc.start()
        try:
            pruned(bench, size)
            peak = tracemalloc.get_traced_memory()[1]
        finally:
            tracemalloc.stop()
        measured.append((size, size / seconds, peak / 2**20))
    bench.reset()
    return figures(measured)


def pruned(bench, size: int) -> float:
    """Seconds ``prune()`` takes to delete ``size`` jobs filled and analyzed before it."""
    bench.reset()
    fill(size)
    bench.analyze()
    if tracemalloc.is_tracing():
        tracemalloc.reset_peak()
    start = time.perf_counter()
    result = prune(timedelta(days=30))
    seconds = time.perf_counter() - start
    left = Job.objects.count() + JobStep.objects.count() + JobLog.objects.count() + Event.objects.count()
    if result.jobs != size or result.rows[JobStep._meta.label] != size or left:
        raise WorkloadFailed(f"prune() of {size:,} jobs: {result}, {left} rows left")
    return seconds


def figures(measured: list[tuple[int, float, float]]) -> list[Figure]:
    (small, small_rate, small_mb), (large, large_rate, large_mb) = measured
    note = "with steps, log lines, events; a tenth in families"
    return [
        Figure("prune_small", f"prune {small:,} finished jobs", small_rate, "jobs/s", note=note),
        Figure(
            "prune_large",
            f"prune {large:,} finished jobs",
            large_rate,
            "jobs/s",
            versus=large_rate / small_rate,
            versus_what=f"the rate at {small:,}",
            note=note,
        ),
        Figure("prune_memory_small", f"prune {small:,} jobs: peak of Python memory", small_mb, "MB"),
        Figure(
            "prune_memory_large",
            f"prune {large:,} jobs: peak of Python memory",
            large_mb,
            "MB",
            versus=large_mb / small_mb,
            versus_what=f"at {small:,}",
        ),
    ]


# The fill --------------------------------------------------------------------------------------


def fill(count: int) -> None:
    """``count`` jobs that ended ``AGE`` ago, the roots first, then the children; a step and a log
    line for each, and the events."""
    families = max(1, count // FAMILY_SHARE // (CHILDREN + 1))
    roots = count - families * CHILDREN
    ended = timezone.now() - AGE
    insert_numbered(
        Job, Job(kind="bench_noop1", label="Old", status=Status.DONE, attempt=1), roots, {}, ended
    )
    new = Job.objects.aggregate(low=Min("id"), high=Max("id"))
    if new["high"] - new["low"] + 1 != roots:
        raise RuntimeError(f"the {roots:,} jobs' ids are not one run: {new}")
    spread = roots // families  # the parents are spread over the table, not its first rows
    parent = {"parent_id": f"({new['low']} + (n %% {families}) * {spread})"}
    insert_numbered(
        Job,
        Job(kind="bench_noop0", label="Child", status=Status.DONE, attempt=1),
        count - roots,
        parent,
        ended,
    )
    step = JobStep(position=0, step_id="only", title="Only", state="done", started_at=ended, ended_at=ended)
    insert_per_job(step, ended)
    insert_per_job(JobLog(at=ended, line="Done."), ended)
    name = "CONCAT('bench-', n)" if connection.vendor == "mysql" else "'bench-' || n"
    insert_numbered(Event, Event(sent_at=ended), count // EVENT_EVERY, {"name": name}, ended)


def _columns(model: type[Model], row: Model, expressions: dict[str, str], ended) -> tuple[list, list, list]:
    """The columns of ``model`` (its id left out), their values (``expressions`` or ``row``'s own)
    and the parameters; every timestamp is ``ended``."""
    columns, values, params = [], [], []
    for field in model._meta.concrete_fields:
        if field.primary_key:
            continue
        columns.append(connection.ops.quote_name(field.column))
        if field.column in expressions:
            values.append(expressions[field.column])
            continue
        value = ended if field.get_internal_type() == "DateTimeField" else getattr(row, field.attname)
        values.append("%s")
        params.append(field.get_db_prep_save(value, connection))
    return columns, values, params


def insert_numbered(model: type[Model], row: Model, count: int, expressions: dict[str, str], ended) -> None:
    """``count`` copies of ``row`` in one statement, each with its number ``n`` for ``expressions``."""
    if count:
        columns, values, params = _columns(model, row, expressions, ended)
        with connection.cursor() as cursor:
            cursor.execute(
                numbered_rows_sql(connection.vendor, model._meta.db_table, columns, values, count), params
            )


def insert_per_job(row: JobStep | JobLog, ended) -> None:
    """A copy of ``row`` for every job, in one ``INSERT … SELECT`` over the job table."""
    columns, values, params = _columns(type(row), row, {"job_id": "id"}, ended)
    table, jobs = type(row)._meta.db_table, Job._meta.db_table
    with connection.cursor() as cursor:
        cursor.execute(
            f"INSERT INTO {table} ({', '.join(columns)}) SELECT {', '.join(values)} FROM {jobs}", params
        )
