"""The job list and the job page's fields: what ``JobAdmin`` shows, and who may do what.

Jobs are created by code and changed by operations (``actions``, ``pages``), never edited as
raw fields.

Over 400 lines: the list's columns and the page's fields read the same loaded job; the page's read-
only sections are the seam to split along.
"""

from __future__ import annotations

import re
from urllib.parse import urlencode

import django
from django import forms
from django.contrib import admin
from django.contrib.admin.utils import flatten_fieldsets
from django.contrib.admin.views.main import ChangeList
from django.contrib.auth import get_user_model
from django.db import router
from django.db.models import Q, QuerySet
from django.http import HttpRequest
from django.urls import reverse
from django.utils import timezone
from django.utils.html import format_html
from django.utils.text import Truncator
from django.utils.translation import gettext_lazy as _
from django.utils.translation import ngettext

from .. import store
from ..engine.describe import open_question, version_warning, waiting_for
from ..family import overall
from ..models import Job
from ..status import TERMINAL, Status
from ..transitions import HELD_STATUSES
from .actions import JobActionsMixin
from .console import ConsoleMixin
from .display import PAGE_ONLY_FIELDS, count, family_badge, pretty_json, progress_bar, status_badge, time_tag
from .filters import ActorTypeFilter, KindFilter, QueueFilter
from .listing import CappedPaginator
from .pages import JobPageMixin, answer_of
from .rerunning import RerunMixin
from .rows import prepare_rows

#: A search term that is an id: ASCII digits, maybe after a "#".
ID_TERM = re.compile(r"#?([0-9]{1,20})", re.ASCII)


class HasParentFilter(admin.SimpleListFilter):
    """Child jobs are listed on their parent's page. The list leaves them out unless asked to, or
    unless it is narrowed by another filter or a search (the failed jobs include failed children)."""

    title = _("child jobs")
    parameter_name = "has_parent"
    #: Parameters of the list that do not narrow it down.
    NOT_NARROWING = frozenset({"has_parent", "o", "p", "e", "_popup", "_to_field"})

    def lookups(self, request, model_admin):
        return (("no", _("Hidden")), ("all", _("Shown too")), ("yes", _("Only child jobs")))

    def choices(self, changelist):
        for lookup, title in self.lookup_choices:
            yield {
                "selected": self.value() == lookup or (self.value() is None and lookup == "no"),
                "query_string": changelist.get_query_string({self.parameter_name: lookup}),
                "display": title,
            }

    def queryset(self, request, queryset):
        if self.value() == "yes":
            return queryset.filter(parent__isnull=False)
        narrowed = any(name not in self.NOT_NARROWING for name in request.GET)
        if self.value() == "all" or (self.value() is None and narrowed):
            return queryset
        return queryset.filter(parent__isnull=True)


class WaitsForEventFilter(admin.SimpleListFilter):
    title = _("waits for an event")
    parameter_name = "waits_for_event"

    def lookups(self, request, model_admin):
        return (("yes", _("Yes")), ("no", _("No")))

    def queryset(self, request, queryset):
        if self.value() == "yes":
            return queryset.filter(status=Status.AWAITING_EXTERNAL).exclude(waits_for_event="")
        if self.value() == "no":
            return queryset.filter(waits_for_event="")
        return queryset


def creators_beside_jobs() -> bool:
    """Whether the users live in the jobs' database, so that a query may join them in."""
    return router.db_for_read(get_user_model()) == store.jobs_connection().alias


class JobChangeList(ChangeList):
    """The list reads what its columns show, not each job's subject, results and offered actions;
    why a limit holds a job of the page back is counted once for the whole page."""

    def get_queryset(self, request, exclude_parameters=None):
        jobs = super().get_queryset(request, exclude_parameters).defer(*PAGE_ONLY_FIELDS, "actions")
        return jobs if creators_beside_jobs() else jobs.prefetch_related("created_by")

    def get_results(self, request):
        super().get_results(request)
        #: "10,000" when there are more jobs than the list counts (``listing.py``), else "".
        self.more_than = count(self.paginator.cap) if self.paginator.capped else ""
        self.pages_as_list = django.VERSION >= (6, 0)  # Django 6's paginator markup, or 5.2's
        prepare_rows(list(self.result_list))


@admin.register(Job)
class JobAdmin(JobActionsMixin, RerunMixin, ConsoleMixin, JobPageMixin, admin.ModelAdmin):
    # What matters most comes first: the reason column must show at 1,280 px with the sidebar open.
    list_display = (
        "id",
        "label_and_kind",
        "status_badge",
        "reason",
        "progress_bar",
        "attempts",
        "next_run",
        "updated",
        "subject_ref",
        "created_by",
    )
    list_display_links = ("id", "label_and_kind")
    # No filter, count or search reads every job (issue 27): the choices come from the code and
    # the settings (filters.py), the count stops at COUNT_CAP (listing.py), and each search reads
    # an index (get_search_results).
    list_filter = (
        "status",
        ("kind", KindFilter),
        ("queue", QueueFilter),
        ("actor_type", ActorTypeFilter),
        HasParentFilter,
        WaitsForEventFilter,
    )
    search_fields = ("label", "idempotency_key", "subject_type", "subject_id", "waits_for_event")
    search_help_text = _(
        "Search by id (42 or #42), the label's beginning, an idempotency key, a subject as the list "
        "shows it (type and id) or the event a job waits for."
    )
    ordering = ("-created_at", "-id")
    show_full_result_count = False
    show_facets = admin.ShowFacets.NEVER  # a count of every job for each choice of every filter
    paginator = CappedPaginator
    list_per_page = 50
    actions = (
        "resume_jobs",
        "retry_jobs",
        "pause_jobs",
        "cancel_jobs",
        "revert_jobs",
        "rerun_jobs",
        "delete_selected",
    )
    change_form_template = "admin/django_durajobs/job/change_form.html"
    change_list_template = "admin/django_durajobs/job/change_list.html"
    fieldsets = (
        (
            None,
            {
                "fields": (
                    "label",
                    "kind",
                    "shown_version",
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
                    "timeout",
                    "time_left",
                    "next_run",
                    "eta",
                    "shown_progress",
                    "created",
                    "started",
                    "updated",
                    "ended",
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
                    "shown_wait_reason",
                    "awaited_event",
                    "user_message",
                    "shown_actions",
                    "on_deadline",
                    "answer",
                    "shown_resume_data",
                )
            },
        ),
        (
            _("Worker"),
            {
                "classes": ("collapse",),
                "fields": (
                    "concurrency_key",
                    "locked_by",
                    "locked_at",
                    "worker_losses",
                    "cancel_requested",
                    "pause_requested",
                    "waits_for_children",
                ),
            },
        ),
    )

    @property
    def media(self) -> forms.Media:
        """The console's script, after this app's own JavaScript catalog (admin's catalog, which
        the admin's templates load first, holds only the admin's texts)."""
        catalog = reverse(f"{self.admin_site.name}:django_durajobs_job_jsi18n")
        return super().media + forms.Media(
            css={"all": ("django_durajobs/admin.css",)}, js=(catalog, "django_durajobs/console.js")
        )

    # Jobs are created by code and changed by operations, never edited as raw fields.

    def get_list_select_related(self, request: HttpRequest) -> tuple[str, ...]:
        """The creators joined in; from another database, one query for the page (the list's)."""
        return ("created_by",) if creators_beside_jobs() else ()

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
        return flatten_fieldsets(self.fieldsets)

    def get_changelist(self, request: HttpRequest, **kwargs):
        return JobChangeList

    def changelist_view(self, request: HttpRequest, extra_context=None):
        """Django's list; "All … selected" names no number beyond the jobs it counts."""
        response = super().changelist_view(request, extra_context)
        context = getattr(response, "context_data", None) or {}
        more_than = getattr(context.get("cl"), "more_than", "")
        if more_than:
            context["selection_note_all"] = _("All jobs that match selected (more than %(number)s)") % {
                "number": more_than
            }
        return response

    def get_search_results(self, request: HttpRequest, queryset: QuerySet, search_term: str):
        """The jobs whose id, label's beginning (in any case), idempotency key, subject ("site
        site-xyz", as the list shows it) or awaited event is the term: each read through an index,
        however many jobs there are."""
        term = search_term.strip()
        if not term:
            return queryset, False
        matches = Q(label__istartswith=term) | Q(idempotency_key=term) | Q(waits_for_event=term)
        subject_type, _space, subject_id = term.partition(" ")
        if subject_id.strip():
            matches |= Q(subject_type=subject_type, subject_id=subject_id.strip())
        pk = searched_id(term)
        if pk is not None:
            matches |= Q(pk=pk)
        return queryset.filter(matches), False

    # List columns ------------------------------------------------------------------------------

    @admin.display(description=_("job"), ordering="label")
    def label_and_kind(self, job: Job) -> str:
        if job.parent_id is not None:
            return format_html(
                "<span class='durajobs-child'>↳ {}<br><small class='durajobs-kind'>{} · {}</small></span>",
                job.label,
                job.kind,
                _("child of #%(id)s") % {"id": job.parent_id},
            )
        return format_html("{}<br><small class='durajobs-kind'>{}</small>", job.label, job.kind)

    @admin.display(description=_("status"), ordering="status")
    def status_badge(self, job: Job) -> str:
        badge = status_badge(job.status, job.get_status_display())
        family = getattr(job, "family", None)
        if family:
            total = sum(family.values())
            link = format_html(
                '<a href="{}#children-group">{}</a>',
                reverse("admin:django_durajobs_job_change", args=[job.pk]),
                ngettext("%(count)s child job", "%(count)s child jobs", total) % {"count": count(total)},
            )
            badge = format_html("{}<br>{} <small>({})</small>", badge, family_badge(overall(family)), link)
        if job.pause_requested and job.status == Status.RUNNING:
            return format_html("{}<br><small>{}</small>", badge, _("pause requested"))
        return badge

    @admin.display(description=_("progress"), ordering="progress")
    def progress_bar(self, job: Job) -> str:
        return progress_bar(getattr(job, "shown_progress", job.progress))

    @admin.display(description=_("next run"), ordering="next_run_at")
    def next_run(self, job: Job) -> str:
        return time_tag(job.next_run_at) if job.status not in TERMINAL else "—"

    @admin.display(description=_("updated"), ordering="updated_at")
    def updated(self, job: Job) -> str:
        return time_tag(job.updated_at)

    # Job page fields ---------------------------------------------------------------------------

    @admin.display(description=_("ETA"))
    def eta(self, job: Job) -> str:
        return time_tag(job.eta_at)

    @admin.display(description=_("progress"))
    def shown_progress(self, job: Job) -> str:
        return progress_bar(getattr(job, "shown_progress", job.progress))

    @admin.display(description=_("created"))
    def created(self, job: Job) -> str:
        return time_tag(job.created_at)

    @admin.display(description=_("started"))
    def started(self, job: Job) -> str:
        return time_tag(job.started_at)

    @admin.display(description=_("ended"))
    def ended(self, job: Job) -> str:
        return time_tag(job.ended_at)

    @admin.display(description=_("answer"))
    def answer(self, job: Job) -> str:
        """The answer the job's question got: its action while the run has not seen it through,
        then as its log tells it."""
        return answer_of(job) or job.resume_action or "—"

    @admin.display(description=_("attempt"))
    def attempts(self, job: Job) -> str:
        return f"{job.attempt} / {job.max_attempts}"

    @admin.display(description=_("waiting for / error"))
    def reason(self, job: Job) -> str:
        shown = waiting_for(job, getattr(job, "family", None), getattr(job, "held_back_reason", None))
        text = job.error if job.status == Status.FAILED else (shown or open_question(job) or job.error)
        return Truncator(text).chars(80) if text else ""

    @admin.display(description=_("subject"), ordering="subject_id")
    def subject_ref(self, job: Job) -> str:
        return " ".join(part for part in (job.subject_type, job.subject_id) if part)

    @admin.display(description=_("parent job"))
    def parent_link(self, job: Job) -> str:
        if job.parent_id is None:
            return "—"
        url = reverse("admin:django_durajobs_job_change", args=[job.parent_id])
        return format_html('<a href="{}">#{}</a>', url, job.parent_id)

    @admin.display(description=_("wait reason"))
    def shown_wait_reason(self, job: Job) -> str:
        """The reason the job gave (a parent waiting for its children: how many are open now), that it
        resumes after an interruption, or the limit that holds it back now."""
        children = store.children_counts([job.pk]).get(job.pk) if job.waits_for_children else None
        return waiting_for(job, children, None) or store.held_back_reason(job) or ""

    @admin.display(description=_("waits for event"))
    def awaited_event(self, job: Job) -> str:
        """The event's name, and where an operator sends it."""
        if not job.waits_for_event:
            return "—"
        url = f"{reverse('admin:django_durajobs_event_add')}?{urlencode({'name': job.waits_for_event})}"
        return format_html('{} <a class="button" href="{}">{}</a>', job.waits_for_event, url, _("Send it"))

    @admin.display(description=_("time left"))
    def time_left(self, job: Job) -> str:
        """What is left of the try's timeout: it counts from the try's claim, so waits spend none."""
        if not job.timeout:
            return "—"
        if job.status not in HELD_STATUSES or job.try_started_at is None:
            return _("%(seconds)s s for its next try; waiting counts for nothing") % {
                "seconds": f"{job.timeout:g}"
            }
        left = job.timeout - (timezone.now() - job.try_started_at).total_seconds()
        if left <= 0:
            return _("past its timeout by %(seconds)s s") % {"seconds": f"{-left:.0f}"}
        return _("%(left)s s of %(seconds)s s") % {"left": f"{left:.0f}", "seconds": f"{job.timeout:g}"}

    @admin.display(description=_("kind version"))
    def shown_version(self, job: Job) -> str:
        """The version the job started with, and a warning when no running worker has it."""
        warning = version_warning(job, store.job_version_unserved(job))
        if warning:
            return format_html('{} <strong class="errornote">{}</strong>', job.kind_version, warning)
        return job.kind_version or "—"

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
    low, high = store.jobs_connection().ops.integer_field_range(Job._meta.pk.get_internal_type())
    return pk if low <= pk <= high else None
