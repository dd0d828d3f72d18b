"""Actions on selected jobs, however many: the selection ("select all" across pages included) is
read a batch of ids at a time, each batch changed in a few statements, and the outcome told in
one message that counts the jobs skipped, by reason.
"""

from __future__ import annotations

from collections import Counter
from typing import TYPE_CHECKING, Any, cast

from django import forms
from django.contrib import admin, messages
from django.contrib.admin import helpers
from django.contrib.admin.models import CHANGE, DELETION, LogEntry
from django.core.exceptions import PermissionDenied
from django.db.models import Exists, OuterRef, QuerySet
from django.http import HttpRequest, HttpResponse
from django.template.response import TemplateResponse
from django.urls import reverse
from django.utils.html import format_html
from django.utils.text import capfirst
from django.utils.translation import gettext, ngettext_lazy, pgettext_lazy
from django.utils.translation import gettext_lazy as _

from .. import ops, store
from ..models import Job, JobLog, JobStep
from ..status import TERMINAL
from .display import OPERATIONS, JobAdminParts, count

if TYPE_CHECKING:
    from uuid import UUID

    from django_stubs_ext import StrOrPromise

#: An action over more jobs than this asks for confirmation first (a deletion always does).
CONFIRM_OVER = 100

DONE = {
    "resume": ngettext_lazy("Resumed %(shown)s job.", "Resumed %(shown)s jobs.", "count"),
    "retry": ngettext_lazy("Retried %(shown)s job.", "Retried %(shown)s jobs.", "count"),
    "pause": ngettext_lazy("Paused %(shown)s job.", "Paused %(shown)s jobs.", "count"),
    "cancel": ngettext_lazy("Cancelled %(shown)s job.", "Cancelled %(shown)s jobs.", "count"),
    "revert": ngettext_lazy("Reverting %(shown)s job.", "Reverting %(shown)s jobs.", "count"),
    "delete": ngettext_lazy("Deleted %(shown)s job.", "Deleted %(shown)s jobs.", "count"),
}
CANCEL_REQUESTED = ngettext_lazy(
    "%(shown)s of them is running: it stops at its next step.",
    "%(shown)s of them are running: they stop at their next step.",
    "count",
)
PAUSE_REQUESTED = ngettext_lazy(
    "%(shown)s of them is running: it pauses at its next step.",
    "%(shown)s of them are running: they pause at their next step.",
    "count",
)
SKIPPED = ngettext_lazy("%(shown)s was skipped:", "%(shown)s were skipped:", "count")
KEPT = ngettext_lazy("%(shown)s was kept:", "%(shown)s were kept:", "count")
#: Why jobs were skipped, by the code of the operation's refusal (or of the deletion's).
SKIPPED_BECAUSE = {
    "job_not_resumable": ngettext_lazy("%(shown)s is not waiting", "%(shown)s are not waiting", "count"),
    "invalid_input": ngettext_lazy(
        "%(shown)s asks a question (answer it on its page)",
        "%(shown)s ask a question (answer each on its page)",
        "count",
    ),
    "job_not_retryable": ngettext_lazy(
        "%(shown)s is not failed or needing a decision",
        "%(shown)s are not failed or needing a decision",
        "count",
    ),
    "job_not_pausable": ngettext_lazy(
        "%(shown)s is not queued, running or waiting for an outside event",
        "%(shown)s are not queued, running or waiting for an outside event",
        "count",
    ),
    "job_not_cancellable": ngettext_lazy(
        "%(shown)s has ended or is reverting", "%(shown)s have ended or are reverting", "count"
    ),
    "job_not_revertible": ngettext_lazy(
        "%(shown)s cannot be reverted in its state or has no revert",
        "%(shown)s cannot be reverted in their state or have no revert",
        "count",
    ),
    "job_not_found": ngettext_lazy("%(shown)s no longer exists", "%(shown)s no longer exist", "count"),
    "job_busy": ngettext_lazy(
        "%(shown)s kept changing (try again)", "%(shown)s kept changing (try again)", "count"
    ),
    "not_ended": ngettext_lazy("%(shown)s has not ended", "%(shown)s have not ended", "count"),
    "open_children": ngettext_lazy(
        "%(shown)s has child jobs that have not ended",
        "%(shown)s have child jobs that have not ended",
        "count",
    ),
}


def counted(text: Any, number: int) -> str:
    return text % {"count": number, "shown": count(number)}


def outcome_message(
    operation: str, changed: int, skipped: Counter[str], cancel_requested: int = 0, pause_requested: int = 0
) -> str:
    """ "Retried 19,990 jobs. 10 were skipped: 7 are not failed or needing a decision, 3 …"."""
    parts = [counted(DONE[operation], changed)]
    if cancel_requested:
        parts.append(counted(CANCEL_REQUESTED, cancel_requested))
    if pause_requested:
        parts.append(counted(PAUSE_REQUESTED, pause_requested))
    if skipped:
        reasons = [
            counted(SKIPPED_BECAUSE[code], number) if code in SKIPPED_BECAUSE else f"{count(number)} {code}"
            for code, number in skipped.most_common()
        ]
        heading = KEPT if operation == "delete" else SKIPPED
        # Translators: "10 were skipped:" and the reasons, such as "7 are not waiting, 3 have not ended".
        sentence = gettext("%(heading)s %(reasons)s.")
        parts.append(
            sentence % {"heading": counted(heading, sum(skipped.values())), "reasons": ", ".join(reasons)}
        )
    return " ".join(parts)


def open_child() -> Exists:
    return Exists(Job.objects.unfinished().filter(parent_id=OuterRef("pk")))


class JobActionsMixin(JobAdminParts):
    """The list's actions, for ``JobAdmin``."""

    def _confirmation(self, request: HttpRequest, name: str, label: Any, total: int) -> HttpResponse:
        """Asks before acting; posts the selection back as it came (with "select all" and the
        list's filters, which are in the URL), never one field per job."""
        context = {
            **self.admin_site.each_context(request),
            "title": _("Are you sure?"),
            "opts": self.model._meta,
            "label": label,
            "count": count(total),
            "total": total,
            "deleting": name == "delete",
            "action_name": "delete_selected" if name == "delete" else f"{name}_jobs",
            "action_checkbox_name": helpers.ACTION_CHECKBOX_NAME,
            "selected": request.POST.getlist(helpers.ACTION_CHECKBOX_NAME),
            "select_across": "1"
            if forms.BooleanField().to_python(request.POST.get("select_across"))
            else "0",
            "post_url": request.get_full_path(),
        }
        return TemplateResponse(request, "admin/django_durajobs/job/confirm_action.html", context)

    def _act_on_selection(self, request: HttpRequest, queryset: QuerySet, name: str) -> HttpResponse | None:
        total = queryset.count()
        if total > CONFIRM_OVER and request.POST.get("confirmed") != "yes":
            return self._confirmation(request, name, OPERATIONS[name].label, total)

        def record(jobs: list[Job]) -> None:
            LogEntry.objects.log_actions(_user_id(request), jobs, CHANGE, change_message=name)

        outcome = ops.apply_to_many(name, queryset, by=request.user, after_batch=record)
        self._tell(request, name, outcome)
        return None

    def _tell(self, request: HttpRequest, name: str, outcome: ops.BulkOutcome) -> None:
        level = messages.SUCCESS if outcome.changed and not outcome.refused else messages.WARNING
        message = outcome_message(
            name, outcome.changed, outcome.refused, outcome.cancel_requested, outcome.pause_requested
        )
        self.message_user(request, message, level)

    @admin.action(description=_("Resume selected jobs"), permissions=["operate"])
    def resume_jobs(self, request, queryset):
        return self._act_on_selection(request, queryset, "resume")

    @admin.action(description=_("Retry selected jobs"), permissions=["operate"])
    def retry_jobs(self, request, queryset):
        return self._act_on_selection(request, queryset, "retry")

    @admin.action(description=_("Pause selected jobs"), permissions=["operate"])
    def pause_jobs(self, request, queryset):
        return self._act_on_selection(request, queryset, "pause")

    @admin.action(description=_("Cancel selected jobs"), permissions=["operate"])
    def cancel_jobs(self, request, queryset):
        return self._act_on_selection(request, queryset, "cancel")

    @admin.action(description=_("Revert selected jobs"), permissions=["revert"])
    def revert_jobs(self, request, queryset):
        return self._act_on_selection(request, queryset, "revert")

    # Deleting ------------------------------------------------------------------------------------

    @admin.action(description=_("Delete selected jobs"), permissions=["delete"])
    def delete_selected(self, request, queryset):
        """Django's deletion, for any selection: jobs that have not ended, and jobs with child jobs
        that have not ended, are kept (deleting a job deletes its children)."""
        if request.POST.get("confirmed") != "yes":
            return self._confirmation(
                request, "delete", pgettext_lazy("job operation", "Delete"), queryset.count()
            )
        deleted = 0
        kept: Counter[str] = Counter()
        for batch in ops.id_batches(queryset):
            jobs = Job.objects.filter(pk__in=batch).annotate(open_children=open_child()).order_by("pk")
            deletable = []
            for job in jobs.only("id", "label", "status"):
                if job.status not in TERMINAL:
                    kept["not_ended"] += 1
                elif job.open_children:
                    kept["open_children"] += 1
                else:
                    deletable.append(job)
            if deletable:
                LogEntry.objects.log_actions(_user_id(request), deletable, DELETION)
                store.delete_jobs([job.pk for job in deletable])
                deleted += len(deletable)
        self._tell(request, "delete", ops.BulkOutcome(deleted, kept))
        return None

    def delete_view(self, request, object_id, extra_context=None):
        if not self.has_view_permission(request):  # before the lookup: a missing id answers alike
            raise PermissionDenied
        return super().delete_view(request, object_id, extra_context)

    def get_deleted_objects(self, objs, request):
        """What deleting a job takes along, counted in SQL (not every step and log line listed),
        or why it cannot be deleted yet."""
        deleted: list[Any] = []
        model_count: Counter[StrOrPromise] = Counter()
        protected: list[str] = []
        for job in objs:
            still_open = list(
                Job.objects.unfinished()
                .filter(parent_id=job.pk)
                .order_by("id")
                .values_list("pk", flat=True)[:11]
            )
            if still_open:
                protected.append(open_children_reason(job, still_open))
                continue
            family = _family_counts(job)
            model_count.update(family)
            url = reverse("admin:django_durajobs_job_change", args=[job.pk])
            jobs, steps, lines = family.values()
            taken_along = (
                (_("child jobs"), jobs - 1),
                (JobStep._meta.verbose_name_plural, steps),
                (JobLog._meta.verbose_name_plural, lines),
            )
            deleted += [
                format_html('{}: <a href="{}">{}</a>', capfirst(Job._meta.verbose_name), url, job),
                [f"{capfirst(name)}: {count(number)}" for name, number in taken_along if number],
            ]
        return deleted, dict(model_count), set(), protected


def open_children_reason(job: Job, still_open: list[int]) -> str:
    """ "Job 5 has child jobs that have not ended: 7, 8, 9; delete it once they end."."""
    shown = ", ".join(str(pk) for pk in still_open[:10])
    if len(still_open) > 10:
        more = Job.objects.unfinished().filter(parent_id=job.pk).count() - 10
        shown = _("%(ids)s and %(more)s more") % {"ids": shown, "more": count(more)}
    return _("Job %(id)s has child jobs that have not ended: %(ids)s; delete it once they end.") % {
        "id": job.pk,
        "ids": shown,
    }


def _user_id(request: HttpRequest) -> int | str | UUID:
    """The signed-in user's id: the admin's views serve no one else (the stubs allow an anonymous
    user's None)."""
    return cast("int | str | UUID", request.user.pk)


def _family_counts(job: Job) -> dict[StrOrPromise, int]:
    """The job and its descendants (deleted with it), their steps and their log lines: one
    generation at a time, each counted in SQL."""
    # Set on every model class once it is made; the stubs allow None for before.
    names = cast(
        "tuple[StrOrPromise, StrOrPromise, StrOrPromise]",
        (Job._meta.verbose_name_plural, JobStep._meta.verbose_name_plural, JobLog._meta.verbose_name_plural),
    )
    totals = dict.fromkeys(names, 0)
    lookup = "pk"
    while True:
        generation = Job.objects.filter(**{lookup: job.pk})
        jobs = generation.count()
        if not jobs:
            return totals
        totals[names[0]] += jobs
        totals[names[1]] += JobStep.objects.filter(job__in=generation).count()
        totals[names[2]] += JobLog.objects.filter(job__in=generation).count()
        lookup = "parent_id" if lookup == "pk" else f"parent__{lookup}"
