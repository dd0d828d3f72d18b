"""HTML bits every admin page of a job shares: badges, JSON values, and the operations' buttons."""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime
from typing import TYPE_CHECKING, Any

from django.utils import timezone
from django.utils.html import format_html
from django.utils.translation import gettext_lazy as _
from django.utils.translation import pgettext_lazy

from .. import ops
from ..engine.describe import RETRYING
from ..engine.moments import exact, relative
from ..explain import count
from ..models import Job
from ..redaction import redact
from ..status import Status, StepState

if TYPE_CHECKING:
    from django.contrib import admin
    from django.http import HttpRequest

    class JobAdminParts(admin.ModelAdmin[Job]):
        """What the mixins of ``JobAdmin`` use of it: a ModelAdmin, and its permissions of its own."""

        def has_operate_permission(self, request: HttpRequest, obj: Job | None = None) -> bool: ...

        def has_revert_permission(self, request: HttpRequest, obj: Job | None = None) -> bool: ...

        # The parts each mixin uses of the others.
        def console_urls(self) -> list[Any]: ...

        def _job_or_404(self, request: HttpRequest, object_id: str, defer: tuple[str, ...] = ()) -> Job: ...

        def summary_context(self, request: HttpRequest, job: Job) -> dict[str, Any]: ...

        def page_sections(self, request: HttpRequest, job: Job) -> list[Any]: ...

else:
    JobAdminParts = object


#: What a job stores as given, and only its own page shows: other views leave it unread.
PAGE_ONLY_FIELDS = ("subject", "result", "resume_data")


def pretty_json(value: Any, limit: int | None = None) -> str:
    """Redacted, indented JSON in a <pre>, escaped; past ``limit`` characters, cut and said so."""
    if value is None:
        return "—"
    text = json.dumps(redact(value), indent=2, ensure_ascii=False)
    if limit is not None and len(text) > limit:
        return format_html(
            "<pre class='durajobs-json'>{}…</pre><small class='durajobs-note'>{}</small>",
            text[:limit],
            _("%(count)s characters in all") % {"count": count(len(text))},
        )
    return format_html("<pre class='durajobs-json'>{}</pre>", text)


def label_of(status: str) -> Any:
    """A job status's or a step state's label ("Needs a decision"), never its code."""
    if status == RETRYING:
        return _("Failed; trying again")
    for choices in (Status, StepState):
        if status in choices.values:
            return choices(status).label
    return status


def status_badge(status: str, label: Any = None) -> str:
    return format_html(
        '<span class="durajobs-badge durajobs-{}">{}</span>', status, label or label_of(status)
    )


#: How a family of child jobs is doing (``children_summary()["overall"]``), in words.
FAMILY = {
    "none": _("none"),
    "done": _("all done"),
    "partial": _("partly failed"),
    "failed": _("none done"),
    "running": _("still running"),
}


def family_badge(overall: str) -> str:
    """The family's badge: "Child jobs: partly failed" (not a bare "done" beside the parent's status)."""
    return format_html(
        '<span class="durajobs-badge durajobs-family durajobs-{}">{}</span>',
        overall,
        _("Child jobs: %(overall)s") % {"overall": FAMILY.get(overall, overall)},
    )


def time_tag(moment: datetime | None, now: datetime | None = None) -> str:
    """A moment as "in 8 s" or "3 min ago", the exact time on hover; the console's script keeps
    the relative text current."""
    if moment is None:
        return "—"
    return format_html(
        '<time datetime="{}" title="{}" data-relative>{}</time>',
        moment.isoformat(),
        exact(moment),
        relative(moment, now or timezone.now()),
    )


def progress_bar(percent: int) -> str:
    """A labelled progress bar (a screen reader says "Progress 60 %"), and its percentage."""
    return format_html(
        '<progress class="durajobs-progress" max="100" value="{}" aria-label="{}"></progress> '
        '<span class="durajobs-percent">{}%</span>',
        percent,
        _("Progress"),
        percent,
    )


@dataclass(frozen=True)
class Operation:
    name: str
    run: Callable[..., Job]
    permission: str  # "operate" or "revert": ModelAdmin.has_<permission>_permission
    label: Any
    done: Any  # "Job %(id)s resumed."
    allowed_flag: str  # the summary key that says whether the job's state allows it


OPERATIONS = {
    operation.name: operation
    for operation in (
        Operation(
            "resume",
            ops.resume,
            "operate",
            pgettext_lazy("job operation", "Resume"),
            _("Job %(id)s resumed."),
            "can_resume",
        ),
        Operation(
            "retry",
            ops.retry,
            "operate",
            pgettext_lazy("job operation", "Retry"),
            _("Job %(id)s queued for another try."),
            "can_retry",
        ),
        Operation(
            "pause",
            ops.pause,
            "operate",
            pgettext_lazy("job operation", "Pause"),
            _("Job %(id)s paused."),
            "can_pause",
        ),
        Operation(
            "cancel",
            ops.cancel,
            "operate",
            pgettext_lazy("job operation", "Cancel"),
            _("Job %(id)s cancelled."),
            "can_cancel",
        ),
        Operation(
            "revert",
            ops.revert,
            "revert",
            pgettext_lazy("job operation", "Revert"),
            _("Job %(id)s is being reverted."),
            "can_revert",
        ),
    )
}
