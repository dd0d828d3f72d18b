"""The hot path's SQL, written once per database and kept.

A worker runs the same few statements for every job: claim, checkpoint, finish. Building each
through the ORM costs more than the round trip to the database, so the text of each statement
is made once (per database alias and shape) and reused with new parameters. Values still pass
through the fields' own conversions both ways, so what is written and read back is exactly
what the ORM would write and read.
"""

from __future__ import annotations

import re
import threading
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from datetime import datetime
from functools import cache
from typing import Any, TypeVar
from weakref import WeakKeyDictionary

from django.db import DEFAULT_DB_ALIAS, connections
from django.db.backends.base.base import BaseDatabaseWrapper
from django.db.models import Model
from django.db.models.sql import UpdateQuery

from .conf import get_setting

M = TypeVar("M", bound=Model)
T = TypeVar("T")

_made: dict[tuple, Any] = {}
#: Keys are shapes (field names, counts of parameters), not values; this only guards against a
#: caller that puts varying expressions in a statement.
MAX_KEPT = 2000

#: Django's "%s" placeholders (not "%%s") as sqlite3 takes them.
_FORMAT_PLACEHOLDER = re.compile(r"(?<!%)%s")


def database() -> BaseDatabaseWrapper:
    """This thread's default connection (``django.db.connection`` looks it up on every attribute)."""
    return connections[DEFAULT_DB_ALIAS]


def kept(db: BaseDatabaseWrapper, key: tuple, make: Callable[[], T]) -> T:
    """``make()`` the first time ``key`` is asked for on this database, the kept value after."""
    full_key = (db.alias, db.vendor, *key)
    try:
        return _made[full_key]
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


def statement(db: BaseDatabaseWrapper, key: tuple, make: Callable[[], str]) -> Statement:
    """The kept ``Statement`` that ``make()`` writes (with Django's ``%s`` placeholders)."""

    def made() -> Statement:
        text = make()
        native = _FORMAT_PLACEHOLDER.sub("?", text).replace("%%", "%") if db.vendor == "sqlite" else text
        return Statement(text, native)

    return kept(db, ("statement", *key), made)


def run(db: BaseDatabaseWrapper, statement: Statement, params: Sequence[Any]) -> int:
    """Execute ``statement``; the number of rows it changed."""
    return _execute(db, statement, params, lambda cursor: cursor.rowcount)


def fetch(db: BaseDatabaseWrapper, statement: Statement, params: Sequence[Any]) -> list[tuple]:
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
        db.vendor == "postgresql" and db.Database.__name__ == "psycopg" and get_setting("PREPARED_STATEMENTS")
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


def _preparing_cursor(db: BaseDatabaseWrapper) -> Any:
    """This connection's cursor for these statements, made once: a cursor keeps what it learnt
    about converting each type of parameter and result, which a new one would learn again."""
    raw = db.connection
    cursor = _cursors.get(raw)
    if cursor is None or cursor.closed:
        if raw.prepare_threshold is None:  # Django's default: psycopg would then prepare nothing
            raw.prepare_threshold = NOT_BY_COUNT
        cursor = _preparing_cursor_class(db.Database)(raw)
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
    class PreparingCursor(psycopg.Cursor):
        """Prepares what it executes, however ``prepare_threshold`` is set."""

        def execute(self, query, params=None, *, prepare=None, binary=None):
            return super().execute(query, params, prepare=prepare is not False, binary=binary)

    return PreparingCursor


# Names and values ------------------------------------------------------------------------------


def table(db: BaseDatabaseWrapper, model: type[Model]) -> str:
    return db.ops.quote_name(model._meta.db_table)


def columns(db: BaseDatabaseWrapper, model: type[Model]) -> str:
    """Every column of ``model``, in the order ``read_rows`` expects them."""
    return ", ".join(db.ops.quote_name(field.column) for field in model._meta.concrete_fields)


#: Fields whose value, when it is already a str, an int, a bool or None, goes to the driver as it is.
_PLAIN = frozenset(
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
    field = model._meta.get_field(name)
    target = field.target_field if field.is_relation else field
    internal_type = target.get_internal_type()
    if internal_type in _PLAIN and not field.is_relation:

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
                return db.ops.adapt_datetimefield_value(value)
            return field.get_db_prep_save(value, connection=db)

        return prepare_moment
    return lambda value, db: field.get_db_prep_save(value, connection=db)


def _kept_preparer(
    db: BaseDatabaseWrapper, model: type[Model], name: str
) -> Callable[[Any, BaseDatabaseWrapper], Any]:
    return kept(db, ("prepare", model._meta.label, name), lambda: _preparer(model, name))


def prepared_datetime(db: BaseDatabaseWrapper, value: Any) -> Any:
    return db.ops.adapt_datetimefield_value(value)


def _converters(db: BaseDatabaseWrapper, model: type[Model]) -> list[tuple[int, list, Any]]:
    table_name = model._meta.db_table
    found = []
    for index, field in enumerate(model._meta.concrete_fields):
        col = field.get_col(table_name)
        functions = db.ops.get_db_converters(col) + field.get_db_converters(db)
        if functions:
            found.append((index, functions, col))
    return found


def read_rows(db: BaseDatabaseWrapper, model: type[M], rows: Iterable[Sequence[Any]]) -> list[M]:
    """Model instances from rows of ``columns(model)``, converted as a queryset would convert them."""
    converters = kept(db, ("converters", model._meta.label), lambda: _converters(db, model))
    instances = []
    for row in rows:
        values = list(row)
        for index, functions, col in converters:
            value = values[index]
            for function in functions:
                value = function(value, col, db)
            values[index] = value
        instances.append(model.from_db(db.alias, None, values))
    return instances


# UPDATE … SET ----------------------------------------------------------------------------------


@dataclass(frozen=True)
class Assignments:
    """The ``SET`` list for one shape of values, and what fills each of its placeholders."""

    sql: str
    #: Per placeholder: the name of the field whose value goes there and how to prepare it, or
    #: None and a constant parameter of an expression.
    slots: tuple[tuple[str | None, Any], ...]


def _assignments(
    db: BaseDatabaseWrapper, model: type[Model], shape: tuple[tuple[str, Any], ...]
) -> Assignments:
    query = UpdateQuery(model)
    compiler = query.get_compiler(connection=db)
    parts: list[str] = []
    slots: list[tuple[str | None, Any]] = []
    for name, expression in shape:
        target = db.ops.quote_name(model._meta.get_field(name).column)
        if expression is None:
            parts.append(f"{target} = %s")
            slots.append((name, _kept_preparer(db, model, name)))
            continue
        resolved = expression.resolve_expression(query, allow_joins=False, for_save=True)
        sql, params = compiler.compile(resolved)
        parts.append(f"{target} = {sql}")
        slots.extend((None, param) for param in params)
    return Assignments(", ".join(parts), tuple(slots))


def assignments(
    db: BaseDatabaseWrapper, model: type[Model], values: dict[str, Any]
) -> tuple[Assignments, list]:
    """The ``SET`` list of an ``UPDATE`` of ``model`` to ``values``, and its parameters.

    ``values`` holds plain values, prepared as their fields prepare them, or constant
    expressions (``F("attempt") - 1``, a database function), compiled once.
    """
    shape = tuple(
        (name, value if hasattr(value, "resolve_expression") else None) for name, value in values.items()
    )
    made = kept(db, ("set", model._meta.label, shape), lambda: _assignments(db, model, shape))
    params = [fill if name is None else fill(values[name], db) for name, fill in made.slots]
    return made, params
