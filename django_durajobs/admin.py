"""The Django admin as the operator's console: every job, its steps and log, and the operations.

Thin glue: what may be done comes from ``describe()`` and the operations in ``ops``; this module
checks permissions, calls them, and records who did what in Django's admin history.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from django.contrib import admin, messages
from django.contrib.admin.utils import unquote
from django.core.exceptions import PermissionDenied
from django.db.models import QuerySet
from django.http import Http404, HttpRequest, HttpResponse, HttpResponseRedirect
from django.template.response import TemplateResponse
from django.urls import path, reverse
from django.utils.decorators import method_decorator
from django.utils.html import format_html
from django.utils.text import Truncator
from django.utils.translation import gettext_lazy as _
from django.utils.translation import ngettext
from django.views.decorators.http import require_GET, require_POST

from . import ops
from .engine.describe import describe
from .engine.redact import redact
from .errors import JobError
from .models import Job, JobLog, JobStep
from .status import TERMINAL

#: An action over more jobs than this asks for confirmation first.
CONFIRM_OVER = 100


@dataclass(frozen=True)
class Operation:
    name: str
    run: Callable[..., Job]
    permission: str  # "operate" or "revert": ModelAdmin.has_<permission>_permission
    label: Any
    done: Any  # "Job %(id)s resumed."
    allowed_flag: str  # the describe() key that says whether the job's state allows it


OPERATIONS = {
    operation.name: operation
    for operation in (
        Operation("resume", ops.resume, "operate", _("Resume"), _("Job %(id)s resumed."), "can_resume"),
        Operation(
            "retry", ops.retry, "operate", _("Retry"), _("Job %(id)s queued for another try."), "can_retry"
        ),
        Operation("pause", ops.pause, "operate", _("Pause"), _("Job %(id)s paused."), "can_pause"),
        Operation("cancel", ops.cancel, "operate", _("Cancel"), _("Job %(id)s cancelled."), "can_cancel"),
        Operation(
            "revert", ops.revert, "revert", _("Revert"), _("Job %(id)s is being reverted."), "can_revert"
        ),
    )
}


def pretty_json(value: Any) -> str:
    """Redacted, indented JSON in a <pre>, escaped."""
    if value is None:
        return "—"
    return format_html(
        "<pre class='durajobs-json'>{}</pre>", json.dumps(redact(value), indent=2, ensure_ascii=False)
    )


def status_badge(status: str, label: Any = None) -> str:
    return format_html('<span class="durajobs-badge durajobs-{}">{}</span>', status, label or status)


class HasParentFilter(admin.SimpleListFilter):
    title = _("has parent")
    parameter_name = "has_parent"

    def lookups(self, request, model_admin):
        return (("yes", _("Yes")), ("no", _("No")))

    def queryset(self, request, queryset):
        if self.value() == "yes":
            return queryset.filter(parent__isnull=False)
        if self.value() == "no":
            return queryset.filter(parent__isnull=True)
        return queryset


class ReadOnlyInline(admin.TabularInline):
    extra = 0
    can_delete = False
    show_change_link = False
    classes = ("durajobs-inline",)

    def has_add_permission(self, request, obj=None) -> bool:
        return False

    def has_change_permission(self, request, obj=None) -> bool:
        return False

    def has_delete_permission(self, request, obj=None) -> bool:
        return False

    def has_view_permission(self, request, obj=None) -> bool:
        return request.user.has_perm("django_durajobs.view_job")


class JobStepInline(ReadOnlyInline):
    model = JobStep
    verbose_name_plural = _("steps")
    fields = readonly_fields = (
        "phase",
        "step_id",
        "title",
        "state_badge",
        "started_at",
        "ended_at",
        "detail_or_error",
        "shown_result",
    )
    ordering = ("phase", "position")

    @admin.display(description=_("state"))
    def state_badge(self, step: JobStep) -> str:
        return status_badge(step.state, step.get_state_display())

    @admin.display(description=_("detail / error"))
    def detail_or_error(self, step: JobStep) -> str:
        return step.error or step.detail or "—"

    @admin.display(description=_("result"))
    def shown_result(self, step: JobStep) -> str:
        return pretty_json(step.result)


class JobLogInline(ReadOnlyInline):
    model = JobLog
    verbose_name_plural = _("log")
    fields = readonly_fields = ("at", "line")
    ordering = ("id",)


class ChildJobInline(ReadOnlyInline):
    model = Job
    fk_name = "parent"
    verbose_name = _("child job")
    verbose_name_plural = _("child jobs")
    fields = readonly_fields = ("child", "status_badge", "error", "attempt", "next_run_at")
    ordering = ("created_at", "id")

    @admin.display(description=_("job"))
    def child(self, job: Job) -> str:
        url = reverse("admin:django_durajobs_job_change", args=[job.pk])
        return format_html('<a href="{}">#{} {}</a>', url, job.pk, job.label)

    @admin.display(description=_("status"))
    def status_badge(self, job: Job) -> str:
        return status_badge(job.status, job.get_status_display())


@admin.register(Job)
class JobAdmin(admin.ModelAdmin):
    list_display = (
        "id",
        "label_and_kind",
        "status_badge",
        "progress_bar",
        "attempts",
        "next_run_at",
        "reason",
        "subject_ref",
        "created_by",
        "updated_at",
    )
    list_display_links = ("id", "label_and_kind")
    list_filter = ("status", "kind", "queue", "actor_type", HasParentFilter)
    search_fields = ("label", "=idempotency_key", "=subject_id", "=external_ref")
    search_help_text = _("Search by id, label, idempotency key, subject id or external reference.")
    list_select_related = ("created_by",)
    ordering = ("-created_at", "-id")
    show_full_result_count = False
    list_per_page = 50
    actions = ("resume_jobs", "retry_jobs", "pause_jobs", "cancel_jobs", "revert_jobs")
    inlines = (JobStepInline, JobLogInline, ChildJobInline)
    change_form_template = "admin/django_durajobs/job/change_form.html"
    fieldsets = (
        (
            None,
            {
                "fields": (
                    "label",
                    "kind",
                    "status",
                    "phase",
                    "queue",
                    "priority",
                    "parent_link",
                    "created_by",
                    "actor_type",
                )
            },
        ),
        (
            _("Subject"),
            {
                "fields": (
                    "subject_type",
                    "subject_id",
                    "group_id",
                    "external_ref",
                    "idempotency_key",
                    "shown_subject",
                )
            },
        ),
        (
            _("Timing"),
            {
                "fields": (
                    "attempt",
                    "max_attempts",
                    "next_run_at",
                    "eta_at",
                    "progress",
                    "created_at",
                    "started_at",
                    "updated_at",
                    "ended_at",
                )
            },
        ),
        (
            _("Outcome"),
            {
                "fields": (
                    "shown_result",
                    "error",
                    "error_code",
                    "wait_reason",
                    "user_message",
                    "shown_actions",
                    "resume_action",
                    "shown_resume_data",
                )
            },
        ),
        (
            _("Worker"),
            {
                "classes": ("collapse",),
                "fields": (
                    "locked_by",
                    "locked_at",
                    "worker_losses",
                    "cancel_requested",
                    "waits_for_children",
                ),
            },
        ),
    )

    class Media:
        css = {"all": ("django_durajobs/admin.css",)}
        js = ("django_durajobs/job_summary.js",)

    # Jobs are created by code and changed by operations, never edited as raw fields.

    def has_add_permission(self, request: HttpRequest) -> bool:
        return False

    def has_change_permission(self, request: HttpRequest, obj: Job | None = None) -> bool:
        return False

    def has_delete_permission(self, request: HttpRequest, obj: Job | None = None) -> bool:
        """Deleting prunes history: only jobs that have ended (a parent takes its children along)."""
        return super().has_delete_permission(request, obj) and (obj is None or obj.status in TERMINAL)

    def delete_queryset(self, request: HttpRequest, queryset: QuerySet) -> None:
        unfinished = queryset.exclude(status__in=TERMINAL)
        if unfinished.exists():
            self.message_user(
                request,
                _("Jobs that have not ended were kept: %(ids)s.")
                % {"ids": ", ".join(str(pk) for pk in unfinished.values_list("pk", flat=True))},
                messages.WARNING,
            )
        super().delete_queryset(request, queryset.filter(status__in=TERMINAL))

    def has_operate_permission(self, request: HttpRequest, obj: Job | None = None) -> bool:
        return request.user.has_perm("django_durajobs.operate_job")

    def has_revert_permission(self, request: HttpRequest, obj: Job | None = None) -> bool:
        return request.user.has_perm("django_durajobs.revert_job")

    def get_inlines(self, request: HttpRequest, obj: Job | None = None):
        if obj is None or not obj.children.exists():
            return [inline for inline in self.inlines if inline is not ChildJobInline]
        return self.inlines

    def get_readonly_fields(self, request: HttpRequest, obj: Job | None = None) -> list[str]:
        return [field for _name, options in self.fieldsets for field in options["fields"]]

    def get_search_results(self, request: HttpRequest, queryset: QuerySet, search_term: str):
        results, may_have_duplicates = super().get_search_results(request, queryset, search_term)
        if search_term.strip().lstrip("#").isdigit():
            results |= queryset.filter(pk=int(search_term.strip().lstrip("#")))
        return results, may_have_duplicates

    # List columns ------------------------------------------------------------------------------

    @admin.display(description=_("job"), ordering="label")
    def label_and_kind(self, job: Job) -> str:
        return format_html("{}<br><small class='durajobs-kind'>{}</small>", job.label, job.kind)

    @admin.display(description=_("status"), ordering="status")
    def status_badge(self, job: Job) -> str:
        return status_badge(job.status, job.get_status_display())

    @admin.display(description=_("progress"), ordering="progress")
    def progress_bar(self, job: Job) -> str:
        return format_html(
            '<progress class="durajobs-progress" max="100" value="{}"></progress> {}%',
            job.progress,
            job.progress,
        )

    @admin.display(description=_("attempt"))
    def attempts(self, job: Job) -> str:
        return f"{job.attempt} / {job.max_attempts}"

    @admin.display(description=_("waiting for / error"))
    def reason(self, job: Job) -> str:
        text = job.error if job.status == "failed" else (job.wait_reason or job.user_message or job.error)
        return Truncator(text).chars(80) if text else ""

    @admin.display(description=_("subject"), ordering="subject_id")
    def subject_ref(self, job: Job) -> str:
        return " ".join(part for part in (job.subject_type, job.subject_id) if part)

    # Job page fields ---------------------------------------------------------------------------

    @admin.display(description=_("parent job"))
    def parent_link(self, job: Job) -> str:
        if job.parent_id is None:
            return "—"
        url = reverse("admin:django_durajobs_job_change", args=[job.parent_id])
        return format_html('<a href="{}">#{}</a>', url, job.parent_id)

    @admin.display(description=_("subject"))
    def shown_subject(self, job: Job) -> str:
        return pretty_json(job.subject)

    @admin.display(description=_("result"))
    def shown_result(self, job: Job) -> str:
        return pretty_json(job.result)

    @admin.display(description=_("offered actions"))
    def shown_actions(self, job: Job) -> str:
        return pretty_json(job.actions)

    @admin.display(description=_("resume data"))
    def shown_resume_data(self, job: Job) -> str:
        return pretty_json(job.resume_data)

    # The job page: summary, buttons, and its refresh ------------------------------------------

    def get_urls(self):
        view = self.admin_site.admin_view
        return [
            path(
                "<path:object_id>/operate/<str:operation>/",
                view(self.operate_view),
                name="django_durajobs_job_operate",
            ),
            path("<path:object_id>/summary/", view(self.summary_view), name="django_durajobs_job_summary"),
            *super().get_urls(),
        ]

    def summary_context(self, request: HttpRequest, job: Job) -> dict[str, Any]:
        summary = describe(job)
        may = {"operate": self.has_operate_permission(request), "revert": self.has_revert_permission(request)}
        buttons = [
            operation
            for operation in OPERATIONS.values()
            if summary[operation.allowed_flag]
            and may[operation.permission]
            and not (operation.name == "cancel" and summary["cancel_requested"])
            # A question with offered answers is answered with them, not with a bare resume.
            and not (operation.name == "resume" and summary["actions"] and job.status == "needs_user")
        ]
        return {
            "job": job,
            "summary": summary,
            "buttons": buttons,
            "may_answer": may["operate"] and job.status == "needs_user",
            "refresh_url": reverse("admin:django_durajobs_job_summary", args=[job.pk]),
            "terminal": job.status in TERMINAL,
            "opts": self.model._meta,
        }

    def change_view(self, request, object_id, form_url="", extra_context=None):
        job = self.get_object(request, unquote(object_id))
        if job is not None and self.has_view_permission(request, job):
            extra_context = {**(extra_context or {}), **self.summary_context(request, job)}
        return super().change_view(request, object_id, form_url, extra_context)

    @method_decorator(require_GET)
    def summary_view(self, request: HttpRequest, object_id: str) -> HttpResponse:
        job = self._job_or_404(request, object_id)
        return TemplateResponse(
            request, "admin/django_durajobs/job/summary.html", self.summary_context(request, job)
        )

    @method_decorator(require_POST)
    def operate_view(self, request: HttpRequest, object_id: str, operation: str) -> HttpResponse:
        job = self._job_or_404(request, object_id)
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

    def _job_or_404(self, request: HttpRequest, object_id: str) -> Job:
        job = self.get_object(request, unquote(object_id))
        if job is None:
            raise Http404(f"No job {object_id!r}.")
        if not self.has_view_permission(request, job):
            raise PermissionDenied
        return job

    def _apply(
        self, request: HttpRequest, operation: Operation, job: Job, *, alone: bool = True, **kwargs: Any
    ) -> bool:
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
        if alone:
            job.refresh_from_db()
            done = operation.done
            if operation.name == "cancel" and job.cancel_requested:
                done = _("Cancel requested for job %(id)s; it stops at its next step.")
            self.message_user(request, done % {"id": job.pk}, messages.SUCCESS)
        return True

    # Actions on selected jobs ------------------------------------------------------------------

    def _act_on_selection(self, request: HttpRequest, queryset: QuerySet, operation: Operation):
        jobs = list(queryset)
        if len(jobs) > CONFIRM_OVER and request.POST.get("confirmed") != "yes":
            context = {
                **self.admin_site.each_context(request),
                "title": _("Are you sure?"),
                "opts": self.model._meta,
                "operation": operation,
                "jobs": jobs,
                "count": len(jobs),
                "action_name": f"{operation.name}_jobs",
                "action_checkbox_name": admin.helpers.ACTION_CHECKBOX_NAME,
            }
            return TemplateResponse(request, "admin/django_durajobs/job/confirm_action.html", context)
        applied = sum(self._apply(request, operation, job, alone=False) for job in jobs)
        if applied:
            self.message_user(
                request,
                ngettext("%(action)s: %(count)d job.", "%(action)s: %(count)d jobs.", applied)
                % {"action": operation.label, "count": applied},
                messages.SUCCESS,
            )
        return None

    @admin.action(description=_("Resume selected jobs"), permissions=["operate"])
    def resume_jobs(self, request, queryset):
        return self._act_on_selection(request, queryset, OPERATIONS["resume"])

    @admin.action(description=_("Retry selected jobs"), permissions=["operate"])
    def retry_jobs(self, request, queryset):
        return self._act_on_selection(request, queryset, OPERATIONS["retry"])

    @admin.action(description=_("Pause selected jobs"), permissions=["operate"])
    def pause_jobs(self, request, queryset):
        return self._act_on_selection(request, queryset, OPERATIONS["pause"])

    @admin.action(description=_("Cancel selected jobs"), permissions=["operate"])
    def cancel_jobs(self, request, queryset):
        return self._act_on_selection(request, queryset, OPERATIONS["cancel"])

    @admin.action(description=_("Revert selected jobs"), permissions=["revert"])
    def revert_jobs(self, request, queryset):
        return self._act_on_selection(request, queryset, OPERATIONS["revert"])
