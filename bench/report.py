"""What a run found: figures, the table printed at the end, and the JSON written next to it."""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass
from pathlib import Path


@dataclass
class Figure:
    """One measured figure of django-durajobs, beside the raw queue's figure for the same work.

    ``ratio`` is always ours divided by raw: for a rate, the fraction of the ceiling reached
    (higher is better); for a latency or a duration, how many times the ceiling it takes (lower
    is better). ``versus``/``versus_what`` compare a figure with another of our own (2 processes
    against 1, a big table against an empty one).
    """

    key: str
    label: str
    value: float
    unit: str
    raw: float | None = None
    versus: float | None = None
    versus_what: str = ""
    note: str = ""

    @property
    def ratio(self) -> float | None:
        return self.value / self.raw if self.raw else None

    def as_json(self) -> dict:
        return {**asdict(self), "ratio": self.ratio}


def show(value: float | None, unit: str) -> str:
    """A figure as it reads best in its unit."""
    if value is None:
        return "-"
    if unit == "jobs/s":
        return f"{value:,.0f}/s"
    if unit == "ms":
        return f"{value:.2f} ms" if value < 10 else f"{value:,.0f} ms"
    if unit == "MB":
        return f"{value:.1f} MB"
    return f"{value:g} {unit}"


def table(figures: list[Figure]) -> str:
    """The figures as a Markdown table, so it can go into docs/performance.md unchanged."""
    rows = [("workload", "django-durajobs", "raw SQL", "ratio to raw", "notes")]
    for figure in figures:
        notes = [f"{figure.versus:.2f}× {figure.versus_what}"] if figure.versus is not None else []
        if figure.note:
            notes.append(figure.note)
        rows.append(
            (
                figure.label,
                show(figure.value, figure.unit),
                show(figure.raw, figure.unit),
                f"{figure.ratio:.2f}×" if figure.ratio is not None else "-",
                "; ".join(notes),
            )
        )
    widths = [max(len(row[column]) for row in rows) for column in range(len(rows[0]))]
    numbers = (False, True, True, True, False)  # right-aligned
    columns = list(zip(widths, numbers, strict=True))

    def line(cells) -> str:
        padded = (
            cell.rjust(w) if right else cell.ljust(w) for cell, (w, right) in zip(cells, columns, strict=True)
        )
        return "| " + " | ".join(padded) + " |"

    rule = "|" + "|".join("-" * (w + 1) + ":" if right else "-" * (w + 2) for w, right in columns) + "|"
    return "\n".join([line(rows[0]), rule, *(line(row) for row in rows[1:])])


def write_json(path: Path, meta: dict, figures: list[Figure], failures: dict[str, str]) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    document = {"meta": meta, "figures": [figure.as_json() for figure in figures], "failures": failures}
    path.write_text(json.dumps(document, indent=2, default=str) + "\n")
