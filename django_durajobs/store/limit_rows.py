"""The rows of limits (``JobLimit``) that a claim under limits locks, makes and records starts in,
and the take of a job whose one limit is its key (``limiting.py`` says when each is used)."""

from __future__ import annotations

from datetime import UTC, datetime

from django.db.backends.base.base import BaseDatabaseWrapper

from ..limits import RateLimit
from ..models import Job, JobLimit
from ..transitions import HELD_STATUSES
from . import set_lists, sql
from .claiming import take_statement

Scope = tuple[str, str]  # (JobLimit.Scope, name)
#: The statuses of the jobs a worker holds, in a fixed order (statements' parameters).
HELD = sorted(HELD_STATUSES)


def held_in_due(db: BaseDatabaseWrapper) -> str:
    """SQLite's hint that a count of held jobs reads ``durajobs_due`` by their statuses: without
    ``STAT4`` its planner takes a status for as common as any and scans the table, or another
    index, past every job held back or done instead."""
    return sql.index_hint(db, "durajobs_due", "sqlite")


def lock_rows(db: BaseDatabaseWrapper, scopes: list[Scope]) -> dict[Scope, JobLimit]:
    """Lock the rows of ``scopes`` (sorted), in their order; the ones that exist."""

    def lock_sql() -> str:
        quote = db.ops.quote_name
        each = " OR ".join([f"({quote('scope')} = %s AND {quote('name')} = %s)"] * len(scopes))
        for_update = " FOR UPDATE" if db.features.has_select_for_update else ""
        return (
            f"SELECT {sql.returned_columns(db, JobLimit)} FROM {sql.table(db, JobLimit)} WHERE {each} "
            f"ORDER BY {quote('scope')}, {quote('name')}{for_update}"
        )

    statement = sql.statement(db, ("lock limits", len(scopes)), lock_sql)
    rows = sql.fetch(db, statement, [part for scope in scopes for part in scope])
    return {(row.scope, row.name): row for row in sql.read_rows(db, JobLimit, rows)}


def locked_rows(
    db: BaseDatabaseWrapper, scopes: list[Scope], make: bool
) -> tuple[dict[Scope, JobLimit], tuple[Scope, ...]]:
    """Lock the rows of ``scopes``; with ``make`` (where the database returns what it inserts), the
    rows not made yet are made in this transaction, which then holds them. Also the scopes whose
    rows are still to be made, or to be locked: another claim made them meanwhile."""
    locked = lock_rows(db, scopes)
    if len(locked) < len(scopes) and make:
        locked |= made_rows(db, tuple(scope for scope in scopes if scope not in locked))
    return locked, tuple(scope for scope in scopes if scope not in locked)


def made_rows(db: BaseDatabaseWrapper, scopes: tuple[Scope, ...]) -> dict[Scope, JobLimit]:
    """Make the rows of ``scopes`` in the claim's transaction, which holds those it inserts until it
    ends; the ones another claim made meanwhile are not returned. A new key costs its first claim
    one statement, not a pick of its own."""
    columns = ("scope", "name", "starts")
    prepare_starts = sql.preparers(db, JobLimit, ["starts"])[0]

    def insert_sql() -> str:
        quote = db.ops.quote_name
        rows = ", ".join(["(%s, %s, %s)"] * len(scopes))
        return (
            f"INSERT INTO {sql.table(db, JobLimit)} ({', '.join(quote(name) for name in columns)}) "
            f"VALUES {rows} ON CONFLICT DO NOTHING RETURNING {sql.returned_columns(db, JobLimit)}"
        )

    statement = sql.statement(db, ("make limits", len(scopes)), insert_sql)
    params = [value for scope, name in scopes for value in (scope, name, prepare_starts([], db))]
    rows = sql.fetch(db, statement, params)
    return {(row.scope, row.name): row for row in sql.read_rows(db, JobLimit, rows)}


def hold_rows(db: BaseDatabaseWrapper, scopes: list[Scope]) -> None:
    """Make the rows of ``scopes`` (sorted), or lock those made already, in one statement, where
    the claim reads nothing in them (a key's: the take counts its jobs). On PostgreSQL an insert
    whose conflict ``DO UPDATE … WHERE FALSE`` locks the row it updates nothing in, as ``FOR
    UPDATE`` would; SQLite's claim holds the database already. A new key costs its claim one
    statement, not a lock that finds nothing and an insert."""
    prepare_starts = sql.preparers(db, JobLimit, ["starts"])[0]

    def upsert_sql() -> str:
        quote = db.ops.quote_name
        columns = ", ".join(quote(name) for name in ("scope", "name", "starts"))
        rows = ", ".join(["(%s, %s, %s)"] * len(scopes))
        scope = quote("scope")
        return (
            f"INSERT INTO {sql.table(db, JobLimit)} ({columns}) VALUES {rows} "
            f"ON CONFLICT ({scope}, {quote('name')}) DO UPDATE SET {scope} = EXCLUDED.{scope} WHERE FALSE"
        )

    params = [value for scope, name in scopes for value in (scope, name, prepare_starts([], db))]
    sql.run(db, sql.statement(db, ("hold limits", len(scopes)), upsert_sql), params)


def at_rate(row: JobLimit, rate: RateLimit, moment: datetime) -> dict[str, datetime]:
    """``{kind: until}`` when the kind's latest starts fill its rate at ``moment``, else ``{}``."""
    latest = row.starts[-rate.starts :]
    if len(latest) < rate.starts or latest[0] + rate.seconds <= moment.timestamp():
        return {}
    return {row.name: datetime.fromtimestamp(latest[0] + rate.seconds, UTC)}


def record_start(db: BaseDatabaseWrapper, row: JobLimit, rate: RateLimit, moment: datetime) -> None:
    """Add a start at ``moment`` to the kind's latest starts, and note until when they fill its rate."""
    latest = [*row.starts, moment.timestamp()][-rate.starts :]
    full_until = datetime.fromtimestamp(latest[0] + rate.seconds, UTC) if len(latest) == rate.starts else None
    assignments, params = set_lists.assignments(db, JobLimit, {"starts": latest, "full_until": full_until})

    def update_sql() -> str:
        return f"UPDATE {sql.table(db, JobLimit)} SET {assignments.sql} WHERE {db.ops.quote_name('id')} = %s"

    sql.run(db, sql.statement(db, ("record start", assignments), update_sql), [*params, row.pk])


def take_under_key(db: BaseDatabaseWrapper, status: str) -> sql.Statement:
    """The take of a job whose one limit is its key, counting the key's held jobs as it takes: a
    statement after the lock, so it counts as ``held_now`` would there, one round trip fewer.
    Its parameters are the take's, the held statuses, the key and its limit."""

    def take_sql() -> str:
        quote = db.ops.quote_name
        statuses = ", ".join(["%s"] * len(HELD))
        return (
            f"{take_statement(db, status).text} "
            f"AND (SELECT COUNT(*) FROM {sql.table(db, Job)}{held_in_due(db)} "
            f"WHERE {quote('status')} IN ({statuses}) AND {quote('locked_by')} <> '' "
            f"AND {quote('concurrency_key')} = %s) < %s"
        )

    return sql.statement(db, ("claim take under key", status), take_sql)
