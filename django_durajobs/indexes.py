"""The job table's indexes, and one that Django's ``Index`` cannot say for every database at once."""

from __future__ import annotations

from typing import Any

from django.db import models

from .transitions import CLAIMABLE, WAKES_BY_ITSELF


class PrefixSearchIndex(models.Index):
    """An index on one text column that a search by its beginning, in any case, reads
    (``istartswith``: ``UPPER(column::text) LIKE UPPER('term%')`` on PostgreSQL).

    On PostgreSQL it is over ``UPPER(column::text)`` with ``text_pattern_ops``, which ``LIKE``
    with a fixed prefix reads whatever the database's collation. Elsewhere it is a plain index
    on the column: MariaDB/MySQL compare ``LIKE 'term%'`` in the column's case-insensitive
    collation, which reads it; SQLite's ``LIKE`` reads no index (its tables are small).
    """

    def create_sql(self, model: Any, schema_editor: Any, using: str = "", **kwargs: Any) -> Any:
        if schema_editor.connection.vendor != "postgresql":
            return super().create_sql(model, schema_editor, using, **kwargs)
        quote = schema_editor.quote_name
        column = quote(model._meta.get_field(self.fields[0]).column)
        table = quote(model._meta.db_table)
        return f"CREATE INDEX {quote(self.name)} ON {table} ((UPPER({column}::text)) text_pattern_ops)"


#: The order claims take due jobs in (store/claiming.py): priority, then interrupted work before
#: work not started, then when first due, then age; the claim indexes' columns after the status.
CLAIM_ORDER = ["-priority", "-interrupted", "next_run_at", "id"]
#: The condition of the indexes that hold the children alone.
CHILD = models.Q(parent__isnull=False)

# Every claim and outcome changes the status, so each writes an entry into every index
# whose condition the job meets: no more of them than the lookups need, none fuller.
JOB_INDEXES = [
    # What workers claim, in claim order (interrupted work first within its priority, see
    # store/claiming.py). Status leads, so finished jobs, however many, are never scanned.
    models.Index(fields=["status", *CLAIM_ORDER], name="durajobs_due"),
    # The same within a queue, for a worker of some queues (runjobs --queue): it would read
    # past every due job of the other queues in durajobs_due.
    models.Index(fields=["status", "queue", *CLAIM_ORDER], name="durajobs_queue_due"),
    # The due jobs apart from those under limits, for the claim of the others: it would read
    # past every job a full limit holds back in durajobs_due. Only due jobs are in it, so a
    # claim and an outcome write no entry into it (all jobs on MariaDB/MySQL).
    models.Index(
        fields=["status", "under_limits", *CLAIM_ORDER],
        condition=models.Q(status__in=CLAIMABLE),
        name="durajobs_plain_due",
    ),
    # Timed waits and deadlines to wake, by moment (store/waking.py); all jobs on MariaDB/MySQL.
    models.Index(
        fields=["next_run_at", "status"],
        condition=models.Q(status__in=WAKES_BY_ITSELF),
        name="durajobs_timed",
    ),
    models.Index(fields=["group_id", "created_at"], name="durajobs_group"),
    models.Index(fields=["subject_type", "subject_id", "created_at"], name="durajobs_subject"),
    # A parent's children; whether it has one still open, asked as each settles (store/family.py).
    # Children alone (a lookup by parent implies one), so a top-level job writes no entry.
    models.Index(fields=["parent", "created_at"], condition=CHILD, name="durajobs_parent"),
    models.Index(fields=["parent", "status"], condition=CHILD, name="durajobs_parent_status"),
    models.Index(fields=["kind", "created_at"], name="durajobs_kind"),
    # The jobs under limits by lane (queue, kind, key), for a claim past the ones a full limit
    # holds back: one seek a lane, whatever its backlog (store/limited_pick.py). Not made on
    # MariaDB/MySQL, which cannot read it so (migration 0024).
    models.Index(
        fields=["status", "queue", "kind", "concurrency_key", *CLAIM_ORDER],
        condition=models.Q(status__in=CLAIMABLE, under_limits=True),
        name="durajobs_limited_due",
    ),
    # Fair shares: the next key with a due job, in key order, and its most urgent job, in
    # claim order (store/fairness.py).
    models.Index(
        fields=["status", "fairness_key", "-priority", "-interrupted", "next_run_at", "id"],
        condition=models.Q(fairness_key__gt=""),
        name="durajobs_fair",
    ),
    # The admin's job list, newest first, of the top-level jobs (as it opens: issue 27), and
    # its search by the label's beginning. MariaDB/MySQL build the first over every row.
    models.Index(
        fields=["-created_at", "-id"], condition=models.Q(parent__isnull=True), name="durajobs_listed"
    ),
    PrefixSearchIndex(fields=["label"], name="durajobs_label"),
    # The console's throughput, what ended in the last hour; pruning. The ended jobs alone.
    models.Index(fields=["ended_at"], condition=models.Q(ended_at__isnull=False), name="durajobs_ended"),
    # The jobs a sent event wakes, in one statement; the admin's search by event name.
    models.Index(fields=["waits_for_event", "status"], name="durajobs_event_waiters"),
    # Deleting a user, and a job that was rerun: only the jobs with one are in them, so that
    # neither costs the others an entry, and a prune's SET NULL reads no other job.
    models.Index(
        fields=["created_by"],
        condition=models.Q(created_by__isnull=False),
        name="durajobs_created_by",
    ),
    models.Index(fields=["rerun_of"], condition=models.Q(rerun_of__isnull=False), name="durajobs_rerun_of"),
]
