"""The schedule list: enable and disable schedules, add one for any registered kind, see what they made.

Schedules declared in code or settings are written by the workers; here only whether they are
enabled changes. Every row is written by the store (``save_schedule``, ``set_schedules_enabled``,
``delete_schedules``), which works out each schedule's next moment.
"""

from __future__ import annotations

from typing import Any
from urllib.parse import urlencode

from django import forms
from django.contrib import admin, messages
from django.core.exceptions import ValidationError
from django.db.models import QuerySet
from django.http import HttpRequest
from django.urls import reverse
from django.utils.html import format_html
from django.utils.translation import gettext_lazy as _
from django.utils.translation import ngettext

from .. import store
from ..errors import JobError
from ..models import Schedule
from ..registry import known_kinds
from ..schedules import checked_spec

DEFINITION_FIELDS = ("name", "kind", "subject", "cron", "every_seconds", "timezone", "missed")


class ScheduleForm(forms.ModelForm):
    """A schedule's definition, checked as a declared one is."""

    class Meta:
        model = Schedule
        fields = (*DEFINITION_FIELDS, "enabled")

    def __init__(self, *args, **kwargs) -> None:
        super().__init__(*args, **kwargs)
        if "kind" in self.fields:  # not when the definition is read-only
            self.fields["kind"] = forms.ChoiceField(
                label=_("kind"),
                choices=[("", "---------")] + [(kind, kind) for kind in sorted(known_kinds())],
            )

    def clean(self) -> dict[str, Any]:
        super().clean()
        data = self.cleaned_data
        if "kind" in self.fields and not self.errors:
            try:
                checked_spec(
                    name=data["name"],
                    kind=data["kind"],
                    cron=data.get("cron") or None,
                    every=data.get("every_seconds"),
                    subject=data.get("subject"),
                    timezone=data.get("timezone"),
                    missed=data.get("missed"),
                )
            except JobError as exc:
                raise ValidationError(exc.message) from None
        return data


@admin.register(Schedule)
class ScheduleAdmin(admin.ModelAdmin):
    form = ScheduleForm
    list_display = (
        "name",
        "kind",
        "timing",
        "enabled",
        "last_run_at",
        "next_run_at",
        "missed",
        "source",
        "jobs",
    )
    list_filter = ("enabled", "source", "kind")
    search_fields = ("name", "kind")
    actions = ("enable_schedules", "disable_schedules")
    ordering = ("name",)

    def get_fields(self, request: HttpRequest, obj: Schedule | None = None) -> tuple[str, ...]:
        shown = (*DEFINITION_FIELDS, "enabled")
        if obj is None:
            return shown
        return (*shown, "source", "last_run_at", "next_run_at", "last_job_link", "jobs")

    def get_readonly_fields(self, request: HttpRequest, obj: Schedule | None = None) -> tuple[str, ...]:
        if obj is None:
            return ()
        tick = ("source", "last_run_at", "next_run_at", "last_job_link", "jobs")
        return (*DEFINITION_FIELDS, *tick) if obj.source != Schedule.Source.ADMIN else ("name", *tick)

    def has_delete_permission(self, request: HttpRequest, obj: Schedule | None = None) -> bool:
        """A declared schedule is deleted by removing it from the code or settings, not here."""
        if obj is not None and obj.source != Schedule.Source.ADMIN:
            return False
        return super().has_delete_permission(request, obj)

    def get_actions(self, request: HttpRequest, action_location: Any = None) -> dict[str, Any]:
        # Django 6.1 says where the actions show (``action_location``); Django 5.2 does not.
        where = {} if action_location is None else {"action_location": action_location}
        actions = super().get_actions(request, **where)
        actions.pop("delete_selected", None)  # declared schedules are not deleted here
        return actions

    def save_model(self, request: HttpRequest, obj: Schedule, form: forms.Form, change: bool) -> None:
        if not change:
            obj.source = Schedule.Source.ADMIN
        store.save_schedule(obj)

    def delete_model(self, request: HttpRequest, obj: Schedule) -> None:
        store.delete_schedules([obj.pk])

    @admin.action(description=_("Enable selected schedules"), permissions=["change"])
    def enable_schedules(self, request: HttpRequest, queryset: QuerySet) -> None:
        self._set_enabled(request, queryset, True)

    @admin.action(description=_("Disable selected schedules"), permissions=["change"])
    def disable_schedules(self, request: HttpRequest, queryset: QuerySet) -> None:
        self._set_enabled(request, queryset, False)

    def _set_enabled(self, request: HttpRequest, queryset: QuerySet, enabled: bool) -> None:
        try:
            changed = store.set_schedules_enabled(queryset.values_list("pk", flat=True), enabled)
        except JobError as exc:
            self.message_user(request, exc.message, messages.ERROR)
            return
        message = (
            ngettext("%(count)d schedule enabled.", "%(count)d schedules enabled.", changed)
            if enabled
            else ngettext("%(count)d schedule disabled.", "%(count)d schedules disabled.", changed)
        )
        self.message_user(request, message % {"count": changed}, messages.SUCCESS)

    @admin.display(description=_("timing"))
    def timing(self, schedule: Schedule) -> str:
        if schedule.every_seconds is not None:
            return _("every %(seconds)s s") % {"seconds": schedule.every_seconds}
        return f"{schedule.cron} ({schedule.timezone})" if schedule.timezone else schedule.cron

    @admin.display(description=_("jobs it made"))
    def jobs(self, schedule: Schedule) -> str:
        query = urlencode({"idempotency_key__startswith": f"schedule:{schedule.name}:"})
        return format_html(
            '<a href="{}?{}">{}</a>', reverse("admin:django_durajobs_job_changelist"), query, _("Jobs")
        )

    @admin.display(description=_("last job"))
    def last_job_link(self, schedule: Schedule) -> str:
        if schedule.last_job_id is None:
            return "-"
        url = reverse("admin:django_durajobs_job_change", args=[schedule.last_job_id])
        return format_html('<a href="{}">#{}</a>', url, schedule.last_job_id)
