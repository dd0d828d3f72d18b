"""When a schedule's moments fall, and which of them a tick enqueues: plain Python, no database.

A schedule is a cron expression read in its time zone (croniter) or a period of whole seconds
counted from the Unix epoch, so every worker of the fleet computes the same moments, and each
moment's idempotency key (``schedule:<name>:<moment in UTC>``) lets one enqueue win.

Across a change of the clocks, a cron schedule with a fixed hour (``30 2 * * *``) runs once a
day: a moment that falls into the hour skipped in spring runs when the clocks have jumped, and
the second pass through the hour repeated in autumn is no moment. A schedule whose hour field
starts with ``*`` (``*/15 * * * *``, ``@hourly``) follows real time through both.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import Any
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

from django.conf import settings
from django.utils.translation import gettext as _
from django.utils.translation import gettext_lazy

from .conf import get_setting
from .errors import JobError, install_command
from .values import label, to_json

#: Translated only if a message needs it: a kind's schedule is checked as its module is imported.
SUBJECT_OF_SCHEDULE = gettext_lazy("Schedule %(name)s's subject")

MISSED_POLICIES = ("once", "skip")
#: The keys of an entry of ``DURAJOBS["SCHEDULES"]``.
SETTING_KEYS = frozenset({"kind", "cron", "every", "subject", "timezone", "missed"})
NAME_MAX_LENGTH = 200  # so that the idempotency key fits its 255 characters
CRON_MAX_LENGTH = 200
EVERY_MAX_SECONDS = 366 * 24 * 3600  # longer periods read better as cron
#: Cron expressions whose hour field is a wildcard although they do not spell one out.
WILDCARD_HOUR_ALIASES = frozenset({"@hourly"})
INSTALL_CRON = install_command("cron")

try:
    from croniter import croniter
except ImportError:  # cron schedules need the extra: pip install django-durajobs[cron]
    HAS_CRONITER = False
else:
    HAS_CRONITER = True


def _refuse(message: str) -> JobError:
    return JobError("invalid_input", message)


@dataclass(frozen=True, kw_only=True)
class ScheduleSpec:
    """One schedule: enqueue ``kind`` with ``subject`` at each of its moments.

    >>> ScheduleSpec(name="nightly-backup", kind="backup_database", cron="30 2 * * *",
    ...              timezone="Europe/Berlin").next_after(now)
    """

    name: str
    kind: str
    cron: str = ""
    every: int | None = None  # seconds
    subject: Any = field(default_factory=dict)
    timezone: str = ""  # blank: settings.TIME_ZONE
    missed: str = "once"

    @property
    def zone(self) -> ZoneInfo:
        return ZoneInfo(self.timezone or settings.TIME_ZONE)

    def next_after(self, instant: datetime) -> datetime:
        """The first moment strictly after ``instant``, in UTC."""
        if self.every is not None:
            return datetime.fromtimestamp(
                (math.floor(instant.timestamp()) // self.every + 1) * self.every, UTC
            )
        return _next_cron_moment(self.cron, self.zone, instant)

    def key(self, moment: datetime) -> str:
        """The idempotency key of the job enqueued for ``moment``."""
        return f"schedule:{self.name}:{moment.astimezone(UTC).strftime('%Y-%m-%dT%H:%M:%SZ')}"

    def describe(self) -> str:
        """``cron 30 2 * * * (Europe/Berlin)`` or ``every 900 s``."""
        if self.every is not None:
            return _("every %(seconds)s s") % {"seconds": self.every}
        return _("cron %(cron)s (%(timezone)s)") % {
            "cron": self.cron,
            "timezone": self.timezone or settings.TIME_ZONE,
        }


@dataclass(frozen=True)
class Due:
    """What a tick does with a schedule: the moments it enqueues, and the next one it waits for."""

    moments: tuple[datetime, ...]
    next_moment: datetime
    missed: bool = False  # moments were missed: ``moments`` is what the policy makes of them


def due(spec: ScheduleSpec, pending: datetime, now: datetime, grace: timedelta) -> Due:
    """The moments to enqueue at ``now`` when ``pending`` is the first one not enqueued yet.

    While ``pending`` is at most ``grace`` old, every moment up to ``now`` is enqueued (a tick
    may come late). Older, the fleet missed it (no worker ran): ``missed="once"`` enqueues one
    job for all the missed moments, under the first one's key; ``"skip"`` enqueues none. Either
    way the schedule goes on with its first moment after ``now``.
    """
    if pending > now:
        return Due((), pending)
    if now - pending <= grace:
        moments = []
        moment = pending
        while moment <= now:
            moments.append(moment)
            moment = spec.next_after(moment)
        return Due(tuple(moments), moment)
    return Due((pending,) if spec.missed == "once" else (), spec.next_after(now), missed=True)


def _next_cron_moment(cron: str, zone: ZoneInfo, instant: datetime) -> datetime:
    if not HAS_CRONITER:
        raise _missing_croniter()
    follows_wall_clock = _has_fixed_hour(cron)
    moments = croniter(cron, instant.astimezone(zone))
    while True:
        moment = moments.get_next(datetime).astimezone(UTC)
        if moment <= instant:
            continue  # croniter may hand back a moment the clocks' jump moved before the start
        if follows_wall_clock and _is_repeated_wall_time(moment, zone):
            continue
        return moment.replace(microsecond=0)


def _has_fixed_hour(cron: str) -> bool:
    if cron.startswith("@"):
        return cron not in WILDCARD_HOUR_ALIASES
    return not cron.split()[1].startswith("*")


def _is_repeated_wall_time(moment: datetime, zone: ZoneInfo) -> bool:
    """Whether ``moment`` is the second time the local clock shows its time (autumn's fall back)."""
    local = moment.astimezone(zone)
    return local.fold == 1 and local.replace(fold=0).utcoffset() != local.utcoffset()


def _missing_croniter(shown: str | None = None) -> JobError:
    """What a user who wrote a cron schedule without the ``cron`` extra reads: the command to run."""
    if shown is None:
        message = _("Cron schedules need croniter, which is not installed. Install it with: %(command)s")
    else:
        message = _(
            "Schedule %(name)s is a cron schedule and needs croniter, which is not installed. "
            "Install it with: %(command)s"
        )
    return JobError("missing_dependency", message % {"name": shown, "command": INSTALL_CRON})


def checked_spec(
    *,
    name: Any,
    kind: str,
    cron: Any = None,
    every: Any = None,
    subject: Any = None,
    timezone: Any = None,
    missed: Any = None,
) -> ScheduleSpec:
    """A ``ScheduleSpec``, every value checked; ``JobError`` (``invalid_input``, or
    ``missing_dependency`` for a cron schedule without croniter) says what is wrong."""
    if not isinstance(name, str) or not name.strip() or len(name) > NAME_MAX_LENGTH:
        raise _refuse(
            _("A schedule's name must be a non-blank string of at most %(limit)s characters.")
            % {"limit": NAME_MAX_LENGTH}
        )
    shown = repr(name)
    if (cron in (None, "")) == (every is None):
        raise _refuse(
            _("Schedule %(name)s needs one of a cron expression and every (seconds).") % {"name": shown}
        )
    missed = "once" if missed is None else missed
    if missed not in MISSED_POLICIES:
        raise _refuse(
            _("Schedule %(name)s: missed must be 'once' or 'skip', not %(value)s.")
            % {"name": shown, "value": f"{missed!r:.40}"}
        )
    timezone = timezone or ""
    if not isinstance(timezone, str):
        raise _refuse(
            _("Schedule %(name)s: the time zone must be a name such as 'Europe/Berlin', not %(value)s.")
            % {"name": shown, "value": f"{timezone!r:.40}"}
        )
    try:
        zone = ZoneInfo(timezone or "UTC")  # TIME_ZONE itself is read when the moments are
    except (ZoneInfoNotFoundError, ValueError):
        raise _refuse(
            _("Schedule %(name)s: unknown time zone %(value)s.")
            % {"name": shown, "value": f"{timezone!r:.60}"}
        ) from None
    spec = ScheduleSpec(
        name=name,
        kind=kind,
        cron=_checked_cron(cron, shown) if every is None else "",
        every=None if every is None else _checked_every(every, shown),
        subject=to_json(
            {} if subject is None else subject,
            what=label(SUBJECT_OF_SCHEDULE, {"name": shown}),
            max_bytes=get_setting("MAX_SUBJECT_BYTES"),
            setting="MAX_SUBJECT_BYTES",
        ),
        timezone=timezone,
        missed=missed,
    )
    if spec.cron:
        try:
            _next_cron_moment(spec.cron, zone, datetime.now(UTC))
        except (ValueError, KeyError, ArithmeticError):
            raise _refuse(
                _("Schedule %(name)s: the cron expression %(cron)s has no next moment.")
                % {"name": shown, "cron": repr(cron)}
            ) from None
    return spec


def spec_from_setting(name: Any, entry: Any) -> ScheduleSpec:
    """The schedule an entry of ``DURAJOBS["SCHEDULES"]`` declares; ``JobError`` if it is not one."""
    if not isinstance(entry, dict):
        raise _refuse(
            _("DURAJOBS['SCHEDULES'][%(name)s] must be a dict, not %(type)s.")
            % {"name": repr(name), "type": type(entry).__name__}
        )
    unknown = sorted(set(entry) - SETTING_KEYS, key=str)
    if unknown:
        raise _refuse(
            _("DURAJOBS['SCHEDULES'][%(name)s] has unknown keys %(unknown)s; it takes %(keys)s.")
            % {"name": repr(name), "unknown": unknown, "keys": ", ".join(sorted(SETTING_KEYS))}
        )
    kind = entry.get("kind")
    if not isinstance(kind, str) or not kind:
        raise _refuse(
            _("DURAJOBS['SCHEDULES'][%(name)s] needs the name of a job kind as 'kind'.")
            % {"name": repr(name)}
        )
    return checked_spec(
        name=name,
        kind=kind,
        cron=entry.get("cron"),
        every=entry.get("every"),
        subject=entry.get("subject"),
        timezone=entry.get("timezone"),
        missed=entry.get("missed"),
    )


def _checked_cron(cron: Any, shown: str) -> str:
    """``cron``, normalised; ``shown`` is the schedule's name as its messages show it."""
    if not isinstance(cron, str) or len(cron) > CRON_MAX_LENGTH:
        raise _refuse(
            _("Schedule %(name)s: a cron expression is a string of at most %(limit)s characters.")
            % {"name": shown, "limit": CRON_MAX_LENGTH}
        )
    cron = " ".join(cron.split())
    if not HAS_CRONITER:
        raise _missing_croniter(shown)
    if not croniter.is_valid(cron):
        raise _refuse(
            _("Schedule %(name)s: %(cron)s is not a cron expression (such as '*/15 * * * *').")
            % {"name": shown, "cron": repr(cron)}
        )
    return cron


def _checked_every(every: Any, shown: str) -> int:
    seconds = every.total_seconds() if isinstance(every, timedelta) else every
    if (
        isinstance(seconds, bool)
        or not isinstance(seconds, int | float)
        or not math.isfinite(seconds)
        or seconds != int(seconds)
    ):
        raise _refuse(
            _("Schedule %(name)s: every must be a whole number of seconds, not %(value)s.")
            % {"name": shown, "value": f"{every!r:.40}"}
        )
    if not 0 < seconds <= EVERY_MAX_SECONDS:
        raise _refuse(
            _("Schedule %(name)s: every must be from 1 to %(limit)s seconds, not %(value)s.")
            % {"name": shown, "limit": f"{EVERY_MAX_SECONDS:,}", "value": f"{every!r:.40}"}
        )
    return int(seconds)
