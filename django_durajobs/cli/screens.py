"""What ``manage.py jobs`` prints for a list, a job, the statistics and an operation, from the
same dicts its ``--json`` prints (``describe()``, ``row_summaries()``, ``job_stats()``)."""

from __future__ import annotations

from datetime import datetime
from typing import Any

from django.utils import timezone
from django.utils.translation import gettext as _
from django.utils.translation import ngettext, pgettext

from ..models import Job
from ..status import Status
from .output import Output


def moment(iso: str | None) -> str:
    """An ISO 8601 moment as local time to the second: ``2025-03-01 14:02:07``."""
    if not iso:
        return ""
    return timezone.localtime(datetime.fromisoformat(iso)).strftime("%Y-%m-%d %H:%M:%S")


def note(summary: dict[str, Any]) -> str:
    """The one thing to know about a job in a list: its error, question or what it waits for."""
    if summary.get("error"):
        return f"{summary['error_code'] or ''}: {summary['error']}".lstrip(": ")
    for key in ("user_message", "wait_reason"):
        if summary.get(key):
            return str(summary[key])
    if summary.get("cancel_requested"):
        return _("cancel requested")
    if summary.get("pause_requested"):
        return _("pause requested")
    return ""


def job_list(output: Output, summaries: list[dict[str, Any]], *, more: bool) -> None:
    if not summaries:
        output.line(_("No jobs match."))
        return
    columns = [_("ID"), _("Kind"), _("Label"), _("Status"), _("Progress"), _("Attempt"), _("Updated")]
    columns.append(_("Note"))
    rows = [
        [
            summary["id"],
            summary["kind"],
            summary["label"],
            summary["status"],
            f"{summary['progress']}%",
            f"{summary['attempt']}/{summary['max_attempts']}",
            moment(summary["updated_at"]),
            note(summary),
        ]
        for summary in summaries
    ]
    output.table(columns, rows)
    if more:
        shown = len(summaries)
        output.line(
            ngettext(
                "Only the newest %(count)d is shown; --limit shows more.",
                "Only the newest %(count)d are shown; --limit shows more.",
                shown,
            )
            % {"count": shown}
        )


def job_page(output: Output, summary: dict[str, Any], *, log_lines: int) -> None:
    """``jobs show``: the summary, the steps, the children's counts and the latest log lines."""
    current = summary["current_step"]
    output.fields(
        [
            (_("Job"), f"#{summary['id']} {summary['label']} ({summary['kind']})"),
            (_("Version"), summary["kind_version"]),
            (_("Version warning"), summary["version_warning"]),
            (
                _("Status"),
                _("%(status)s (stale lease)") % {"status": summary["status"]}
                if summary["stale"]
                else summary["status"],
            ),
            (_("Progress"), f"{summary['progress']}%"),
            (_("Attempt"), f"{summary['attempt']}/{summary['max_attempts']}"),
            (_("Current step"), f"{current['title']} ({current['state']})" if current else None),
            (_("Next run"), moment(summary["next_run_at"])),
            (_("ETA"), moment(summary["eta_at"]) or summary["eta_unknown_reason"]),
            (_("Waiting for"), summary["wait_reason"]),
            (_("Question"), summary["user_message"]),
            (_("Answers"), ", ".join(action["id"] for action in summary["actions"] or []) or None),
            (_("Error"), f"{summary['error_code']}: {summary['error']}" if summary["error"] else None),
            (_("Created"), moment(summary["created_at"])),
            (_("Started"), moment(summary["started_at"])),
            (_("Ended"), moment(summary["ended_at"])),
            (
                pgettext("the operations a job allows now", "Can"),
                ", ".join(can for can in _allowed(summary)) or None,
            ),
        ]
    )
    if summary["steps"]:
        output.line()
        columns = [_("Step"), _("Title"), _("Phase"), _("State"), _("Started"), _("Ended"), _("Detail")]
        rows = [
            [
                step["id"],
                step["title"],
                step["phase"],
                step["state"],
                moment(step["started_at"]),
                moment(step["ended_at"]),
                step["error"] or step["detail"] or "",
            ]
            for step in summary["steps"]
        ]
        output.table(columns, rows, title=_("Steps"))
    children = summary["children"]
    if children:
        output.line()
        counts = ", ".join(f"{count} {status}" for status, count in children["by_status"].items())
        output.line(
            _("Children: %(total)d (%(counts)s), overall %(overall)s")
            % {"total": children["total"], "counts": counts, "overall": children["overall"]}
        )
    log = summary["log"][-log_lines:] if log_lines else []
    if log:
        output.line()
        output.table([_("At"), _("Line")], [[moment(entry["at"]), entry["line"]] for entry in log], _("Log"))


def _allowed(summary: dict[str, Any]) -> list[str]:
    return [name for name in ("resume", "retry", "pause", "cancel", "revert") if summary[f"can_{name}"]]


def stats(output: Output, stats: dict[str, Any]) -> None:
    """``jobs stats``: jobs by queue and status, the due jobs' lag, the workers seen lately."""
    statuses = list(stats["by_status"])
    rows = [
        [queue, *(counts.get(status, 0) for status in statuses), sum(counts.values())]
        for queue, counts in stats["by_queue"].items()
    ]
    rows.append([_("all"), *(stats["by_status"][status] for status in statuses), stats["total"]])
    output.table([_("Queue"), *statuses, _("total")], rows, title=_("Jobs by queue and status"))
    output.line()
    due = [[queue, lag["jobs"], f"{lag['oldest_lag_seconds']:.1f}"] for queue, lag in stats["due"].items()]
    if due:
        output.table([_("Queue"), _("Due"), _("Oldest lag (s)")], due, title=_("Due jobs"))
        oldest = stats["oldest_due"]
        late = {"id": oldest["id"], "lag": oldest["lag_seconds"]}
        output.line(_("The oldest due job is #%(id)d, %(lag).1f s late.") % late)
    else:
        output.line(_("No job is due."))
    output.line()
    workers = [
        [
            seen["worker_id"],
            seen["jobs"],
            _("listens") if seen["listens"] else _("polls"),
            moment(seen["last_seen"]),
        ]
        for seen in stats["workers"]
    ]
    if workers:
        headers = [_("Worker"), _("Jobs"), _("Wake-up"), _("Last seen")]
        output.table(headers, workers, title=_("Workers seen lately"))
    else:
        output.line(_("No worker holds a job."))


def operated(name: str, job: Job) -> str:
    """What an operation did, in one line."""
    if name == "cancel" and job.cancel_requested and job.status == Status.RUNNING:
        return _("Cancel requested for job %(id)d; it stops at its next step.") % {"id": job.pk}
    if name == "rerun":
        return _("Job %(id)d reruns job %(original)d; it is %(status)s.") % {
            "id": job.pk,
            "original": job.rerun_of_id,
            "status": job.status,
        }
    if name == "pause" and job.pause_requested and job.status == Status.RUNNING:
        return _("Pause requested for job %(id)d; it pauses at its next step.") % {"id": job.pk}
    return _("Job %(id)d is now %(status)s.") % {"id": job.pk, "status": job.status}


def ending(summary: dict[str, Any]) -> str:
    """Why a watched job ended unsuccessfully."""
    if summary.get("error"):
        return _("Job %(id)d %(status)s: %(error)s") % {
            "id": summary["id"],
            "status": summary["status"],
            "error": summary["error"],
        }
    return _("Job %(id)d %(status)s.") % {"id": summary["id"], "status": summary["status"]}
