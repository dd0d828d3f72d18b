"""``{% job_widget job %}``: one job's steps, progress, retry and ETA line and offered answers,
live, for a project's own page (``static/django_durajobs/widget.js``; docs/end-users.md)."""

from __future__ import annotations

from typing import Any

from django import template
from django.template.loader import render_to_string
from django.urls import reverse
from django.utils.safestring import SafeString
from django.utils.translation import gettext as _

from ..access import ACTS, access_policy
from ..engine.describe import describe
from ..errors import JobError
from ..status import Status, StepState
from ..views.replies import visible_job

register = template.Library()


def widget_texts() -> dict[str, Any]:
    """The widget's words, in the page's language: the script writes none of its own."""
    return {
        "statuses": {status.value: str(status.label) for status in Status},
        "step_states": {state.value: str(state.label) for state in StepState},
        "progress": _("Progress"),
        "steps": _("Steps"),
        "attempt": _("Attempt %(attempt)s of %(max_attempts)s"),
        "next_try": _("Next try %(when)s"),
        "eta": _("Expected to finish %(when)s"),
        "question": _("Your answer is needed"),
        "cancel": _("Cancel the job"),
        "retry": _("Try again"),
        "cancel_requested": _("Cancel requested; it stops at its next step."),
        "reconnecting": _("Connection lost; reconnecting…"),
        "failed_request": _("The request failed; try again."),
    }


@register.simple_tag(takes_context=True)
def job_widget(context: template.Context, job: Any) -> SafeString:
    """The widget of ``job`` (a ``Job`` or its id) if the request may see it; nothing otherwise."""
    request = context["request"]
    try:
        shown = visible_job(request, str(getattr(job, "pk", job)))
    except JobError:
        return SafeString("")
    urls = {name: reverse(f"durajobs:{name}", args=[shown.pk]) for name in ("events", *ACTS)}
    policy = access_policy()
    may = {act: policy.may(request, shown, act) for act in ACTS}
    widget = {"summary": describe(shown), "texts": widget_texts(), "urls": urls, "may": may}
    return SafeString(
        render_to_string("django_durajobs/widget.html", {"job": shown, "widget": widget}, request)
    )
