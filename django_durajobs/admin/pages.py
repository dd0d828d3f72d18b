"""The job page: its summary and buttons, its bounded sections, the summary's refresh, the full
log, and the operation its buttons post to.

Every view checks the model's view permission before it looks the job up, so a user who may
not see jobs cannot tell an existing id from a missing one (both are 403).
"""

from __future__ import annotations

from typing import Any

from django.contrib import messages
from django.contrib.admin.utils import unquote
from django.core.exceptions import PermissionDenied, ValidationError
from django.http import Http404, HttpRequest, HttpResponse, HttpResponseRedirect
from django.template.response import TemplateResponse
from django.urls import path, reverse
from django.utils.decorators import method_decorator
from django.utils.translation import gettext_lazy as _
from django.views.decorators.http import require_GET, require_POST

from ..engine.describe import live_summary
from ..errors import JobError
from ..models import Job
from ..status import TERMINAL, Status
from .display import OPERATIONS, PAGE_ONLY_FIELDS, Operation, count
from .sections import children_section, full_log, log_section, steps_section


class JobPageMixin:
    """The job page's views, for ``JobAdmin``."""

    def get_urls(self):
        view = self.admin_site.admin_view
        return [
            path(
                "<path:object_id>/operate/<str:operation>/",
                view(self.operate_view),
                name="django_durajobs_job_operate",
            ),
            path("<path:object_id>/summary/", view(self.summary_view), name="django_durajobs_job_summary"),
            path("<path:object_id>/log/", view(self.log_view), name="django_durajobs_job_log"),
            *super().get_urls(),
        ]

    def summary_context(self, request: HttpRequest, job: Job) -> dict[str, Any]:
        summary = live_summary(job)
        may = {"operate": self.has_operate_permission(request), "revert": self.has_revert_permission(request)}
        buttons = [
            operation
            for operation in OPERATIONS.values()
            if summary[operation.allowed_flag]
            and may[operation.permission]
            and not (operation.name == "cancel" and summary["cancel_requested"])
            # A question with offered answers is answered with them, not with a bare resume.
            and not (operation.name == "resume" and summary["actions"] and job.status == Status.NEEDS_USER)
        ]
        earlier = summary["completed_count"] - len(summary["completed_steps"])
        return {
            "job": job,
            "summary": summary,
            "earlier_completed": count(earlier) if earlier else "",
            "children_total": count(summary["children"]["total"]) if summary["children"] else "",
            "buttons": buttons,
            "may_answer": may["operate"] and job.status == Status.NEEDS_USER,
            "refresh_url": reverse("admin:django_durajobs_job_summary", args=[job.pk]),
            "terminal": job.status in TERMINAL,
            "opts": self.model._meta,
        }

    def render_change_form(self, request, context, add=False, change=False, form_url="", obj=None):
        if obj is not None:
            sections = [steps_section(request, obj), log_section(obj), children_section(request, obj)]
            context = {
                **context,
                **self.summary_context(request, obj),
                "sections": [section for section in sections if section is not None],
            }
        return super().render_change_form(request, context, add, change, form_url, obj)

    @method_decorator(require_GET)
    def summary_view(self, request: HttpRequest, object_id: str) -> HttpResponse:
        job = self._job_or_404(request, object_id, defer=PAGE_ONLY_FIELDS)
        return TemplateResponse(
            request, "admin/django_durajobs/job/summary.html", self.summary_context(request, job)
        )

    @method_decorator(require_GET)
    def log_view(self, request: HttpRequest, object_id: str) -> HttpResponse:
        job = self._job_or_404(request, object_id, defer=PAGE_ONLY_FIELDS)
        context = {
            **self.admin_site.each_context(request),
            "title": _("Log: %s") % job,
            "subtitle": None,
            "object": job,
            "opts": self.model._meta,
            "section": full_log(request, job),
        }
        return TemplateResponse(request, "admin/django_durajobs/job/log.html", context)

    def history_view(self, request, object_id, extra_context=None):
        if not self.has_view_or_change_permission(request):
            raise PermissionDenied
        return super().history_view(request, object_id, extra_context)

    @method_decorator(require_POST)
    def operate_view(self, request: HttpRequest, object_id: str, operation: str) -> HttpResponse:
        job = self._job_or_404(request, object_id, defer=PAGE_ONLY_FIELDS)
        chosen = OPERATIONS.get(operation)
        if chosen is None:
            raise Http404(f"No operation {operation!r}.")
        if not getattr(self, f"has_{chosen.permission}_permission")(request, job):
            raise PermissionDenied
        kwargs = (
            {"action": request.POST["action"]}
            if chosen.name == "resume" and request.POST.get("action")
            else {}
        )
        self._apply(request, chosen, job, **kwargs)
        return HttpResponseRedirect(reverse("admin:django_durajobs_job_change", args=[job.pk]))

    def _job_or_404(self, request: HttpRequest, object_id: str, defer: tuple[str, ...] = ()) -> Job:
        """The job, for a user who may view jobs: 403 before the lookup, then 404 for a missing id."""
        if not self.has_view_permission(request):
            raise PermissionDenied
        try:
            pk = Job._meta.pk.to_python(unquote(object_id))
            job = self.get_queryset(request).defer(*defer).filter(pk=pk).first()
        except (ValidationError, ValueError, OverflowError):
            job = None
        if job is None:
            raise Http404(f"No job {object_id!r}.")
        if not self.has_view_permission(request, job):
            raise PermissionDenied
        return job

    def _apply(self, request: HttpRequest, operation: Operation, job: Job, **kwargs: Any) -> bool:
        """Run one operation for the current user; a refusal becomes a message, never an error page.

        Recorded in Django's admin history and, with the user's name, in the job's own log.
        """
        try:
            operation.run(job, by=request.user, **kwargs)
        except JobError as refusal:
            self.message_user(request, str(refusal), messages.WARNING)  # it names the job and why
            return False
        chosen = f" ({kwargs['action']})" if kwargs.get("action") else ""
        self.log_change(request, job, f"{operation.name}{chosen}")
        done = operation.done
        if operation.name == "cancel" and job.cancel_requested:
            done = _("Cancel requested for job %(id)s; it stops at its next step.")
        self.message_user(request, done % {"id": job.pk}, messages.SUCCESS)
        return True
