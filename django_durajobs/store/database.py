"""The database itself: its clock, commits that need not wait for the disk, lease tokens, and
telling a lost connection from a job's own error."""

from __future__ import annotations

import os
import random
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from datetime import UTC, datetime
from typing import Any, TypeVar

from django.db import DEFAULT_DB_ALIAS, InterfaceError, OperationalError, connections, transaction
from django.db.backends.base.base import BaseDatabaseWrapper
from django.db.models import DateTimeField, Func
from django.db.models.sql.compiler import SQLCompiler
from django.utils import timezone

from ..conf import jobs_database
from ..models import Job
from ..redaction import package_logger
from . import sql

logger = package_logger("django_durajobs.store")


class DatabaseNow(Func):
    """The database server's clock in UTC: leases are judged by one clock, whatever the workers' say."""

    template = "CURRENT_TIMESTAMP"
    output_field = DateTimeField()

    def as_postgresql(
        self, compiler: SQLCompiler, connection: BaseDatabaseWrapper, **extra: Any
    ) -> tuple[str, list[Any]]:
        return "STATEMENT_TIMESTAMP()", []

    def as_mysql(
        self, compiler: SQLCompiler, connection: BaseDatabaseWrapper, **extra: Any
    ) -> tuple[str, list[Any]]:
        return "UTC_TIMESTAMP(6)", []

    # Parameters in a list, as Django 5.2's own expressions give them (the stubs say a tuple, as 6's).
    def as_sqlite(  # type: ignore[override]
        self, compiler: SQLCompiler, connection: BaseDatabaseWrapper, **extra: Any
    ) -> tuple[str, list[Any]]:
        return "STRFTIME('%%Y-%%m-%%d %%H:%%M:%%f', 'NOW')", []


def database_now_sql(db: BaseDatabaseWrapper) -> str:
    """``DatabaseNow()`` as SQL text for this database."""

    def compiled() -> str:
        compiler = Job.objects.none().query.get_compiler(connection=db)
        text: str = compiler.compile(DatabaseNow())[0]
        return text

    return sql.kept(db, ("now",), compiled)


def database_now() -> datetime:
    """The database server's current time, as an aware datetime."""
    db = sql.database()
    with db.cursor() as cursor:
        cursor.execute(f"SELECT {database_now_sql(db)}", [])
        raw = cursor.fetchone()[0]
    if isinstance(raw, str):
        raw = datetime.fromisoformat(raw)
    return raw if timezone.is_aware(raw) else timezone.make_aware(raw, UTC)


@contextmanager
def step_transaction() -> Iterator[None]:
    """The transaction of an ``atomic=True`` step: its own rows and its checkpoint together.

    With a jobs database of its own (``DATABASE``), no commit spans both: the step's rows (on
    ``default``) commit first, then its checkpoint. A crash between the two commits runs the
    step again, as it would a step without ``atomic``; a step that fails rolls back both.
    """
    jobs = jobs_database()
    if jobs == DEFAULT_DB_ALIAS:
        with transaction.atomic():
            yield
        return
    with transaction.atomic(using=jobs), transaction.atomic(using=DEFAULT_DB_ALIAS):
        yield


_warned_outside = False


def warn_if_outside_callers_transaction() -> None:
    """Say once per process that a job enqueued inside a transaction of ``default`` is not part
    of it when the jobs live in a database of their own: it stays, and may even start, whatever
    that transaction does (``transaction.on_commit(lambda: enqueue(...))`` waits for it)."""
    global _warned_outside
    if _warned_outside or jobs_database() == DEFAULT_DB_ALIAS:
        return
    if connections[DEFAULT_DB_ALIAS].in_atomic_block and not sql.database().in_atomic_block:
        _warned_outside = True
        logger.warning(
            "A job was enqueued inside a transaction of the 'default' database, but jobs live in "
            "the database %r (DURAJOBS['DATABASE']): the job is committed now, whatever that "
            "transaction does. Enqueue in transaction.on_commit() to wait for it.",
            jobs_database(),
        )


#: PostgreSQL: a condition that makes the statement's commit not wait for the disk (see ``no_flush``).
NO_FLUSH = " AND set_config('synchronous_commit', 'off', true) IS NOT NULL"


def no_flush(db: BaseDatabaseWrapper) -> str:
    """``NO_FLUSH`` where a statement that marks work as taken or under way may use it, else "".

    On PostgreSQL, outside a transaction, a claim and a step marked running commit without
    waiting for the write-ahead log to reach the disk. Only a crash of the database server can
    lose such a commit (the last few hundred milliseconds of them, ``wal_writer_delay`` × 3),
    and losing it puts the job back as it was before: queued, or its step pending. Its worker's
    next write, fenced by the lease token, is then refused, and the job runs again after its last
    finished step, as after a lost worker. Every checkpoint and outcome still waits for the
    disk, and so makes everything committed before it durable too. Inside a transaction the
    setting would cover the caller's own writes: there the statement waits as usual.
    """
    if db.vendor == "postgresql" and not db.in_atomic_block:
        return NO_FLUSH
    return ""


#: Lease tokens need to be unique, not secret (whoever can read them can write the rows they
#: fence): each process draws them from a generator of its own, seeded by the OS, again in a
#: forked child. A token from ``secrets`` costs a system call, and a worker takes one per job.
_tokens = random.Random()
os.register_at_fork(after_in_child=_tokens.seed)


def new_token() -> str:
    return f"{_tokens.getrandbits(128):032x}"


# MySQL client errors that mean the connection is gone: can't connect (2002, 2003), server has
# gone away (2006), lost during query (2013), lost reading (2055), shutdown (1053), killed
# (1927), disconnected for inactivity (4031).
MYSQL_CONNECTION_LOST = frozenset({1053, 1927, 2002, 2003, 2006, 2013, 2055, 4031})


def database_trouble(exc: BaseException) -> bool:
    """True when ``exc`` means the database connection is gone, not that the job went wrong.

    Judged by the driver's error: after a session dies inside ``transaction.atomic()``, Django
    has already opened a fresh connection, so asking the connection would say all is well.
    """
    if isinstance(exc, InterfaceError):
        return True
    if not isinstance(exc, OperationalError):
        return False
    cause = exc.__cause__
    connection = sql.database()
    if connection.vendor == "postgresql":
        sqlstate = getattr(cause, "sqlstate", None)
        # No SQLSTATE: the client lost the server. 08: connection exceptions. 57P: the server
        # shut down or terminated the session (57014, a cancelled statement, is the job's own).
        return sqlstate is None or sqlstate.startswith(("08", "57P"))
    if connection.vendor == "mysql":
        code = cause.args[0] if cause is not None and cause.args else None
        return code in MYSQL_CONNECTION_LOST
    try:
        return connection.connection is None or not connection.is_usable()
    except Exception:
        return True


def deadlock(error: BaseException) -> bool:
    """The database rolled a write back as a deadlock's victim (1213 on MySQL/MariaDB, 40P01 on
    PostgreSQL): concurrent inserts of one unique key, or a claim meeting another worker's finish."""
    if not isinstance(error, OperationalError):
        return False
    return bool(error.args and error.args[0] == 1213) or "deadlock" in str(error).lower()


def outside_callers_transaction() -> bool:
    """No transaction of the caller's is open: a statement that failed undid nothing of theirs."""
    return not sql.database().in_atomic_block


#: How often a write is made in all when the database keeps making it a deadlock's victim.
DEADLOCK_TRIES = 5

Made = TypeVar("Made")


def made_despite_deadlocks(write: Callable[[bool], Made]) -> Made:
    """``write(first)``, made again while the database makes it a deadlock's victim; ``first`` is
    False on a later try, so that the write may leave out what it risked the deadlock for.

    InnoDB rolls back the victim's whole transaction. Outside a caller's transaction that is only
    the write, which may simply be made again; inside one it is theirs too, and so is the retry.
    """
    for tries in range(1, DEADLOCK_TRIES):
        try:
            return write(tries == 1)
        except OperationalError as error:
            if not deadlock(error) or not outside_callers_transaction():
                raise
    return write(False)
