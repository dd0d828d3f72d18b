"""An index the model declares that Django's ``Index`` cannot say for every database at once."""

from __future__ import annotations

from typing import Any

from django.db import models


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
