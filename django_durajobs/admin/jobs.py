"""The job list and the job page's fields: what ``JobAdmin`` shows, and who may do what.

Jobs are created by code and changed by operations (``actions``, ``pages``), never edited as
raw fields.
"""

from __future__ import annotations

import re

from django.contrib import admin
from django.contrib.admin.views.main import ChangeList
from django.db import connection
from django.db.models import QuerySet
from django.http import HttpRequest
from django.urls import reverse
from django.utils.html import format_html
from django.utils.text import Truncator
from django.utils.translation import gettext_lazy as _

from ..models import Job
from ..status import TERMINAL
from .actions import JobActionsMixin
from .display import PAGE_ONLY_FIELDS, pretty_json, status_badge
from .pages import JobPageMixin

#: A search term that is an id: ASCII digits, maybe after a "#".
ID_TERM = re.compile(r"#?([0-9]{1,20})", re.ASCII)


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


class JobChangeList(ChangeList):
    """The list reads what its columns show, not each job's subject, results and offered actions."""

    def get_queryset(self, request, exclude_parameters=None):
        return super().get_queryset(request, exclude_parameters).defer(*PAGE_ONLY_FIELDS, "actions")


@admin.register(Job)
class JobAdmin(JobActionsMixin, JobPageMixin, admin.ModelAdmin):
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
    actions = ("resume_jobs", "retry_jobs", "pause_jobs", "cancel_jobs", "revert_jobs", "delete_selected")
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

    def has_operate_permission(self, request: HttpRequest, obj: Job | None = None) -> bool:
        return request.user.has_perm("django_durajobs.operate_job")

    def has_revert_permission(self, request: HttpRequest, obj: Job | None = None) -> bool:
        return request.user.has_perm("django_durajobs.revert_job")

    def get_readonly_fields(self, request: HttpRequest, obj: Job | None = None) -> list[str]:
        return [field for _name, options in self.fieldsets for field in options["fields"]]

    def get_changelist(self, request: HttpRequest, **kwargs):
        return JobChangeList

    def get_search_results(self, request: HttpRequest, queryset: QuerySet, search_term: str):
        results, may_have_duplicates = super().get_search_results(request, queryset, search_term)
        pk = searched_id(search_term)
        if pk is not None:
            results |= queryset.filter(pk=pk)
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


def searched_id(term: str) -> int | None:
    """The job id a search term names ("42", "#42"), if it is one a job can have."""
    match = ID_TERM.fullmatch(term.strip())
    if match is None:
        return None
    pk = int(match[1])
    low, high = connection.ops.integer_field_range(Job._meta.pk.get_internal_type())
    return pk if low <= pk <= high else None
