"""Printing for the terminal: rich tables and bars when rich is installed, plain text otherwise.

Every cell is printed as text, never as rich markup: a label such as ``[red]x`` is shown as typed.
"""

from __future__ import annotations

import json
import os
from collections.abc import Sequence
from typing import Any, TextIO

#: A plain table's cells are cut to this many characters.
PLAIN_CELL_CHARS = 60
#: How wide rich lays out what goes to a pipe or a file (a terminal: its own width, or $COLUMNS).
PIPE_COLUMNS = 200


def rich_console(stream: TextIO) -> Any | None:
    """A rich ``Console`` on ``stream``, or None when rich is not installed."""
    try:
        from rich.console import Console
    except ImportError:
        return None
    sized = "COLUMNS" in os.environ or (hasattr(stream, "isatty") and stream.isatty())
    return Console(file=stream, highlight=False, width=None if sized else PIPE_COLUMNS)


class Output:
    """Where a command prints: rich when it is installed (and ``plain`` is off), else plain text."""

    def __init__(self, stream: TextIO, *, plain: bool = False) -> None:
        self.stream = stream
        self.console = None if plain else rich_console(stream)

    def line(self, text: str = "") -> None:
        if self.console is not None:
            from rich.text import Text

            self.console.print(Text(text))
        else:
            self.stream.write(f"{text}\n")

    def json(self, value: Any) -> None:
        """One JSON document (a ``describe()``, a list of them, the statistics), on one line."""
        self.stream.write(json.dumps(value, ensure_ascii=False, sort_keys=False) + "\n")
        self.stream.flush()

    def table(self, columns: Sequence[str], rows: Sequence[Sequence[Any]], title: str | None = None) -> None:
        cells = [["" if cell is None else str(cell) for cell in row] for row in rows]
        if self.console is not None:
            self.console.print(rich_table(columns, cells, title))
            return
        if title:
            self.stream.write(f"{title}\n")
        cut = [[_cut(cell) for cell in row] for row in cells]
        widths = [max([len(name), *(len(row[i]) for row in cut)]) for i, name in enumerate(columns)]
        for row in (list(columns), ["-" * width for width in widths], *cut):
            padded = (cell.ljust(width) for cell, width in zip(row, widths, strict=True))
            self.stream.write("  ".join(padded).rstrip() + "\n")

    def fields(self, pairs: Sequence[tuple[str, Any]]) -> None:
        """``name: value`` lines, the names aligned; a pair whose value is None is left out."""
        shown = [(name, str(value)) for name, value in pairs if value is not None and value != ""]
        width = max((len(name) for name, _value in shown), default=0)
        for name, value in shown:
            self.line(f"{name.rjust(width)}: {value}")


def rich_table(columns: Sequence[str], rows: Sequence[Sequence[str]], title: str | None = None) -> Any:
    from rich import box
    from rich.table import Table
    from rich.text import Text

    table = Table(title=title, box=box.SIMPLE_HEAD, title_justify="left")
    for name in columns:
        table.add_column(name, overflow="fold")
    for row in rows:
        table.add_row(*(Text(cell) for cell in row))
    return table


def _cut(text: str) -> str:
    text = " ".join(text.split())  # one line per row, whatever a cell holds
    return text if len(text) <= PLAIN_CELL_CHARS else text[: PLAIN_CELL_CHARS - 1] + "…"
