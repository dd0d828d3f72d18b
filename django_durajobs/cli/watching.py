"""``manage.py jobs watch``: follow a job until it ends, as a live rich view or a line per change."""

from __future__ import annotations

import time
from typing import Any

from django.utils.translation import gettext as _
from django.utils.translation import ngettext

from ..engine.describe import live_summary
from ..errors import JobError
from ..models import Job
from ..status import StepState
from ..store import DatabaseNow
from ..values import to_job_id
from .output import Output
from .screens import moment, note


def watch(
    job_ref: Any, output: Output, *, interval: float, timeout: float | None = None, as_json: bool = False
) -> dict[str, Any] | None:
    """Look at the job every ``interval`` seconds, showing each change, until it ends; returns
    its last summary (``live_summary()``), or None when ``timeout`` seconds passed first.

    A waiting job (a question, a timed wait, paused) is watched on: it shows what it waits for.
    On a terminal with rich installed the view is live; otherwise (a pipe, a file, no rich) each
    change is one line of text, or with ``as_json`` one line of JSON.
    """
    job_id = to_job_id(job_ref)
    deadline = None if timeout is None else time.monotonic() + timeout
    live = not as_json and output.console is not None and output.console.is_terminal
    view = RichView(output) if live else None
    shown: tuple[Any, ...] | None = None
    try:
        while True:
            summary = _summary(job_id)
            seen = _what_changes(summary)
            if seen != shown:
                shown = seen
                if as_json:
                    output.json(summary)
                elif view is not None:
                    view.update(summary)
                else:
                    output.line(plain_line(summary))
            if summary["terminal"]:
                return summary
            if deadline is not None and time.monotonic() >= deadline:
                return None
            time.sleep(interval)
    finally:
        if view is not None:
            view.stop()


def _summary(job_id: int) -> dict[str, Any]:
    job = Job.objects.annotate(database_now=DatabaseNow()).filter(pk=job_id).first()
    if job is None:
        raise JobError("job_not_found", _("Job %(id)s does not exist.") % {"id": job_id})
    return live_summary(job)


def _what_changes(summary: dict[str, Any]) -> tuple[Any, ...]:
    """What a new line or frame is shown for (not the timestamps that change on every heartbeat)."""
    current = summary["current_step"]
    return (
        summary["status"],
        summary["progress"],
        summary["completed_count"],
        current and (current["id"], current["state"], current["detail"]),
        note(summary),
        summary["children"] and tuple(sorted(summary["children"]["by_status"].items())),
    )


def plain_line(summary: dict[str, Any]) -> str:
    """``14:02:07 · running · 33% · 1 step done · Work on it (running) · <note>``."""
    current = summary["current_step"]
    parts = [
        moment(summary["updated_at"])[11:],
        summary["status"],
        f"{summary['progress']}%",
        ngettext("%(count)d step done", "%(count)d steps done", summary["completed_count"])
        % {"count": summary["completed_count"]},
    ]
    if current:
        parts.append(f"{current['title']} ({current['state']})")
    if summary["children"]:
        children = summary["children"]
        parts.append(_("children %(overall)s: %(total)d") % children)
    if note(summary):
        parts.append(note(summary))
    return " · ".join(parts)


class RichView:
    """A live rich view: the job's progress bar, then its latest completed, current and next step."""

    def __init__(self, output: Output) -> None:
        from rich.live import Live
        from rich.progress import BarColumn, Progress, TaskProgressColumn, TextColumn, TimeElapsedColumn

        self.progress = Progress(
            TextColumn("{task.description}"), BarColumn(), TaskProgressColumn(), TimeElapsedColumn()
        )
        self.task = self.progress.add_task("", total=100)
        self.live = Live(console=output.console, refresh_per_second=4)
        self.live.start()

    def update(self, summary: dict[str, Any]) -> None:
        from rich.console import Group
        from rich.markup import escape

        self.progress.update(
            self.task,
            completed=summary["progress"],
            description=escape(f"#{summary['id']} {summary['label']} · {summary['status']}"),
        )
        self.live.update(Group(self.progress, steps_table(summary)), refresh=True)

    def stop(self) -> None:
        self.live.stop()


def steps_table(summary: dict[str, Any]) -> Any:
    from rich import box
    from rich.table import Table
    from rich.text import Text

    table = Table(box=box.SIMPLE, show_header=False, padding=(0, 1))
    table.add_column(width=2)
    table.add_column()
    table.add_column()
    earlier = summary["completed_count"] - len(summary["completed_steps"])
    if earlier > 0:
        table.add_row(
            "",
            Text(
                ngettext("… %(count)d earlier step done", "… %(count)d earlier steps done", earlier)
                % {"count": earlier}
            ),
            "",
        )
    for step in summary["completed_steps"]:
        table.add_row("✓", Text(step["title"]), Text(step["state"]))
    current = summary["current_step"]
    if current and current["state"] != StepState.DONE:
        table.add_row("▶", Text(current["title"]), Text(current["detail"] or current["state"]))
    following = summary["next_step"]
    if following:
        table.add_row("·", Text(following["title"]), Text(following["state"]))
    if note(summary):
        table.add_row("", Text(note(summary)), "")
    return table
