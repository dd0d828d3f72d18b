"""The job page's sections, bounded however big the job: steps and child jobs a page at a time,
the latest log lines, and the full log on a paginated page of its own.

Each section reads the rows it shows and counts the others in SQL; only the rows shown are
redacted (step results are stored intact). Log lines and errors were redacted when stored.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from django.core.paginator import Page, Paginator
from django.db.models import Case, QuerySet, Value, When
from django.http import HttpRequest
from django.urls import reverse
from django.utils.html import format_html
from django.utils.text import Truncator
from django.utils.translation import gettext_lazy as _
from django.utils.translation import ngettext

from .. import store
from ..engine.describe import shown_state
from ..models import Job, JobLog, JobStep
from ..status import TERMINAL, Phase
from .display import count, pretty_json, status_badge, time_tag

STEPS_PER_PAGE = 100
CHILDREN_PER_PAGE = 100
#: The job page shows this many of the latest log lines; the full log has a page of its own.
LOG_LINES_SHOWN = 50
LOG_LINES_PER_PAGE = 100
#: A step result longer than this (as indented JSON) is cut short in the steps table.
RESULT_CHARS_SHOWN = 2000
#: A child's error longer than this is cut short in the child jobs table.
ERROR_CHARS_SHOWN = 300
EMPTY = "—"


@dataclass(frozen=True)
class PageLink:
    number: int | str
    url: str = ""  # none for the current page and for an ellipsis
    current: bool = False
    last: bool = False


@dataclass(frozen=True)
class Pages:
    """One page of a list, with the links to the others, shown as Django's own paginator."""

    page: Page
    links: list[PageLink]
    total: str  # "5,000 steps"

    @property
    def required(self) -> bool:
        return self.page.paginator.num_pages > 1


@dataclass(frozen=True)
class Column:
    name: str
    label: Any


@dataclass
class Section:
    """A read-only table that looks like one of Django's tabular inlines; its id is ``<name>-group``."""

    name: str
    title: Any
    columns: tuple[Column, ...]
    rows: list[list[tuple[str, Any]]] = field(default_factory=list)  # (column name, cell) per cell
    pages: Pages | None = None
    note: Any = ""


def paginate(
    request: HttpRequest, queryset: QuerySet, parameter: str, per_page: int, counted: Callable[[int], str]
) -> Pages:
    """The page ``?<parameter>=`` asks for (the last one past the end, the first for nonsense);
    its links keep the rest of the query string."""
    paginator = Paginator(queryset, per_page)
    page = paginator.get_page(request.GET.get(parameter))
    links = []
    for number in paginator.get_elided_page_range(page.number):
        if number == paginator.ELLIPSIS or number == page.number:
            links.append(PageLink(number, current=number == page.number))
            continue
        query = request.GET.copy()
        query[parameter] = str(number)
        links.append(PageLink(number, f"?{query.urlencode()}", last=number == paginator.num_pages))
    return Pages(page, links, counted(paginator.count))


def steps_section(request: HttpRequest, job: Job) -> Section:
    columns = (
        Column("phase", _("phase")),
        Column("title", _("step")),
        Column("state", _("state")),
        Column("started_at", _("started")),
        Column("ended_at", _("ended")),
        Column("detail_or_error", _("detail / error")),
        Column("result", _("result")),
    )
    run_first = Case(When(phase=Phase.RUN, then=Value(0)), default=Value(1))
    steps = JobStep.objects.filter(job_id=job.pk).order_by(run_first, "position", "id")
    pages = paginate(
        request,
        steps,
        "steps_page",
        STEPS_PER_PAGE,
        lambda n: ngettext("%(count)s step", "%(count)s steps", n) % {"count": count(n)},
    )
    rows = [
        [
            ("phase", step.get_phase_display()),
            ("title", format_html("{}<br><small class='durajobs-kind'>{}</small>", step.title, step.step_id)),
            ("state", status_badge(shown_state(step.state, job.status))),
            ("started_at", time_tag(step.started_at)),
            ("ended_at", time_tag(step.ended_at)),
            ("detail_or_error", step.error or step.detail or EMPTY),
            ("result", pretty_json(step.result, limit=RESULT_CHARS_SHOWN)),
        ]
        for step in pages.page
    ]
    return Section("steps", _("steps"), columns, rows, pages)


def log_url(job: Job) -> str:
    return reverse("admin:django_durajobs_job_log", args=[job.pk])


def log_section(job: Job) -> Section:
    """The latest ``LOG_LINES_SHOWN`` lines, oldest first, and a link to the full log when there are more."""
    lines = JobLog.objects.filter(job_id=job.pk)
    total = lines.count()
    latest = list(lines.order_by("-id")[:LOG_LINES_SHOWN])[::-1] if total else []
    note = ""
    if total > len(latest):
        note = format_html(
            '{} <a href="{}">{}</a>',
            ngettext(
                "The latest %(shown)s of %(total)s line.", "The latest %(shown)s of %(total)s lines.", total
            )
            % {"shown": len(latest), "total": count(total)},
            log_url(job),
            _("Show the full log"),
        )
    columns = (Column("at", _("at")), Column("line", _("line")))
    rows = [[("at", time_tag(line.at)), ("line", line.line)] for line in latest]
    return Section("log_lines", _("log"), columns, rows, note=note)


def full_log(request: HttpRequest, job: Job) -> Section:
    """Every kept line of the job's log, newest first, ``LOG_LINES_PER_PAGE`` a page (``?p=``)."""
    pages = paginate(
        request,
        JobLog.objects.filter(job_id=job.pk).order_by("-id"),
        "p",
        LOG_LINES_PER_PAGE,
        lambda n: ngettext("%(count)s line", "%(count)s lines", n) % {"count": count(n)},
    )
    columns = (Column("at", _("at")), Column("line", _("line")))
    rows = [[("at", time_tag(line.at)), ("line", line.line)] for line in pages.page]
    return Section("log_lines", _("log, newest first"), columns, rows, pages)


def children_section(request: HttpRequest, job: Job) -> Section | None:
    """The job's children, those that failed or ask a question first, then in the order they were
    created, ``CHILDREN_PER_PAGE`` a page; None without any."""
    children = store.children_listed(job.pk).only("id", "label", "status", "error", "attempt", "next_run_at")
    pages = paginate(
        request,
        children,
        "children_page",
        CHILDREN_PER_PAGE,
        lambda n: ngettext("%(count)s child job", "%(count)s child jobs", n) % {"count": count(n)},
    )
    if not pages.page.paginator.count:
        return None
    columns = (
        Column("child", _("job")),
        Column("status", _("status")),
        Column("error", _("error")),
        Column("attempt", _("attempt")),
        Column("next_run_at", _("next run")),
    )
    rows = [
        [
            (
                "child",
                format_html(
                    '<a href="{}">#{} {}</a>',
                    reverse("admin:django_durajobs_job_change", args=[child.pk]),
                    child.pk,
                    child.label,
                ),
            ),
            ("status", status_badge(child.status, child.get_status_display())),
            ("error", Truncator(child.error).chars(ERROR_CHARS_SHOWN) or EMPTY),
            ("attempt", child.attempt),
            ("next_run_at", time_tag(child.next_run_at) if child.status not in TERMINAL else EMPTY),
        ]
        for child in pages.page
    ]
    return Section("children", _("child jobs"), columns, rows, pages)
