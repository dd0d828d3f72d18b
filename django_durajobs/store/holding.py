"""The limits in force, what they hold now, and which claim takes a job.

A job is *held* while a worker holds it: running, or reverting under a lease. The limits:

- a concurrency key (its kind's ``concurrency_key(subject)``, or given to ``enqueue``): no more
  jobs held with one key, of whatever kind, than the kind's ``concurrency_limit`` (1 by default);
- ``max_running``: no more jobs of the kind held at once;
- ``DURAJOBS["QUEUE_LIMITS"][queue]``: no more jobs of the queue held at once;
- ``rate_limit``: no more starts of the kind in any period (a sliding window on the database's
  clock) than its rate allows; ``throttle``: the same per key.

A job that a limit holds back stays ``queued``; nothing is written to it (``held_back_reason``
tells a screen why it waits, from the counts).

The lanes. A new job of a limited kind, or in a limited queue, is enqueued ``under_limits``: the
claim of the jobs no limit applies to reads ``durajobs_plain_due``, which has them apart, so
however many of them a full limit holds back, it never reads past them (``limiting.py`` claims
them). The lane is only where a job is looked for: the claims still choose by kind and queue. A
release that adds a limit needs nothing (the claim under limits reads ``durajobs_due``, every
lane); one that lifts a limit leaves jobs in the limited lane that no claim takes until a
worker's recovery pass moves them (``lift_stale_lanes``).
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from django.db.backends.base.base import BaseDatabaseWrapper
from django.utils import timezone
from django.utils.translation import gettext as _

from ..conf import get_setting
from ..limits import RateLimit
from ..models import Job, JobLimit
from ..registry import known_kinds, limited_kinds
from ..status import Status
from ..transitions import CLAIMABLE, DUE_STATUSES
from . import sql
from .database import database_now_sql
from .limit_rows import HELD, Scope, held_in_due

KEY, KIND, QUEUE, THROTTLE = (
    JobLimit.Scope.KEY,
    JobLimit.Scope.KIND,
    JobLimit.Scope.QUEUE,
    JobLimit.Scope.THROTTLE,
)
#: How many jobs one statement of ``lift_stale_lanes`` moves.
LANE_BATCH = 1000


@dataclass(frozen=True)
class Held:
    """How many jobs are held now, by concurrency key, kind and queue."""

    by_key: Counter[str] = field(default_factory=Counter)
    by_kind: Counter[str] = field(default_factory=Counter)
    by_queue: Counter[str] = field(default_factory=Counter)


@dataclass(frozen=True)
class Limits:
    """The limits in force: the registered kinds' own, and ``DURAJOBS["QUEUE_LIMITS"]``."""

    key_limits: Mapping[str, int]  # per kind that takes concurrency keys
    max_running: Mapping[str, int]
    rates: Mapping[str, RateLimit]
    queues: Mapping[str, int]
    throttles: Mapping[str, RateLimit]  # per key of the kind (``Job.concurrency_key``)
    #: The kinds with limits of their own, and the others: claimed as if nothing were limited,
    #: unless they are in a limited queue (``limited_queues``).
    limited_kinds: tuple[str, ...]
    plain_kinds: list[str]
    limited_queues: tuple[str, ...]

    def scopes(self, job: Job) -> list[Scope]:
        """The limits ``job`` is under, in the order their rows are locked."""
        scopes = []
        if job.concurrency_key and job.kind in self.key_limits:
            scopes.append((KEY, job.concurrency_key))
        if job.kind in self.max_running or job.kind in self.rates:
            scopes.append((KIND, job.kind))
        if job.queue in self.queues:
            scopes.append((QUEUE, job.queue))
        if job.kind in self.throttles:
            scopes.append((THROTTLE, throttle_name(job.kind, job.concurrency_key)))
        return sorted(scopes)

    def held_back_by(self, job: Job, held: Held, full_rates: Mapping[Any, Any]) -> str | None:
        """Why a limit holds ``job`` back, given what is held and which kinds are at their rate;
        None when it may start."""
        key, kind, queue = job.concurrency_key, job.kind, job.queue
        if key and kind in self.key_limits and held.by_key[key] >= self.key_limits[kind]:
            return _("Held back: %(held)s of %(limit)s running with key %(key)s") % {
                "held": held.by_key[key],
                "limit": self.key_limits[kind],
                "key": key,
            }
        if kind in self.max_running and held.by_kind[kind] >= self.max_running[kind]:
            return _("Held back: %(held)s of %(limit)s %(kind)s jobs running") % {
                "held": held.by_kind[kind],
                "limit": self.max_running[kind],
                "kind": kind,
            }
        if queue in self.queues and held.by_queue[queue] >= self.queues[queue]:
            return _("Held back: %(held)s of %(limit)s running in queue %(queue)s") % {
                "held": held.by_queue[queue],
                "limit": self.queues[queue],
                "queue": queue,
            }
        if (kind, key) in full_rates:
            return _("Held back: %(kind)s jobs with key %(key)s started at their throttle of %(rate)s") % {
                "kind": kind,
                "key": repr(key),
                "rate": self.throttles[kind],
            }
        if kind in full_rates:
            return _("Held back: %(kind)s jobs started at their rate limit of %(rate)s") % {
                "kind": kind,
                "rate": self.rates[kind],
            }
        return None


_current: tuple[Any, Any, Limits | None] = (None, None, None)


def current_limits() -> Limits | None:
    """The limits in force, or None when nothing is limited (kept until the kinds or the setting change)."""
    global _current
    kinds, queues = limited_kinds(), get_setting("QUEUE_LIMITS")
    if _current[0] is kinds and _current[1] is queues:
        return _current[2]
    limits = None
    if kinds or queues:
        names = tuple(kind.name for kind in kinds)
        limits = Limits(
            key_limits={kind.name: kind.concurrency_limit or 1 for kind in kinds if kind.takes_keys},
            max_running={kind.name: kind.max_running for kind in kinds if kind.max_running is not None},
            rates={kind.name: kind.rate_limit for kind in kinds if kind.rate_limit is not None},
            queues=dict(queues),
            throttles={kind.name: kind.throttle for kind in kinds if kind.throttle is not None},
            limited_kinds=names,
            plain_kinds=[name for name in known_kinds() if name not in names],
            limited_queues=tuple(sorted(queues)),
        )
    _current = (kinds, queues, limits)
    return limits


# Counting --------------------------------------------------------------------------------------


def held_now(db: BaseDatabaseWrapper) -> Held:
    """What is held now, counted in one statement."""

    def count_sql() -> str:
        quote = db.ops.quote_name
        grouped = f"{quote('kind')}, {quote('queue')}, {quote('concurrency_key')}"
        statuses = ", ".join(["%s"] * len(HELD))
        return (
            f"SELECT {grouped}, COUNT(*) FROM {sql.table(db, Job)}{held_in_due(db)} "
            f"WHERE {quote('status')} IN ({statuses}) AND {quote('locked_by')} <> '' GROUP BY {grouped}"
        )

    held = Held()
    for kind, queue, key, count in sql.fetch(db, sql.statement(db, ("held",), count_sql), HELD):
        held.by_kind[kind] += count
        held.by_queue[queue] += count
        if key:
            held.by_key[key] += count
    return held


def throttle_name(kind: str, key: str) -> str:
    """The name of the ``JobLimit`` row of a throttled kind's key."""
    return f"{kind}:{key}"[:255]


def full_rates(db: BaseDatabaseWrapper, limits: Limits) -> dict[Any, datetime]:
    """The rate-limited kinds at their rate now (on the database's clock), and until when; and the
    throttled ``(kind, key)`` pairs at their throttle."""
    if not limits.rates and not limits.throttles:
        return {}

    def full_sql() -> str:
        quote = db.ops.quote_name
        return (
            f"SELECT {sql.returned_columns(db, JobLimit)} FROM {sql.table(db, JobLimit)} "
            f"WHERE {quote('scope')} IN (%s, %s) AND {quote('full_until')} > {database_now_sql(db)}"
        )

    statement = sql.statement(db, ("full rates",), full_sql)
    full: dict[Any, datetime] = {}
    for row in sql.read_rows(db, JobLimit, sql.fetch(db, statement, [KIND, THROTTLE])):
        until = row.full_until
        if until is None:
            continue
        if row.scope == KIND and row.name in limits.rates:
            full[row.name] = until
        for kind in limits.throttles if row.scope == THROTTLE else ():
            if row.name.startswith(f"{kind}:"):
                full[(kind, row.name[len(kind) + 1 :])] = until
    return full


# Why a job waits -------------------------------------------------------------------------------


def held_back_reason(job: Job) -> str | None:
    """Why a limit holds ``job`` back now (a queued job that is due), or None."""
    return held_back_reasons([job]).get(job.pk)


def held_back_reasons(jobs: Iterable[Job]) -> dict[int, str]:
    """``held_back_reason`` for many jobs (an admin page's), from one count of what is held."""
    limits = current_limits()
    if limits is None:
        return {}
    waiting = [job for job in jobs if _due(job) and limits.scopes(job)]
    if not waiting:
        return {}
    db = sql.database()
    held, rated = held_now(db), full_rates(db, limits)
    reasons = {job.pk: limits.held_back_by(job, held, rated) for job in waiting}
    return {pk: reason for pk, reason in reasons.items() if reason}


def _due(job: Job) -> bool:
    """Whether a claim would take ``job`` now, were it not for its limits."""
    if job.status not in DUE_STATUSES or job.locked_by:
        return False
    if job.status == Status.REVERTING:
        return True
    return job.next_run_at is not None and job.next_run_at <= timezone.now()


# Lanes -----------------------------------------------------------------------------------------


def plain_claim(limits: Limits | None) -> tuple[list[str], tuple[str, ...], bool]:
    """What the claim of the jobs no limit applies to looks through: their kinds, the limited
    queues it passes over, and whether it reads the plain lane (while any limit is in force)."""
    if limits is None:
        return known_kinds(), (), False
    return limits.plain_kinds, limits.limited_queues, True


def enqueued_under_limits(kind: str, queue: str) -> bool:
    """Whether a new job of ``kind`` in ``queue`` is claimed under limits (``Job.under_limits``)."""
    limits = current_limits()
    return limits is not None and (kind in limits.limited_kinds or queue in limits.queues)


def lift_stale_lanes() -> int:
    """Move the due jobs in the limited lane that no limit applies to any more (a release lifted
    it, or a process of the release before enqueued them) to the plain lane; how many moved.

    The look reads the limited lane of ``durajobs_plain_due``: the jobs a full limit holds back
    now, not the whole backlog."""
    limits = current_limits()
    if limits is None or not limits.plain_kinds:
        return 0  # without limits every claim reads durajobs_due, both lanes
    db = sql.database()
    kinds, queues = limits.plain_kinds, limits.limited_queues
    look = sql.statement(
        db, ("stale lanes", len(kinds), len(queues)), lambda: _stale_sql(db, len(kinds), len(queues))
    )
    moved = 0
    while True:
        batch = [pk for (pk,) in sql.fetch(db, look, [*kinds, *queues])]
        if batch:
            moved += Job.objects.filter(pk__in=batch, under_limits=True).update(under_limits=False)
        if len(batch) < LANE_BATCH:
            return moved


def _stale_sql(db: BaseDatabaseWrapper, kinds: int, queues: int) -> str:
    """Up to LANE_BATCH ids of due jobs in the limited lane of ``kinds`` not in ``queues``; the
    statuses and the lane written as ``durajobs_plain_due`` says them."""
    quote = db.ops.quote_name
    in_kinds = ", ".join(["%s"] * kinds)
    not_in_queues = f" AND {quote('queue')} NOT IN ({', '.join(['%s'] * queues)})" if queues else ""
    return (
        f"SELECT {quote('id')} FROM {sql.table(db, Job)} WHERE {sql.status_in(db, CLAIMABLE)} "
        f"AND {quote('under_limits')} = TRUE AND {quote('kind')} IN ({in_kinds}){not_in_queues} "
        f"LIMIT {LANE_BATCH}"
    )
