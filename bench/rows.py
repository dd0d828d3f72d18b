"""Many job rows at once, for the workloads that measure a cost as the table grows."""

from __future__ import annotations

from django.db import connection
from django.utils import timezone

from bench.database import rows_sql
from django_durajobs import Job


def add_jobs(count: int, **fields) -> None:
    """Add ``count`` no-op jobs with ``fields`` (the status, its moments…) in one ``INSERT … SELECT``.

    The row is a model instance turned into column values by Django, so the statement stays
    right whatever columns the job table gains.
    """
    now = timezone.now()
    row = Job(
        **{"kind": "bench_noop0", "label": "No-op, no steps", "created_at": now, "updated_at": now, **fields}
    )
    columns = [field for field in Job._meta.concrete_fields if not field.primary_key]
    names = [connection.ops.quote_name(field.column) for field in columns]
    params = [field.get_db_prep_save(getattr(row, field.attname), connection) for field in columns]
    sql = rows_sql(connection.vendor, Job._meta.db_table, names, ["%s"] * len(columns), count)
    with connection.cursor() as cursor:
        cursor.execute(sql, params)
