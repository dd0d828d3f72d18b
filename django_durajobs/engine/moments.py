"""Moments as a person reads them: "in 8 s", "3 min ago", and the exact time, to the second, in
the current time zone (Django's ``timezone.localtime``, as the admin shows times).

Pure functions of a moment and "now": the admin, ``describe()`` and the tests call them alike,
and the console's script counts the relative texts on in the browser by the same rules.
"""

from __future__ import annotations

from datetime import datetime

from django.utils import formats, timezone
from django.utils.translation import gettext as _
from django.utils.translation import ngettext

MINUTE = 60
HOUR = 60 * MINUTE
DAY = 24 * HOUR


def span(seconds: float) -> str:
    """A length of time, rounded down to its largest unit: "8 s", "3 min", "2 h", "4 d"."""
    whole = int(abs(seconds))
    if whole < MINUTE:
        return ngettext("%(count)d s", "%(count)d s", whole) % {"count": whole}
    if whole < HOUR:
        minutes = whole // MINUTE
        return ngettext("%(count)d min", "%(count)d min", minutes) % {"count": minutes}
    if whole < 2 * DAY:
        hours = whole // HOUR
        return ngettext("%(count)d h", "%(count)d h", hours) % {"count": hours}
    days = whole // DAY
    return ngettext("%(count)d d", "%(count)d d", days) % {"count": days}


def relative(moment: datetime, now: datetime) -> str:
    """``moment`` from ``now``: "in 8 s", "3 min ago", or "just now" within a second."""
    seconds = (moment - now).total_seconds()
    if abs(seconds) < 1:
        return _("just now")
    if seconds > 0:
        return _("in %(span)s") % {"span": span(seconds)}
    return _("%(span)s ago") % {"span": span(seconds)}


def exact(moment: datetime) -> str:
    """The moment to the second in the current time zone: "Dec. 1, 2026, 18:06:22 CET"."""
    local = timezone.localtime(moment) if timezone.is_aware(moment) else moment
    day = formats.date_format(local, "DATE_FORMAT")
    return _("%(day)s, %(time)s") % {"day": day, "time": local.strftime("%H:%M:%S %Z").strip()}


def in_words(moment: datetime, now: datetime) -> str:
    """Relative, then exact: "in 8 s (Dec. 1, 2026, 18:06:22 UTC)"."""
    return _("%(relative)s (%(exact)s)") % {"relative": relative(moment, now), "exact": exact(moment)}
