"""The ``SET`` list of a hot-path ``UPDATE``: made once per shape of its values, then only filled.

A shape is what the values look like apart from themselves: which fields, and for each whether it
is a parameter, an empty value written as a literal (a worker clears a dozen fields per job), or
an expression such as ``F("attempt") + 1``. The statements built on a ``SET`` list are kept by
the same shape (``sql.statement``), so a caller that knows its shape makes nothing per call.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from typing import Any

from django.db.backends.base.base import BaseDatabaseWrapper
from django.db.models import Model
from django.db.models.sql import UpdateQuery

from . import sql

#: A shape: per field name, what its value is (below).
Shape = tuple[tuple[str, Any], ...]

_PARAMETER = None
_NULL = "NULL"
_EMPTY = "''"
#: Types that are surely values, not expressions (asking a value for ``resolve_expression``
#: raises and catches an AttributeError).
_VALUES = frozenset({bool, int, float, datetime, dict, list})


@dataclass(frozen=True, eq=False)  # kept, one per shape: the same object is the same list
class Assignments:
    """The ``SET`` list for one shape of values, and what fills each of its placeholders."""

    sql: str
    #: Per placeholder: the name of the field whose value goes there and how to prepare it, or
    #: None and a constant parameter of an expression.
    slots: tuple[tuple[str | None, Any], ...]

    def parameters(self, values: dict[str, Any], db: BaseDatabaseWrapper) -> list[Any]:
        """The placeholders' parameters for ``values`` (of this list's shape)."""
        return [fill if name is None else fill(values[name], db) for name, fill in self.slots]


def shape(values: dict[str, Any]) -> Shape:
    """The shape of an ``UPDATE`` to ``values``."""
    kinds: list[tuple[str, Any]] = []
    for name, value in values.items():
        kind: Any
        if value is None:
            kind = _NULL
        elif type(value) is str:
            kind = _EMPTY if value == "" else _PARAMETER
        elif type(value) in _VALUES or not hasattr(value, "resolve_expression"):
            kind = _PARAMETER
        else:
            kind = value
        kinds.append((name, kind))
    return tuple(kinds)


def set_list(db: BaseDatabaseWrapper, model: type[Model], of: Shape) -> Assignments:
    """The kept ``SET`` list of an ``UPDATE`` of ``model`` in the shape ``of``."""
    return sql.kept(db, ("set", model, of), lambda: _assignments(db, model, of))


def assignments(
    db: BaseDatabaseWrapper, model: type[Model], values: dict[str, Any]
) -> tuple[Assignments, list[Any]]:
    """The ``SET`` list of an ``UPDATE`` of ``model`` to ``values``, and its parameters.

    ``values`` holds plain values, prepared as their fields prepare them, or constant
    expressions (``F("attempt") - 1``, a database function), compiled once. None and ""
    are written into the statement where that stores the same.
    """
    made = set_list(db, model, shape(values))
    return made, made.parameters(values, db)


def _takes_literal(field: Any, kind: str) -> bool:
    """Whether ``kind`` written as SQL stores what the field would (not for JSON: its None is
    stored as JSON null or SQL NULL as the field decides)."""
    if field.is_relation:
        return kind is _NULL
    internal_type = field.get_internal_type()
    if kind is _EMPTY:
        return internal_type in ("CharField", "TextField")
    return internal_type in sql.PLAIN_FIELD_TYPES or internal_type == "DateTimeField"


def _assignments(db: BaseDatabaseWrapper, model: type[Model], of: Shape) -> Assignments:
    query = UpdateQuery(model)
    compiler = query.get_compiler(connection=db)
    parts: list[str] = []
    slots: list[tuple[str | None, Any]] = []
    for name, kind in of:
        field = sql.concrete_field(model, name)
        target = db.ops.quote_name(sql.column(field))
        literal = kind is _NULL or kind is _EMPTY
        if literal and _takes_literal(field, kind):
            parts.append(f"{target} = {kind}")
            continue
        if literal or kind is _PARAMETER:
            parts.append(f"{target} = %s")
            slots.append((name, sql.kept_preparer(db, model, name)))
            continue
        resolved = kind.resolve_expression(query, allow_joins=False, for_save=True)
        compiled, params = compiler.compile(resolved)
        parts.append(f"{target} = {compiled}")
        slots.extend((None, param) for param in params)
    return Assignments(", ".join(parts), tuple(slots))
