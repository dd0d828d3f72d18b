"""The job page: its summary and buttons, its bounded sections, the full log, the operations its
buttons post to, and the pages that ask before an operation that cannot be taken back.

Every view checks the model's view permission before it looks the job up, so a user who may
not see jobs cannot tell an existing id from a missing one (both are 403).
"""

from __future__ import annotations

from datetime import datetime
from typing import Any

from django.contrib import messages
from django.contrib.admin.utils import unquote
from django.core.exceptions import PermissionDenied, ValidationError
from django.http import Http404, HttpRequest, HttpResponse, HttpResponseNotAllowed, HttpResponseRedirect
from django.template.response import TemplateResponse
from django.urls import path, reverse
from django.utils import timezone
from django.utils.decorators import method_decorator
from django.utils.html import format_html
from django.utils.translation import gettext_lazy as _
from django.utils.translation import ngettext
from django.views.decorators.http import require_GET, require_http_methods

from .. import ops, store
from ..answers import answer_line_pattern
from ..engine.describe import live_summary
from ..errors import JobError
from ..explain import what_it_does
from ..family import retried
from ..models import Job, JobLog
from ..registry import known_kinds
from ..status import Phase, Status
from .console import page_version
from .display import (
    OPERATIONS,
    PAGE_ONLY_FIELDS,
    JobAdminParts,
    Operation,
    count,
    family_badge,
    label_of,
    time_tag,
)
from .explain import consequences
from .rows import prepare_rows
from .sections import Section, children_section, full_log, log_section, steps_section

#: Operations that cannot be taken back: their button opens a page that says what will happen.
CONFIRMED_FIRST = frozenset({"cancel", "revert", "retry_children"})
#: The job page's operations beyond the list's: copy an ended job, retry a parent's failed children.
PAGE_OPERATIONS = {
    operation.name: operation
    for operation in (
        Operation("run_again", ops.run_again, "operate", _("Run again"), _("Job %(id)s runs again."), ""),
        Operation("retry_children", ops.retry, "operate", _("Retry failed child jobs"), _("Retried."), ""),
    )
}


def answer_of(job: Job) -> str:
    """How the job's latest question was answered ("Resumed with 'approve' by Olga."), as its log
    says it; empty when it asked none (or the line has been trimmed)."""
    line = (
        JobLog.objects.filter(job_id=job.pk)
        .filter(line__regex=answer_line_pattern())
        .order_by("-id")
        .only("line", "at")
        .first()
    )
    if line is None:
        return ""
    return format_html("{} {}", line.line, time_tag(line.at))


def wait_checks_shown(summary: dict[str, Any], now: datetime) -> dict[str, Any]:
    """A timed wait's checks as the summary shows them: how many, and when the last was."""
    checks = summary["wait_checks"]
    if not checks:
        return {}
    last = datetime.fromisoformat(checks["last_at"])
    return {"wait_checks": count(checks["count"]), "last_check": time_tag(last, now)}


def failed_children(summary: dict[str, Any]) -> int:
    """How many of the job's children a retry of its failed children would queue again."""
    children = summary["children"]
    return retried(children["by_status"]) if children else 0


class JobPageMixin(JobAdminParts):
    """The job page's views, for ``JobAdmin``."""

    def get_urls(self):
        view = self.admin_site.admin_view
        return [
            *self.console_urls(),
            path(
                "<path:object_id>/operate/<str:operation>/",
                view(self.operate_view),
                name="django_durajobs_job_operate",
            ),
            path("<path:object_id>/log/", view(self.log_view), name="django_durajobs_job_log"),
            *super().get_urls(),
        ]

    def summary_context(self, request: HttpRequest, job: Job) -> dict[str, Any]:
        summary = live_summary(job)
        may = {"operate": self.has_operate_permission(request), "revert": self.has_revert_permission(request)}
        # Revert undoes what the run did: not offered while it has finished no step.
        undoable = job.status == Status.DONE or summary["completed_count"] > 0 or job.phase == Phase.REVERT
        buttons = [
            operation
            for operation in OPERATIONS.values()
            if summary[operation.allowed_flag]
            and may[operation.permission]
            and not (operation.name == "cancel" and summary["cancel_requested"])
            and not (operation.name == "pause" and summary["pause_requested"])
            and not (operation.name == "revert" and not undoable)
            # A question with offered answers is answered with them, not with a bare resume.
            and not (operation.name == "resume" and summary["actions"])
        ]
        earlier = summary["completed_count"] - len(summary["completed_steps"])
        children = summary["children"]
        retryable_children = failed_children(summary)
        now = timezone.now()
        done = summary["completed_count"]
        return {
            "job": job,
            "summary": summary,
            "status_label": label_of(job.status),
            "current_state": label_of(summary["current_step"]["state"]) if summary["current_step"] else "",
            "family": family_badge(children["overall"]) if children else "",
            "children_counts": [
                (status, label_of(status), count(number)) for status, number in children["by_status"].items()
            ]
            if children
            else [],
            "next_run": time_tag(job.next_run_at, now) if job.next_run_at else "",
            **wait_checks_shown(summary, now),
            "eta": time_tag(job.eta_at, now) if job.eta_at else "",
            "deadline": time_tag(job.next_run_at, now) if summary["deadline"] else "",
            "answer": answer_of(job),
            "unknown_kind": job.kind not in known_kinds(),
            "confirmed_first": CONFIRMED_FIRST,
            "may_run_again": may["operate"] and summary["terminal"],
            "retryable_children": count(retryable_children) if may["operate"] and retryable_children else "",
            "live_url": reverse("admin:django_durajobs_job_live", args=[job.pk]),
            "earlier_completed": count(earlier) if earlier else "",
            "earlier_count": earlier,
            "children_total": count(summary["children"]["total"]) if summary["children"] else "",
            "buttons": [(operation, what_it_does(operation.name, job, done)) for operation in buttons],
            "retry_children_help": what_it_does("retry_children", job, done, retryable_children),
            "run_again_help": what_it_does("run_again", job, done),
            "may_answer": may["operate"] and summary["can_resume"] and bool(summary["actions"]),
            "terminal": summary["terminal"],
            "opts": self.model._meta,
        }

    def page_sections(self, request: HttpRequest, job: Job) -> list[Section]:
        sections = [steps_section(request, job), log_section(job), children_section(request, job)]
        return [section for section in sections if section is not None]

    def render_change_form(self, request, context, add=False, change=False, form_url="", obj=None):
        if obj is not None:
            prepare_rows([obj])
            summary = self.summary_context(request, obj)
            context = {
                **context,
                **summary,
                "live_version": page_version(obj, summary["summary"]),
                "sections": self.page_sections(request, obj),
            }
        return super().render_change_form(request, context, add, change, form_url, obj)

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

    @method_decorator(require_http_methods(["GET", "POST"]))
    def operate_view(self, request: HttpRequest, object_id: str, operation: str) -> HttpResponse:
        """POST: the operation. GET: for one that cannot be taken back, the page that asks first."""
        job = self._job_or_404(request, object_id, defer=PAGE_ONLY_FIELDS)
        chosen = OPERATIONS.get(operation) or PAGE_OPERATIONS.get(operation)
        if chosen is None:
            raise Http404(_("No operation %(name)r.") % {"name": operation})
        if not getattr(self, f"has_{chosen.permission}_permission")(request, job):
            raise PermissionDenied
        if request.method == "GET":
            if chosen.name not in CONFIRMED_FIRST:
                return HttpResponseNotAllowed(["POST"])
            return self._confirm_operation(request, chosen, job)
        kwargs = (
            {"action": request.POST["action"]}
            if chosen.name == "resume" and request.POST.get("action")
            else {}
        )
        if chosen.name == "run_again":
            return self._run_again(request, job)
        if chosen.name == "retry_children":
            self._retry_children(request, job)
        else:
            self._apply(request, chosen, job, **kwargs)
        return HttpResponseRedirect(reverse("admin:django_durajobs_job_change", args=[job.pk]))

    def _confirm_operation(self, request: HttpRequest, operation: Operation, job: Job) -> HttpResponse:
        """As Django's delete confirmation: what will happen, then "Yes, I'm sure" or back."""
        summary = live_summary(job)
        context = {
            **self.admin_site.each_context(request),
            "title": _("Are you sure?"),
            "subtitle": None,
            "opts": self.model._meta,
            "object": job,
            "operation": operation,
            "consequences": consequences(
                operation.name, job, summary["completed_count"], failed_children(summary)
            ),
            "post_url": reverse("admin:django_durajobs_job_operate", args=[job.pk, operation.name]),
            "page_url": reverse("admin:django_durajobs_job_change", args=[job.pk]),
        }
        return TemplateResponse(request, "admin/django_durajobs/job/confirm_operation.html", context)

    def _run_again(self, request: HttpRequest, job: Job) -> HttpResponse:
        try:
            copy = ops.run_again(job, by=request.user)
        except JobError as refusal:
            self.message_user(request, str(refusal), messages.WARNING)
            return HttpResponseRedirect(reverse("admin:django_durajobs_job_change", args=[job.pk]))
        self.log_change(request, job, _("run again as %(id)s") % {"id": copy.pk})
        self.message_user(
            request,
            _("Job %(copy)s runs job %(id)s again.") % {"copy": copy.pk, "id": job.pk},
            messages.SUCCESS,
        )
        return HttpResponseRedirect(reverse("admin:django_durajobs_job_change", args=[copy.pk]))

    def _retry_children(self, request: HttpRequest, job: Job) -> None:
        outcome = ops.apply_to_many("retry", store.retried_children(job.pk), by=request.user)
        self.log_change(request, job, f"retry_children ({outcome.changed})")
        message = ngettext(
            "Retried %(count)s failed child job.", "Retried %(count)s failed child jobs.", outcome.changed
        ) % {"count": count(outcome.changed)}
        self.message_user(request, message, messages.SUCCESS if outcome.changed else messages.WARNING)

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
            raise Http404(_("No job %(id)r.") % {"id": object_id})
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
        if operation.name == "pause" and job.status == Status.RUNNING:
            done = _("Pause requested for job %(id)s; it pauses at its next step.")
        self.message_user(request, done % {"id": job.pk}, messages.SUCCESS)
        return True
