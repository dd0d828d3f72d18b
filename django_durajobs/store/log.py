"""A job's log: lines stored redacted and shortened, and trimmed to ``LOG_LINES_KEPT``."""

from __future__ import annotations

from datetime import datetime
from typing import Any

from django.db.backends.base.base import BaseDatabaseWrapper
from django.utils import timezone

from ..conf import get_setting
from ..models import Job, JobLog
from ..redaction import shown_text
from . import sql


def append_log(
    job_id: int, line: Any, db: BaseDatabaseWrapper | None = None, at: datetime | None = None
) -> None:
    """Store one redacted, shortened log line (unfenced: a worker's lease fences it by other means)."""
    db = db or sql.database()

    def insert() -> str:
        return f"INSERT INTO {sql.table(db, JobLog)} (job_id, at, line) VALUES (%s, %s, %s)"

    params = [job_id, sql.prepared_datetime(db, at or timezone.now()), clean_log_line(line)]
    sql.run(db, sql.statement(db, ("log",), insert), params)


def clean_log_line(line: Any) -> str:
    return shown_text(line, get_setting("LOG_LINE_MAX_CHARS"))


def trim_log(job_id: int) -> None:
    """Keep only the latest ``LOG_LINES_KEPT`` lines of a job."""
    keep = get_setting("LOG_LINES_KEPT")
    oldest_kept = (
        JobLog.objects.filter(job_id=job_id)
        .order_by("-id")
        .values_list("id", flat=True)[keep - 1 : keep]
        .first()
    )
    if oldest_kept is not None:
        JobLog.objects.filter(job_id=job_id, id__lt=oldest_kept).delete()


def log_each(ids: list[int], at: datetime, line: str) -> None:
    """One log line for each of the jobs ``ids``, in one ``INSERT … SELECT``."""
    db = sql.database()
    quote = db.ops.quote_name
    statement = (
        f"INSERT INTO {sql.table(db, JobLog)} (job_id, at, line) "
        f"SELECT {quote('id')}, %s, %s FROM {sql.table(db, Job)} "
        f"WHERE {quote('id')} IN ({', '.join(['%s'] * len(ids))})"
    )
    with db.cursor() as cursor:
        cursor.execute(statement, [sql.prepared_datetime(db, at), line, *ids])
