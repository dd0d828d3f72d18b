"""The live console: the dashboard, and the small JSON answers that keep the job list, the job
page and the dashboard current without reloading them.

One request per page and interval (``static/django_durajobs/console.js`` asks every 2 s while
the tab is visible). Each answer is bounded however big the jobs are: the list asks for the rows
it shows (at most ``LIVE_ROWS``), the job page for the sections it shows (a page of steps and of
children, the latest log lines), the dashboard for its counts. Each view checks the model's view
permission first.
"""

from __future__ import annotations

import hashlib
from typing import Any

from django.contrib.admin.utils import display_for_field
from django.core.exceptions import PermissionDenied
from django.db import models
from django.http import HttpRequest, HttpResponse, JsonResponse
from django.template.loader import render_to_string
from django.template.response import TemplateResponse
from django.urls import path, reverse
from django.utils.decorators import method_decorator
from django.utils.html import conditional_escape
from django.utils.text import Truncator
from django.utils.translation import gettext_lazy as _
from django.views.decorators.http import require_GET
from django.views.i18n import JavaScriptCatalog

from .. import store
from ..models import Job, JobLog
from ..store.overview import THROUGHPUT_MINUTES, overview
from ..store.workers import SEEN_LATELY
from .display import PAGE_ONLY_FIELDS, JobAdminParts, label_of
from .rows import prepare_rows

#: The most rows of the list one live request may ask about (the list shows 50 a page).
LIVE_ROWS = 200
#: The list's columns that change as a job runs, each a ``JobAdmin`` method.
LIVE_COLUMNS = ("status_badge", "reason", "progress_bar", "attempts", "next_run", "updated")
#: The job page's read-only fields that change as a job runs.
LIVE_FIELDS = (
    "status",
    "phase",
    "attempt",
    "max_attempts",
    "next_run",
    "eta",
    "shown_progress",
    "started",
    "updated",
    "ended",
    "error",
    "error_code",
    "shown_wait_reason",
    "user_message",
    "answer",
    "locked_by",
    "cancel_requested",
    "pause_requested",
)
CHART_HEIGHT = 60


def page_version(job: Job, summary: dict[str, Any]) -> str:
    """What the job page's sections show, in a few words: a change of status, of a step's state,
    of a child's status or a new log line changes it."""
    last_line = JobLog.objects.filter(job_id=job.pk).order_by("-id").values_list("id", flat=True).first()
    current = summary["current_step"] or {}
    children = summary["children"] or {}
    parts = (
        job.status,
        job.phase,
        summary["updated_at"],
        summary["completed_count"],
        current.get("id"),
        current.get("state"),
        sorted(children.get("by_status", {}).items()),
        last_line,
    )
    return hashlib.blake2b(repr(parts).encode(), digest_size=8).hexdigest()


class ConsoleMixin(JobAdminParts):
    """The dashboard and the live answers, for ``JobAdmin``."""

    def console_urls(self) -> list[Any]:
        view = self.admin_site.admin_view
        return [
            path("dashboard/", view(self.dashboard_view), name="django_durajobs_job_dashboard"),
            path(
                "dashboard/live/", view(self.dashboard_live_view), name="django_durajobs_job_dashboard_live"
            ),
            path("live/", view(self.list_live_view), name="django_durajobs_job_list_live"),
            # The console's own texts (admin's catalog has only the admin's): cacheable like it.
            path(
                "jsi18n/",
                view(JavaScriptCatalog.as_view(packages=["django_durajobs"]), cacheable=True),
                name="django_durajobs_job_jsi18n",
            ),
            path("<path:object_id>/live/", view(self.page_live_view), name="django_durajobs_job_live"),
        ]

    # The dashboard -------------------------------------------------------------------------------

    def dashboard_context(self, request: HttpRequest) -> dict[str, Any]:
        seen = overview()
        workers = store.workers_seen(SEEN_LATELY)
        most = max([minute.done + minute.failed for minute in seen.throughput] + [1])
        bars: list[dict[str, Any]] = [
            {
                "x": index * 6,
                "done": round(CHART_HEIGHT * minute.done / most),
                "failed": round(CHART_HEIGHT * minute.failed / most),
                "minute": minute,
            }
            for index, minute in enumerate(seen.throughput)
        ]
        for bar in bars:
            bar["done_y"] = CHART_HEIGHT - bar["done"]
            bar["failed_y"] = bar["done_y"] - bar["failed"]
        return {
            "overview": seen,
            "statuses": [(status, label_of(status), number) for status, number in seen.by_status.items()],
            "workers": workers,
            "live_workers": sum(1 for worker in workers if not worker.stale and not worker.stopped_at),
            "bars": bars,
            "chart_width": THROUGHPUT_MINUTES * 6,
            "chart_height": CHART_HEIGHT,
            "ended_last_hour": sum(minute.done + minute.failed for minute in seen.throughput),
            "failed_last_hour": sum(minute.failed for minute in seen.throughput),
            "changelist_url": reverse("admin:django_durajobs_job_changelist"),
            "live_url": reverse("admin:django_durajobs_job_dashboard_live"),
        }

    @method_decorator(require_GET)
    def dashboard_view(self, request: HttpRequest) -> HttpResponse:
        if not self.has_view_permission(request):
            raise PermissionDenied
        context = {
            **self.admin_site.each_context(request),
            "title": _("Jobs dashboard"),
            "subtitle": None,
            "opts": self.model._meta,
            **self.dashboard_context(request),
        }
        return TemplateResponse(request, "admin/django_durajobs/job/dashboard.html", context)

    @method_decorator(require_GET)
    def dashboard_live_view(self, request: HttpRequest) -> JsonResponse:
        if not self.has_view_permission(request):
            raise PermissionDenied
        body = render_to_string(
            "admin/django_durajobs/job/dashboard_body.html", self.dashboard_context(request), request
        )
        return JsonResponse({"fragments": {"durajobs-dashboard": body}})

    # The job list --------------------------------------------------------------------------------

    @method_decorator(require_GET)
    def list_live_view(self, request: HttpRequest) -> JsonResponse:
        """The changing cells of the rows the list shows (``?ids=3,4,5``), by job id."""
        if not self.has_view_permission(request):
            raise PermissionDenied
        ids = []
        for part in request.GET.get("ids", "").split(",")[:LIVE_ROWS]:
            if part.isascii() and part.isdigit() and len(part) < 20:
                ids.append(int(part))
        jobs = list(self.get_queryset(request).filter(pk__in=ids).defer(*PAGE_ONLY_FIELDS, "actions"))
        prepare_rows(jobs)
        rows = {
            str(job.pk): {name: str(conditional_escape(getattr(self, name)(job))) for name in LIVE_COLUMNS}
            for job in jobs
        }
        return JsonResponse({"rows": rows, "gone": [pk for pk in ids if str(pk) not in rows]})

    # The job page --------------------------------------------------------------------------------

    @method_decorator(require_GET)
    def page_live_view(self, request: HttpRequest, object_id: str) -> JsonResponse:
        """The job page's summary, heading and changing fields as they are now, and its sections
        (steps, log, children) when they changed since the ``?version=`` the page has."""
        job = self._job_or_404(request, object_id, defer=PAGE_ONLY_FIELDS)
        context = self.summary_context(request, job)
        fragments = {
            "durajobs-summary": render_to_string("admin/django_durajobs/job/summary.html", context, request),
        }
        version = page_version(job, context["summary"])
        if request.GET.get("version") != version:
            for section in self.page_sections(request, job):
                fragments[f"{section.name}-group"] = render_to_string(
                    "admin/django_durajobs/job/section.html", {"section": section}, request
                )
        fields = {name: str(conditional_escape(self.live_field(job, name))) for name in LIVE_FIELDS}
        return JsonResponse(
            {
                "terminal": context["terminal"],
                "version": version,
                "subtitle": str(conditional_escape(str(job))),
                # As the admin's change form shows it (truncatewords:"18").
                "breadcrumb": str(conditional_escape(Truncator(str(job)).words(18, truncate=" …"))),
                "fragments": fragments,
                "fields": fields,
            }
        )

    def live_field(self, job: Job, name: str) -> Any:
        """A read-only field of the job page, as the page shows it."""
        method = getattr(self, name, None)
        if callable(method):
            return method(job)
        field = Job._meta.get_field(name)
        assert isinstance(field, models.Field)  # LIVE_FIELDS names the row's own fields
        return display_for_field(getattr(job, name), field, self.get_empty_value_display())
