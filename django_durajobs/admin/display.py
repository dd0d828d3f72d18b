"""HTML bits every admin page of a job shares: badges, JSON values, and the operations' buttons."""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from django.utils.formats import number_format
from django.utils.html import format_html
from django.utils.translation import gettext_lazy as _

from .. import ops
from ..engine.redact import redact
from ..models import Job

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
            _("%(count)s characters in all") % {"count": number_format(len(text), force_grouping=True)},
        )
    return format_html("<pre class='durajobs-json'>{}</pre>", text)


def status_badge(status: str, label: Any = None) -> str:
    return format_html('<span class="durajobs-badge durajobs-{}">{}</span>', status, label or status)


def count(number: int) -> str:
    """A count as the admin shows it, grouped by thousands: 19,990."""
    return number_format(number, force_grouping=True)


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
