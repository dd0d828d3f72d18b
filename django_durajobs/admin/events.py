"""The event list: what was sent, by whom, with its payload redacted; an operator sends one here.

Sending goes through ``ops.send_event``, as in code: the first send of a name wins and wakes the
jobs waiting for it. An event is never edited; deleting one (``delete_event``) lets its name be
sent again.
"""

from __future__ import annotations

from typing import Any

from django import forms
from django.contrib import admin, messages
from django.core.exceptions import ValidationError
from django.http import HttpRequest
from django.utils.translation import gettext_lazy as _

from .. import ops
from ..errors import JobError
from ..models import Event
from ..values import to_event_name, to_event_payload
from .display import pretty_json


class SendEventForm(forms.ModelForm):
    """An event to send, checked as ``send_event`` checks it."""

    class Meta:
        model = Event
        fields = ("name", "payload")
        help_texts = {"payload": _("JSON; the jobs waiting for the event receive it.")}

    def clean_name(self) -> str:
        try:
            return to_event_name(self.cleaned_data["name"])
        except JobError as exc:
            raise ValidationError(exc.message) from None

    def clean_payload(self) -> Any:
        try:
            return to_event_payload(self.cleaned_data.get("payload"))
        except JobError as exc:
            raise ValidationError(exc.message) from None

    def validate_unique(self) -> None:
        """A name sent before is not an error: the send changes nothing, and says so."""


@admin.register(Event)
class EventAdmin(admin.ModelAdmin):
    form = SendEventForm
    list_display = ("name", "sent_at", "sent_by")
    search_fields = ("=name",)
    search_help_text = _("Search by the event's exact name.")
    date_hierarchy = "sent_at"
    show_full_result_count = False
    readonly_fields = ("name", "shown_payload", "sent_at", "sent_by")

    def get_fields(self, request: HttpRequest, obj: Event | None = None) -> Any:
        return ("name", "payload") if obj is None else self.readonly_fields

    def get_readonly_fields(self, request: HttpRequest, obj: Event | None = None) -> Any:
        return () if obj is None else self.readonly_fields

    # Sending is operating jobs: it wakes those waiting for the event.

    def has_add_permission(self, request: HttpRequest) -> bool:
        return request.user.has_perm("django_durajobs.operate_job")

    def has_view_permission(self, request: HttpRequest, obj: Event | None = None) -> bool:
        return super().has_view_permission(request, obj) or self.has_add_permission(request)

    def has_change_permission(self, request: HttpRequest, obj: Event | None = None) -> bool:
        return False

    def save_model(self, request: HttpRequest, obj: Event, form: forms.ModelForm, change: bool) -> None:
        sent = ops.send_event(obj.name, obj.payload, by=request.user)
        sent_event = Event.objects.get(name=obj.name)
        obj.pk, obj.sent_at, obj.sent_by = sent_event.pk, sent_event.sent_at, sent_event.sent_by
        if not sent:
            messages.warning(
                request,
                _("The event %(name)s was sent before, on %(at)s; this send changed nothing.")
                % {"name": obj.name, "at": sent_event.sent_at},
            )

    @admin.display(description=_("payload"))
    def shown_payload(self, event: Event) -> str:
        return pretty_json(event.payload)
