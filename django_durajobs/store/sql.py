"""The hot path's SQL, written once per database and kept.

A worker runs the same few statements for every job: claim, checkpoint, finish. Building each
through the ORM costs more than the round trip to the database, so the text of each statement
is made once (per database alias and shape) and reused with new parameters. Values still pass
through the fields' own conversions both ways, so what is written and read back is exactly
what the ORM would write and read.

Over 400 lines: each hot-path statement is written for every database here, so that they read side
by side.
"""

from __future__ import annotations

import re
import threading
from collections.abc import Callable, Iterable, Sequence
from contextlib import AbstractContextManager
from dataclasses import dataclass
from datetime import UTC, datetime
from functools import cache
from types import ModuleType
from typing import Any, TypeVar, cast
from weakref import WeakKeyDictionary

from django.db import connections
from django.db import transaction as django_transaction
from django.db.backends.base.base import BaseDatabaseWrapper
from django.db.models import Field, Model
from django.db.models.base import ModelState
from django.db.models.fields.related import RelatedField
from django.db.models.signals import post_init, pre_init

from ..conf import get_setting, jobs_database
from . import pooling

M = TypeVar("M", bound=Model)
T = TypeVar("T")

_made: dict[tuple[Any, ...], Any] = {}
#: Keys are shapes (field names, counts of parameters), not values; this only guards against a
#: caller that puts varying expressions in a statement.
MAX_KEPT = 2000

#: Django's "%s" placeholders (not "%%s") as sqlite3 takes them.
_FORMAT_PLACEHOLDER = re.compile(r"(?<!%)%s")


def database() -> BaseDatabaseWrapper:
    """This thread's connection to the jobs database (``DURAJOBS["DATABASE"]``)."""
    return connections[jobs_database()]


def driver(db: BaseDatabaseWrapper) -> ModuleType:
    """The DB-API module under ``db`` (``psycopg``, ``sqlite3``, ``MySQLdb``…)."""
    module: ModuleType = db.Database  # type: ignore[attr-defined]  # every backend has it; the stubs don't
    return module


def kept(db: BaseDatabaseWrapper, key: tuple[Any, ...], make: Callable[[], T]) -> T:
    """``make()`` the first time ``key`` is asked for on this database, the kept value after."""
    full_key = (db.alias, db.vendor, *key)
    try:
        value: T = _made[full_key]
    except KeyError:
        if len(_made) >= MAX_KEPT:
            _made.clear()
        value = _made[full_key] = make()
    return value


@dataclass(frozen=True)
class Statement:
    """One statement's text: as Django's cursors take it, and as the driver itself takes it."""

    text: str
    native: str


def statement(db: BaseDatabaseWrapper, key: tuple[Any, ...], make: Callable[[], str]) -> Statement:
    """The kept ``Statement`` that ``make()`` writes (with Django's ``%s`` placeholders)."""
    return kept(db, ("statement", *key), lambda: as_statement(db, make()))


def as_statement(db: BaseDatabaseWrapper, text: str) -> Statement:
    """``text`` (with Django's ``%s`` placeholders) as a ``Statement``, for a value kept with others."""
    native = _FORMAT_PLACEHOLDER.sub("?", text).replace("%%", "%") if db.vendor == "sqlite" else text
    return Statement(text, native)


def run(db: BaseDatabaseWrapper, statement: Statement, params: Sequence[Any]) -> int:
    """Execute ``statement``; the number of rows it changed."""
    changed: int = _execute(db, statement, params, lambda cursor: cursor.rowcount)
    return changed


def fetch(db: BaseDatabaseWrapper, statement: Statement, params: Sequence[Any]) -> list[tuple[Any, ...]]:
    """Execute ``statement``; the rows it returned."""
    return _execute(db, statement, params, lambda cursor: cursor.fetchall())


def _execute(
    db: BaseDatabaseWrapper, statement: Statement, params: Sequence[Any], outcome: Callable[[Any], T]
) -> T:
    """Execute ``statement`` and take ``outcome(cursor)``.

    Straight on the driver's cursor, with Django's error translation, unless someone watches
    the queries (``DEBUG``, ``CaptureQueriesContext``, an execute wrapper): then through
    Django's own cursor, so they see these statements too. Unwatched, on PostgreSQL with
    psycopg 3, the parameters are bound on the server and the statement is prepared
    (``PREPARED_STATEMENTS``): the server plans it once per connection instead of once per job.
    Django itself prepares nothing by default, for the sake of poolers in transaction mode; only
    these statements are prepared, not the ORM's nor a job's own queries.
    """
    preparing = (
        db.vendor == "postgresql"
        and db.Database.__name__ == "psycopg"  # type: ignore[attr-defined]  # driver(db), inlined
        and get_setting("PREPARED_STATEMENTS")
        and pooling.preparing_allowed
    )
    if not (db.vendor == "sqlite" or preparing) or db.queries_logged or db.execute_wrappers:
        with db.cursor() as cursor:
            cursor.execute(statement.text, params)
            return outcome(cursor)
    if db.connection is None:
        db.ensure_connection()
    db.validate_no_broken_transaction()
    with db.wrap_database_errors:
        cursor = _preparing_cursor(db) if preparing else db.connection.cursor()
        cursor.execute(statement.native, params)
        return outcome(cursor)


def transaction(
    db: BaseDatabaseWrapper, *, statements_only: bool, immediate: bool = False
) -> AbstractContextManager[None]:
    """A transaction around a block: Django's ``atomic()``, or, for a block that runs only this
    module's statements (``statements_only``) on SQLite outside any transaction, a bare
    ``BEGIN … COMMIT`` on the driver; ``immediate``: ``BEGIN IMMEDIATE``, which locks the database
    for writing before the block reads anything.

    On SQLite Django's ``atomic()`` costs more than the few statements a worker wraps in it
    (switching the connection out of autocommit and back, its bookkeeping). The ORM must not run
    inside the bare one: Django would not know a transaction is open.
    """
    if (
        statements_only
        and db.vendor == "sqlite"
        and not (db.in_atomic_block or db.queries_logged or db.execute_wrappers)
    ):
        return _BareTransaction(db, immediate)
    return django_transaction.atomic(using=db.alias)


class _BareTransaction:
    def __init__(self, db: BaseDatabaseWrapper, immediate: bool) -> None:
        self.db = db
        self.immediate = immediate

    def __enter__(self) -> None:
        db = self.db
        db.ensure_connection()
        # SQLite's wrapper has the OPTIONS' transaction_mode; the stubs lack it.
        mode = "IMMEDIATE" if self.immediate else db.transaction_mode or ""  # type: ignore[attr-defined]
        begin = kept(db, ("begin", mode), lambda: f"BEGIN {mode}".strip())
        with db.wrap_database_errors:
            db.connection.execute(begin)

    def __exit__(self, exc_type: Any, exc: Any, traceback: Any) -> None:
        raw = self.db.connection
        with self.db.wrap_database_errors:
            try:
                if exc_type is None:
                    raw.commit()
            finally:
                if raw.in_transaction:  # the block failed, or the commit did
                    raw.rollback()


def _preparing_cursor(db: BaseDatabaseWrapper) -> Any:
    """This connection's cursor for these statements, made once: a cursor keeps what it learnt
    about converting each type of parameter and result, which a new one would learn again."""
    raw = db.connection
    cursor = _cursors.get(raw)
    if cursor is None or cursor.closed:
        if not pooling.may_prepare_on(raw):  # through a pooler, or not to be told inside a transaction
            return raw.cursor()
        if raw.prepare_threshold is None:  # Django's default: psycopg would then prepare nothing
            raw.prepare_threshold = NOT_BY_COUNT
        cursor = _preparing_cursor_class(driver(db))(raw)
        with _cursors_lock:
            _cursors[raw] = cursor
    return cursor


#: Per psycopg connection (each thread has its own), its cursor for these statements.
_cursors: WeakKeyDictionary[Any, Any] = WeakKeyDictionary()
_cursors_lock = threading.Lock()


#: A ``prepare_threshold`` that no count of runs reaches: psycopg prepares only what is
#: executed with ``prepare=True``, as these statements are.
NOT_BY_COUNT = 2**62


@cache
def _preparing_cursor_class(psycopg: Any) -> type:
    # psycopg is optional, so its Cursor is known only at run time.
    class PreparingCursor(psycopg.Cursor):  # type: ignore[misc]
        """Prepares what it executes, however ``prepare_threshold`` is set."""

        def execute(
            self, query: Any, params: Any = None, *, prepare: bool | None = None, binary: bool | None = None
        ) -> Any:
            return super().execute(query, params, prepare=prepare is not False, binary=binary)

    return PreparingCursor


# Names and values ------------------------------------------------------------------------------


def table(db: BaseDatabaseWrapper, model: type[Model]) -> str:
    return db.ops.quote_name(model._meta.db_table)


def index_hint(db: BaseDatabaseWrapper, index: str, vendor: str) -> str:
    """Where ``db`` is ``vendor``'s, the words that make its planner read ``index``: `` INDEXED BY``
    on SQLite, `` FORCE INDEX (…)`` on MariaDB/MySQL; elsewhere none."""
    if db.vendor != vendor:
        return ""
    quoted = db.ops.quote_name(index)
    return f" INDEXED BY {quoted}" if vendor == "sqlite" else f" FORCE INDEX ({quoted})"


def status_in(db: BaseDatabaseWrapper, statuses: tuple[str, ...]) -> str:
    """``"status" IN ('a', 'b')``, as a partial index's condition names them: SQLite reads such an
    index only for its condition word for word, not one with parameters (nor can PostgreSQL's
    generic plan)."""
    listed = ", ".join(f"'{status}'" for status in statuses)
    return f"{db.ops.quote_name('status')} IN ({listed})"


def concrete_field(model: type[Model], name: str) -> Field[Any, Any]:
    """``model``'s field ``name``, one with a column (not the far side of a relation)."""
    field = model._meta.get_field(name)
    if not isinstance(field, Field):
        raise TypeError(f"{model.__name__}.{name} has no column of its own")
    return field


def column(field: Field[Any, Any]) -> str:
    """A concrete field's column: the stubs allow None, which only a field without a column has."""
    return cast(str, field.column)


def columns(db: BaseDatabaseWrapper, model: type[Model]) -> str:
    """Every column of ``model``, in the order ``read_rows`` expects them."""
    return ", ".join(db.ops.quote_name(column(field)) for field in model._meta.concrete_fields)


def returned_columns(db: BaseDatabaseWrapper, model: type[Model]) -> str:
    """``columns(model)`` for a ``RETURNING`` or ``SELECT`` whose rows go to ``read_rows``.

    On SQLite a column whose declared type has a converter in the driver (Django registers
    them for ``datetime`` and ``bool``) is written ``+column``: the unary plus returns the
    value as stored but hides the declared type, so the driver hands over the text and
    ``read_rows`` converts it once, as the field does, instead of the driver's converter
    first (a claimed job has seven such columns).
    """
    if db.vendor != "sqlite":
        return columns(db, model)
    import sqlite3  # here, not above: a Python without it still serves the other databases

    converted = {name.upper() for name in sqlite3.converters}
    return ", ".join(
        ("+" if (field.db_type(db) or "").upper() in converted else "") + db.ops.quote_name(column(field))
        for field in model._meta.concrete_fields
    )


#: Fields whose value, when it is already a str, an int, a bool or None, goes to the driver as it is.
PLAIN_FIELD_TYPES = frozenset(
    {
        "AutoField",
        "BigAutoField",
        "BigIntegerField",
        "BooleanField",
        "CharField",
        "IntegerField",
        "PositiveIntegerField",
        "PositiveSmallIntegerField",
        "SmallIntegerField",
        "TextField",
    }
)
_AS_IS = (str, int, type(None))


def _preparer(model: type[Model], name: str) -> Callable[[Any, BaseDatabaseWrapper], Any]:
    field = concrete_field(model, name)
    target = field.target_field if isinstance(field, RelatedField) else field
    internal_type = target.get_internal_type()
    if internal_type in PLAIN_FIELD_TYPES and not field.is_relation:

        def prepare(value: Any, db: BaseDatabaseWrapper) -> Any:
            if type(value) in _AS_IS or value is True or value is False:
                return value
            return field.get_db_prep_save(value, connection=db)

        return prepare
    if internal_type == "DateTimeField":

        def prepare_moment(value: Any, db: BaseDatabaseWrapper) -> Any:
            if value is None:
                return None
            if type(value) is datetime and value.tzinfo is not None:
                return prepared_datetime(db, value)
            return field.get_db_prep_save(value, connection=db)

        return prepare_moment
    return lambda value, db: field.get_db_prep_save(value, connection=db)


def kept_preparer(
    db: BaseDatabaseWrapper, model: type[Model], name: str
) -> Callable[[Any, BaseDatabaseWrapper], Any]:
    return kept(db, ("prepare", model, name), lambda: _preparer(model, name))


def preparers(
    db: BaseDatabaseWrapper, model: type[Model], names: Iterable[str]
) -> list[Callable[[Any, BaseDatabaseWrapper], Any]]:
    """For each field of ``names``: what makes its value the driver's, as the ORM's save would."""
    return [kept_preparer(db, model, name) for name in names]


def prepared_datetime(db: BaseDatabaseWrapper, value: Any) -> Any:
    """``value`` as the driver takes it, as Django's ``adapt_datetimefield_value`` makes it.

    Where the database takes moments as text in UTC (SQLite, MySQL with Django's defaults), a
    moment already in UTC needs only its time zone dropped: the worker writes several per job.
    """
    global _last_moment
    if type(value) is datetime and value.tzinfo is UTC and db.vendor in _TEXT_MOMENTS and db.timezone is UTC:
        last = _last_moment
        if last[0] is value:  # a finish writes its moment more than once, and claims with it
            return last[1]
        text = value.isoformat(" ")[:-6]  # as str() of it without its "+00:00"
        _last_moment = (value, text)
        return text
    return db.ops.adapt_datetimefield_value(value)


#: The last moment ``prepared_datetime`` wrote as text, and that text (datetimes are immutable).
_last_moment: tuple[Any, str] = (None, "")


_TEXT_MOMENTS = frozenset({"sqlite", "mysql"})


def read_moment(value: Any, expression: Any, db: BaseDatabaseWrapper) -> Any:
    """A moment as Django's ``convert_datetimefield_value`` reads it: where the driver hands
    over a naive moment in UTC (MySQL), or its text (SQLite, ``returned_columns``), it only needs
    parsing and its time zone; a claimed row has five."""
    if db.timezone is UTC:
        if type(value) is str:
            try:
                value = datetime.fromisoformat(value)
            except ValueError:  # not as Django writes moments: Django reads it below
                pass
        if type(value) is datetime and value.tzinfo is None:
            return datetime.combine(value.date(), value.time(), UTC)  # replace(tzinfo=) is slower
    # Only the backends that store moments as text (SQLite, MySQL) have it, and only theirs come here.
    return db.ops.convert_datetimefield_value(value, expression, db)  # type: ignore[attr-defined]


def _converters(db: BaseDatabaseWrapper, model: type[Model]) -> list[tuple[int, list[Any], Any]]:
    table_name = model._meta.db_table
    found = []
    for index, field in enumerate(model._meta.concrete_fields):
        col = field.get_col(table_name)
        functions = db.ops.get_db_converters(col) + field.get_db_converters(db)
        if db.vendor in _TEXT_MOMENTS:
            django_reading = getattr(db.ops, "convert_datetimefield_value", None)
            functions = [read_moment if function == django_reading else function for function in functions]
        if functions:
            found.append((index, functions, col))
    return found


def read_rows(db: BaseDatabaseWrapper, model: type[M], rows: Iterable[Sequence[Any]]) -> list[M]:
    """Model instances from rows of ``columns(model)``, converted as a queryset would convert them."""
    converters = kept(db, ("converters", model), lambda: _converters(db, model))
    rows_of_values = []
    for row in rows:
        values = list(row)
        for index, functions, col in converters:
            value = values[index]
            if value is None:  # what every converter of these models makes of NULL
                continue
            for function in functions:
                value = function(value, col, db)
            values[index] = value
        rows_of_values.append(values)
    return instances(db, model, rows_of_values)


def instances(db: BaseDatabaseWrapper, model: type[M], rows_of_values: Iterable[list[Any]]) -> list[M]:
    """Model instances from the values of every concrete field (in field order), as read from the
    database: built as ``Model.__init__`` builds them, without sending ``pre_init`` and
    ``post_init`` when nothing listens to them for ``model`` (a claim reads a row per job, an
    ``enqueue_many`` makes a thousand)."""
    attnames = kept(db, ("attnames", model), lambda: _attnames(model))
    if pre_init.has_listeners(model) or post_init.has_listeners(model):
        return [model.from_db(db.alias, attnames, values) for values in rows_of_values]
    made = []
    for values in rows_of_values:
        instance = model.__new__(model)
        state = instance._state = ModelState()
        state.adding, state.db = False, db.alias
        instance.__dict__.update(zip(attnames, values, strict=True))
        made.append(instance)
    return made


def _attnames(model: type[Model]) -> tuple[str, ...]:
    return tuple(field.attname for field in model._meta.concrete_fields)
