"""What a run says about waiting: the moment it waits until, and the actions a question offers."""

from __future__ import annotations

from datetime import datetime, timedelta
from typing import Any

from django.utils import timezone
from django.utils.functional import Promise
from django.utils.translation import gettext as _
from django.utils.translation import gettext_lazy, ngettext

from ..conf import get_setting
from ..errors import JobError
from ..models import ACTION_ID_MAX_LENGTH
from ..values import check_message, label, short_repr, to_json

ACTION_FIELD = gettext_lazy("The action %(action)s's %(key)s")


def moment(value: datetime | timedelta | None, name: str | Promise) -> datetime | None:
    """``value`` as an aware datetime (a timedelta counts from now); ``JobError`` naming ``name``."""
    if value is None:
        return None
    if isinstance(value, timedelta):
        try:
            return timezone.now() + value
        except OverflowError:
            raise JobError(
                "invalid_input", _("%(name)s is past the last date a database stores.") % {"name": name}
            ) from None
    if isinstance(value, datetime) and timezone.is_aware(value):
        return value
    raise JobError(
        "invalid_input",
        _("%(name)s must be a timezone-aware datetime or a timedelta, not %(value)s.")
        % {"name": name, "value": short_repr(value)},
    )


def wait_checks(earlier: dict[str, Any] | None, reason: str, now: datetime) -> dict[str, Any]:
    """A timed wait's checks after this one: counted on while the reason stays the same (only the
    first is logged), from one again when it changes."""
    count = earlier["count"] + 1 if earlier and earlier.get("reason") == reason else 1
    return {"reason": reason, "count": count, "last_at": now.isoformat()}


def offered_actions(actions: Any) -> list[dict[str, Any]] | None:
    """The offered actions as ``[{"id", "label", …}]``: at most ``MAX_ACTIONS``, each id unique and
    short enough to be chosen, each text a message's length at most."""
    if actions is None:
        return None
    actions = list(actions)
    limit = get_setting("MAX_ACTIONS")
    if len(actions) > limit:
        raise JobError(
            "invalid_input",
            ngettext(
                "%(count)s action is offered; the limit is %(limit)s (DURAJOBS['MAX_ACTIONS']).",
                "%(count)s actions are offered; the limit is %(limit)s (DURAJOBS['MAX_ACTIONS']).",
                len(actions),
            )
            % {"count": f"{len(actions):,}", "limit": limit},
        )
    normalised: list[dict[str, Any]] = []
    for action in actions:
        entry = {"id": action, "label": action} if isinstance(action, str) else dict(action)
        action_id = entry.get("id")
        if not isinstance(action_id, str) or not action_id or len(action_id) > ACTION_ID_MAX_LENGTH:
            raise JobError(
                "invalid_input",
                _("Each offered action needs an id of 1 to %(limit)s characters, not %(value)s.")
                % {"limit": ACTION_ID_MAX_LENGTH, "value": short_repr(action)},
            )
        if any(known["id"] == action_id for known in normalised):
            raise JobError(
                "invalid_input", _("The action %(action)s is offered twice.") % {"action": repr(action_id)}
            )
        entry.setdefault("label", action_id)
        for key, text in entry.items():
            if isinstance(text, str):
                check_message(text, label(ACTION_FIELD, {"action": repr(action_id), "key": key}))
        normalised.append(entry)
    stored: list[dict[str, Any]] = to_json(normalised, what=gettext_lazy("The offered actions"))
    return stored
