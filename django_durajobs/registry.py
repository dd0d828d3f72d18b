"""``@job``: registering job kinds. Registration touches nothing but this module's dict.

Over 400 lines: ``@job`` checks every option of a kind where it is declared; those checks are the
seam to split along.
"""

from __future__ import annotations

import hashlib
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from datetime import timedelta
from functools import cached_property
from typing import TYPE_CHECKING, Any

from asgiref.sync import iscoroutinefunction
from django.apps import apps
from django.utils.functional import Promise
from django.utils.translation import gettext as _
from django.utils.translation import gettext_lazy

from .errors import JobError
from .limits import RateLimit, limit_problem
from .schedules import ScheduleSpec, checked_spec
from .values import text_problem, to_timeout

if TYPE_CHECKING:
    from .models import Job

#: ``run(job, ctx)``: ``ctx`` is a ``JobContext``, or an ``AsyncJobContext`` for an ``async def``.
RunFunction = Callable[["Job", Any], Any]

PRIORITY_RANGE = range(-100, 101)
NAME_MAX_LENGTH = 100  # of kind names and step ids, as the columns hold them
#: What a job of a kind does when it runs again under another version of the kind (docs/deploying.md).
VERSION_POLICIES = ("continue", "wait", "fail")

_registry: dict[str, JobKind] = {}
#: Ways to find a kind that no ``@job`` registered, by its name (``add_kind_finder``).
_finders: list[KindFinder] = []
_cannot_start: list[CannotStart] = []
#: ``limited_kinds()`` and ``fair_kinds()``, kept until a kind is registered or forgotten (every
#: claim asks).
_limited: list[JobKind] | None = None
_fair: list[JobKind] | None = None


@dataclass(eq=False)
class JobKind:
    """A registered kind: its run function, declared steps and policies."""

    name: str
    run: RunFunction
    #: The title and the step titles may be lazy (``gettext_lazy``): read in the language active
    #: where they are shown or stored.
    title: str | Promise
    steps: tuple[tuple[str, str | Promise], ...] = ()
    max_attempts: int = 1
    retryable: Callable[[BaseException], bool] | None = None
    queue: str = "default"
    priority: int = 0
    backoff_base: float | None = None
    backoff_max: float | None = None
    #: Limits (docs/limits.md): a key from the subject, how many may run with one key, how many
    #: of the kind may run at once, and how many may start per period.
    concurrency_key: Callable[[Any], Any] | None = None
    concurrency_limit: int | None = None
    max_running: int | None = None
    rate_limit: RateLimit | None = None
    #: At most so many starts per period for each key (``throttle_key(subject)``, else the
    #: concurrency key; one throttle for the kind without either), across the fleet.
    throttle: RateLimit | None = None
    throttle_key: Callable[[Any], Any] | None = None
    #: Claims take turns among the keys ``fairness_key(subject)`` of its due jobs.
    fairness_key: Callable[[Any], Any] | None = None
    #: Seconds one try may run, from its claim (an enqueue may set its own).
    timeout: float | None = None
    revert_fn: RunFunction | None = field(default=None)
    #: ``@job(schedule=…)``: the schedule named after the kind.
    schedule: ScheduleSpec | None = None
    #: ``@job(version=…)`` as text; "" derives the version from the declared step ids.
    declared_version: str = ""
    #: What a job started under another version does when it runs again: continue, wait or fail.
    on_version_change: str = "continue"
    #: Whether ``rerun(job, from_step=…)`` may start its jobs again from a step.
    rerunnable: bool = True

    #: Whether ``run`` (or ``revert_fn``) is a coroutine function: its jobs run on the worker's
    #: event loop, with an ``AsyncJobContext``.
    run_is_async: bool = False
    revert_is_async: bool = False

    def __call__(self, job: Job, ctx: Any) -> Any:
        return self.run(job, ctx)

    def revert(self, fn: RunFunction) -> RunFunction:
        """Register ``fn`` (plain or ``async def``) as this kind's revert (``@deploy_site.revert``)."""
        self.revert_fn = fn
        self.revert_is_async = iscoroutinefunction(fn)
        return fn

    def runs_async(self, reverting: bool) -> bool:
        """Whether a run (or, ``reverting``, a revert) of this kind is a coroutine to await."""
        return self.revert_is_async if reverting else self.run_is_async

    def step_rows(self) -> list[tuple[str, str]]:
        """The declared steps as their rows store them: each title as text, in the language active now."""
        return [(step_id, str(title)[:255]) for step_id, title in self.steps]

    @property
    def has_revert(self) -> bool:
        return self.revert_fn is not None

    @cached_property
    def version(self) -> str:
        """The version its new jobs start with: the declared one, else ``steps-`` and a hash of the
        declared step ids in their order (titles and code leave it alone)."""
        return self.declared_version or derived_version(step_id for step_id, _title in self.steps)

    @property
    def takes_keys(self) -> bool:
        """Whether its jobs may carry a concurrency key (its own function's, or one per enqueue)."""
        return self.concurrency_key is not None or self.concurrency_limit is not None

    @property
    def limited(self) -> bool:
        """Whether any limit of the kind's own applies to its jobs."""
        limits = (self.max_running, self.rate_limit, self.throttle)
        return self.takes_keys or any(limit is not None for limit in limits)

    @property
    def key_function(self) -> Callable[[Any], Any] | None:
        """What gives a job its key (``Job.concurrency_key``): for its concurrency limit or its throttle."""
        return self.concurrency_key or self.throttle_key

    def enqueue(self, **kwargs: Any) -> tuple[Job, bool]:
        """``enqueue(this_kind, **kwargs)``."""
        return facades().enqueue(self.name, **kwargs)

    async def aenqueue(self, **kwargs: Any) -> tuple[Job, bool]:
        """``await aenqueue(this_kind, **kwargs)``, for async code such as an ASGI view."""
        return await facades().aenqueue(self.name, **kwargs)


def facades() -> Any:
    """The ``facades`` module: the operations, ``describe()`` and ``enqueue`` that ``Job``'s and
    ``JobKind``'s methods call. They sit above the models and this registry, so these reach them
    through the app config, which imports them when Django is ready, instead of importing upward."""
    config: Any = apps.get_app_config("django_durajobs")
    return config.facades


def has_revert(name: str) -> bool:
    """Whether the kind ``name`` is registered and has a revert."""
    kind = _registry.get(name)
    return kind is not None and kind.has_revert


def name_problem(name: Any, what: str | Promise) -> str | None:
    """Why ``name`` cannot be a kind name or step id, or None."""
    if not isinstance(name, str) or not name.strip():
        return _("%(what)s must be a non-blank string, not %(value)s.") % {"what": what, "value": repr(name)}
    if len(name) > NAME_MAX_LENGTH:
        return _("%(what)s %(name)s… is %(length)s characters long; the limit is %(limit)s.") % {
            "what": what,
            "name": repr(name[:20]),
            "length": len(name),
            "limit": NAME_MAX_LENGTH,
        }
    if text_problem(name):
        return _("%(what)s %(name)s holds %(problem)s.") % {
            "what": what,
            "name": repr(name),
            "problem": text_problem(name),
        }
    return None


def _is_int(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


#: The most tries a job may be allowed (the column holds far more; a retry adds one).
MAX_ATTEMPTS_LIMIT = 1_000_000


def max_attempts_problem(value: Any) -> str | None:
    """Why ``value`` cannot be a job's ``max_attempts``, or None."""
    if not _is_int(value) or not 1 <= value <= MAX_ATTEMPTS_LIMIT:
        return _("max_attempts must be an integer from 1 to %(limit)s, not %(value)s.") % {
            "limit": f"{MAX_ATTEMPTS_LIMIT:,}",
            "value": f"{value!r:.40}",
        }
    return None


def _checked_throttle(throttle: Any, key: Any, concurrency_key: Any) -> RateLimit | None:
    """``@job(throttle=…)`` as a rate; ``ValueError`` for a key without a throttle, or two keys."""
    if key is not None and (throttle is None or not callable(key)):
        raise ValueError(f"throttle_key must be a function of the subject, with a throttle, not {key!r:.40}.")
    if key is not None and concurrency_key is not None:
        raise ValueError(
            "A throttled kind's key is its concurrency_key: give throttle_key or concurrency_key."
        )
    return RateLimit.parse(throttle) if throttle is not None else None


def derived_version(step_ids: Iterable[str]) -> str:
    """A kind's version when it declares none: the same step ids in the same order give the same one."""
    digest = hashlib.sha256("\n".join(step_ids).encode()).hexdigest()
    return f"steps-{digest[:8]}"


def _checked_version(version: int | str | None, policy: str) -> str:
    """``@job(version=…)`` as text ("" for none), once it and the policy are known to be valid."""
    if policy not in VERSION_POLICIES:
        allowed = ", ".join(VERSION_POLICIES)
        raise ValueError(f"on_version_change must be one of {allowed}, not {policy!r:.40}.")
    if version is None:
        return ""
    if not isinstance(version, (int, str)) or isinstance(version, bool):
        raise ValueError(f"version must be an int or a str, not {version!r:.40}.")
    problem = name_problem(str(version), "A kind's version")
    if problem:
        raise ValueError(problem)
    return str(version)


def _normalise_steps(steps: Iterable[Any]) -> tuple[tuple[str, str | Promise], ...]:
    normalised: list[tuple[str, str | Promise]] = []
    for step in steps:
        step_id, title = (step, step) if isinstance(step, str) else tuple(step)
        problem = name_problem(step_id, gettext_lazy("A step id"))
        if problem:
            raise ValueError(problem)
        normalised.append((step_id, title if isinstance(title, Promise) else str(title)[:255]))
    ids = [step_id for step_id, _title in normalised]
    if len(set(ids)) != len(ids):
        raise ValueError(f"Step ids must be unique: {ids}.")
    return tuple(normalised)


def job(
    name: str | None = None,
    *,
    title: str | None = None,
    steps: Sequence[tuple[str, str] | str] = (),
    max_attempts: int = 1,
    retryable: Callable[[BaseException], bool] | None = None,
    queue: str = "default",
    priority: int = 0,
    backoff_base: float | None = None,
    backoff_max: float | None = None,
    schedule: str | timedelta | None = None,
    concurrency_key: Callable[[Any], Any] | None = None,
    concurrency_limit: int | None = None,
    max_running: int | None = None,
    rate_limit: str | None = None,
    throttle: str | None = None,
    throttle_key: Callable[[Any], Any] | None = None,
    fairness_key: Callable[[Any], Any] | None = None,
    timeout: float | timedelta | None = None,
    version: int | str | None = None,
    on_version_change: str = "continue",
    rerunnable: bool = True,
) -> Callable[[RunFunction], JobKind]:
    """Register a job kind; the decorated function (or ``async def`` function) becomes its ``run``.

    >>> @job("deploy_site", steps=[("build", "Build"), ("switch", "Switch traffic")])
    ... def deploy_site(job, ctx):
    ...     ctx.step("build", lambda: build(job.subject["site_id"]))

    ``schedule`` (a cron expression, or a ``timedelta``) also enqueues the kind at each of its
    moments, with an empty subject, in ``TIME_ZONE``; ``JobError`` when it is not a schedule.

    ``version`` (default: derived from the step ids) is stored on each job; ``on_version_change``
    says what a job started under another version does when it runs again (docs/deploying.md).
    """
    if max_attempts_problem(max_attempts):
        raise ValueError(max_attempts_problem(max_attempts))
    if not _is_int(priority) or priority not in PRIORITY_RANGE:
        raise ValueError(f"priority must be an integer from -100 to 100, not {priority!r}.")
    if concurrency_key is not None and not callable(concurrency_key):
        raise ValueError(f"concurrency_key must be a function of the subject, not {concurrency_key!r:.40}.")
    for parameter, value in (("concurrency_limit", concurrency_limit), ("max_running", max_running)):
        if value is not None and limit_problem(value):
            raise ValueError(f"{parameter} {limit_problem(value)}")
    rate = RateLimit.parse(rate_limit) if rate_limit is not None else None
    throttled = _checked_throttle(throttle, throttle_key, concurrency_key)
    if fairness_key is not None and not callable(fairness_key):
        raise ValueError(f"fairness_key must be a function of the subject, not {fairness_key!r:.40}.")
    seconds = to_timeout(timeout, gettext_lazy("A kind's timeout"))
    declared_version = _checked_version(version, on_version_change)

    def register(fn: RunFunction) -> JobKind:
        kind_name = name or fn.__name__
        problem = name_problem(kind_name, gettext_lazy("A job kind's name"))
        if problem:
            raise ValueError(problem)
        spec = None
        if schedule is not None:
            cron, every = (None, schedule) if isinstance(schedule, timedelta) else (schedule, None)
            spec = checked_spec(name=kind_name, kind=kind_name, cron=cron, every=every)
        existing = _registry.get(kind_name)
        if existing is not None and _qualname(existing.run) != _qualname(fn):
            raise ValueError(
                f"Job kind {kind_name!r} is registered twice: by {_qualname(existing.run)} "
                f"and by {_qualname(fn)}."
            )
        kind = JobKind(
            name=kind_name,
            run=fn,
            title=title if isinstance(title, Promise) else (title or kind_name)[:255],
            steps=_normalise_steps(steps),
            max_attempts=max_attempts,
            retryable=retryable,
            queue=queue,
            priority=priority,
            backoff_base=backoff_base,
            backoff_max=backoff_max,
            schedule=spec,
            concurrency_key=concurrency_key,
            concurrency_limit=concurrency_limit,
            max_running=max_running,
            rate_limit=rate,
            throttle=throttled,
            throttle_key=throttle_key,
            fairness_key=fairness_key,
            timeout=seconds,
            declared_version=declared_version,
            on_version_change=on_version_change,
            rerunnable=rerunnable,
            run_is_async=iscoroutinefunction(fn),
        )
        _registry[kind_name] = kind
        _forget_limited()
        return kind

    return register


def _qualname(fn: Callable[..., Any]) -> str:
    return f"{fn.__module__}.{fn.__qualname__}"


KindFinder = Callable[[str], "JobKind | None"]
#: ``cannot_start(kind_name, worker_id)``: deals with the due jobs of a kind no finder could give,
#: True when it took them (they are not left queued for ever).
CannotStart = Callable[[str, str], bool]


def add_kind_finder(finder: KindFinder, cannot_start: CannotStart | None = None) -> None:
    """Let ``get_kind`` find kinds that no ``@job`` registered: the Tasks backend finds a task by its
    dotted path. A finder returns None for a name it does not know, and raises ``JobError`` for
    one it knows but refuses; what it finds is registered. ``cannot_start`` is asked about the due
    jobs of a kind that no finder gave (the Tasks backend fails a task it cannot import)."""
    if finder not in _finders:
        _finders.append(finder)
    if cannot_start is not None and cannot_start not in _cannot_start:
        _cannot_start.append(cannot_start)


def jobs_cannot_start(name: str, worker_id: str) -> bool:
    """Whether a finder's ``cannot_start`` took the due jobs of the kind ``name``, which no finder gave."""
    return any(cannot_start(name, worker_id) for cannot_start in _cannot_start)


def has_kind_finders() -> bool:
    return bool(_finders)


def register_kind(kind: JobKind) -> JobKind:
    """Register a kind that code made (not ``@job``); the kind already registered under its name
    wins when it runs the same function."""
    existing = _registry.get(kind.name)
    if existing is not None:
        if _qualname(existing.run) != _qualname(kind.run):
            raise ValueError(f"Job kind {kind.name!r} is already registered by {_qualname(existing.run)}.")
        return existing
    _registry[kind.name] = kind
    _forget_limited()
    return kind


def get_kind(name: str) -> JobKind:
    """The kind registered as ``name``, or one a finder finds (and registers); else ``JobError``."""
    kind = _registry.get(name)
    if kind is not None:
        return kind
    for finder in _finders:
        found = finder(name)
        if found is not None:
            return register_kind(found)
    raise JobError("unknown_job_kind", _("Unknown job kind %(kind)s.") % {"kind": repr(name)})


def known_kinds() -> list[str]:
    return list(_registry)


def kind_versions() -> dict[str, str]:
    """``{kind: version}`` of the registered kinds: what this process's code runs."""
    return {name: kind.version for name, kind in _registry.items()}


def has_async_kinds() -> bool:
    """Whether any registered kind runs or reverts as a coroutine (a worker then starts an event loop)."""
    return any(kind.run_is_async or kind.revert_is_async for kind in _registry.values())


def kind_schedules() -> list[ScheduleSpec]:
    """The schedules of ``@job(schedule=…)``."""
    return [kind.schedule for kind in _registry.values() if kind.schedule is not None]


def limited_kinds() -> list[JobKind]:
    """The kinds with a limit of their own (a concurrency key or limit, max_running, a rate)."""
    global _limited
    if _limited is None:
        _limited = [kind for kind in _registry.values() if kind.limited]
    return _limited


def fair_kinds() -> list[JobKind]:
    """The kinds with a fairness key."""
    global _fair
    if _fair is None:
        _fair = [kind for kind in _registry.values() if kind.fairness_key is not None]
    return _fair


def _forget_limited() -> None:
    global _limited, _fair
    _limited = _fair = None


def unregister(name: str) -> None:
    """Forget a kind (tests that register kinds on the fly clean up with this)."""
    _registry.pop(name, None)
    _forget_limited()
