"""The hot path's SQL, written once per database and kept.

A worker runs the same few statements for every job: claim, checkpoint, finish. Building each
through the ORM costs more than the round trip to the database, so the text of each statement
is made once (per database alias and shape) and reused with new parameters. Values still pass
through the fields' own conversions both ways, so what is written and read back is exactly
what the ORM would write and read.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from functools import cache
from typing import Any, TypeVar

from django.db.backends.base.base import BaseDatabaseWrapper
from django.db.backends.utils import CursorWrapper
from django.db.models import Model
from django.db.models.sql import UpdateQuery

from .conf import get_setting

M = TypeVar("M", bound=Model)
T = TypeVar("T")

_made: dict[tuple, Any] = {}
#: Keys are shapes (field names, counts of parameters), not values; this only guards against a
#: caller that puts varying expressions in a statement.
MAX_KEPT = 2000


def kept(connection: BaseDatabaseWrapper, key: tuple, make: Callable[[], T]) -> T:
    """``make()`` the first time ``key`` is asked for on this database, the kept value after."""
    full_key = (connection.alias, connection.vendor, *key)
    try:
        return _made[full_key]
    except KeyError:
        if len(_made) >= MAX_KEPT:
            _made.clear()
        value = _made[full_key] = make()
        return value


def cursor(connection: BaseDatabaseWrapper) -> CursorWrapper:
    """A cursor for these statements: Django's own, except that on PostgreSQL with psycopg 3 it
    binds parameters on the server and prepares each statement (``PREPARED_STATEMENTS``).

    The server then plans a statement once per connection instead of once per job. Django
    itself prepares nothing by default, for the sake of poolers in transaction mode; only these
    statements are prepared, not the ORM's nor a job's own queries.
    """
    wrapper = connection.cursor()
    if (
        connection.vendor == "postgresql"
        and connection.Database.__name__ == "psycopg"
        and get_setting("PREPARED_STATEMENTS")
    ):
        raw = connection.connection
        if raw.prepare_threshold is None:  # Django's default: psycopg would then prepare nothing
            raw.prepare_threshold = NOT_BY_COUNT
        wrapper.cursor = _preparing_cursor(connection.Database)(raw)
    return wrapper


#: A ``prepare_threshold`` that no count of runs reaches: psycopg prepares only what is
#: executed with ``prepare=True``, as these statements are.
NOT_BY_COUNT = 2**62


@cache
def _preparing_cursor(psycopg: Any) -> type:
    class PreparingCursor(psycopg.Cursor):
        """Prepares what it executes, however ``prepare_threshold`` is set."""

        def execute(self, query, params=None, *, prepare=None, binary=None):
            return super().execute(query, params, prepare=prepare is not False, binary=binary)

    return PreparingCursor


def quote(connection: BaseDatabaseWrapper, name: str) -> str:
    return connection.ops.quote_name(name)


def table(connection: BaseDatabaseWrapper, model: type[Model]) -> str:
    return quote(connection, model._meta.db_table)


def columns(connection: BaseDatabaseWrapper, model: type[Model]) -> str:
    """Every column of ``model``, in the order ``read_rows`` expects them."""
    return kept(
        connection,
        ("columns", model._meta.label),
        lambda: ", ".join(quote(connection, field.column) for field in model._meta.concrete_fields),
    )


def column(connection: BaseDatabaseWrapper, model: type[Model], name: str) -> str:
    return quote(connection, model._meta.get_field(name).column)


def prepared(connection: BaseDatabaseWrapper, model: type[Model], name: str, value: Any) -> Any:
    """``value`` for field ``name`` as the driver takes it (JSON adapted, datetimes as the backend stores them)."""
    return model._meta.get_field(name).get_db_prep_save(value, connection=connection)


def prepared_datetime(connection: BaseDatabaseWrapper, value: Any) -> Any:
    return connection.ops.adapt_datetimefield_value(value)


def _converters(connection: BaseDatabaseWrapper, model: type[Model]) -> list[tuple[int, list, Any]]:
    table_name = model._meta.db_table
    found = []
    for index, field in enumerate(model._meta.concrete_fields):
        col = field.get_col(table_name)
        functions = connection.ops.get_db_converters(col) + field.get_db_converters(connection)
        if functions:
            found.append((index, functions, col))
    return found


def read_rows(connection: BaseDatabaseWrapper, model: type[M], rows: Iterable[Sequence[Any]]) -> list[M]:
    """Model instances from rows of ``columns(model)``, converted as a queryset would convert them."""
    converters = kept(connection, ("converters", model._meta.label), lambda: _converters(connection, model))
    instances = []
    for row in rows:
        values = list(row)
        for index, functions, col in converters:
            value = values[index]
            for function in functions:
                value = function(value, col, connection)
            values[index] = value
        instances.append(model.from_db(connection.alias, None, values))
    return instances


def _set_clause(
    connection: BaseDatabaseWrapper, model: type[Model], shape: tuple[tuple[str, Any], ...]
) -> tuple[str, list[tuple[str, Any]]]:
    """``"a" = %s, "b" = <expression>`` and, per placeholder, the field name or the expression's
    own constant parameter."""
    query = UpdateQuery(model)
    compiler = query.get_compiler(connection=connection)
    parts: list[str] = []
    slots: list[tuple[str, Any]] = []
    for name, expression in shape:
        target = quote(connection, model._meta.get_field(name).column)
        if expression is None:
            parts.append(f"{target} = %s")
            slots.append(("value", name))
            continue
        resolved = expression.resolve_expression(query, allow_joins=False, for_save=True)
        sql, params = compiler.compile(resolved)
        parts.append(f"{target} = {sql}")
        slots.extend(("constant", param) for param in params)
    return ", ".join(parts), slots


def set_clause(connection: BaseDatabaseWrapper, model: type[Model], values: dict[str, Any]) -> tuple[str, list]:
    """The ``SET`` list of an ``UPDATE`` of ``model`` to ``values`` and its parameters.

    ``values`` holds plain values, prepared as their fields prepare them, or constant
    expressions (``F("attempt") - 1``, a database function), compiled once.
    """
    shape = tuple(
        (name, value if hasattr(value, "resolve_expression") else None) for name, value in values.items()
    )
    sql, slots = kept(connection, ("set", model._meta.label, shape), lambda: _set_clause(connection, model, shape))
    params = [
        prepared(connection, model, ref, values[ref]) if kind == "value" else ref for kind, ref in slots
    ]
    return sql, params
