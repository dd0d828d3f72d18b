"""``@job``: registering job kinds. Registration touches nothing but this module's dict."""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from .engine.values import text_problem
from .errors import JobError

if TYPE_CHECKING:
    from .engine.context import JobContext
    from .models import Job

RunFunction = Callable[["Job", "JobContext"], Any]

PRIORITY_RANGE = range(-100, 101)
NAME_MAX_LENGTH = 100  # of kind names and step ids, as the columns hold them

_registry: dict[str, JobKind] = {}


@dataclass(eq=False)
class JobKind:
    """A registered kind: its run function, declared steps and policies."""

    name: str
    run: RunFunction
    title: str
    steps: tuple[tuple[str, str], ...] = ()
    max_attempts: int = 1
    retryable: Callable[[BaseException], bool] | None = None
    queue: str = "default"
    priority: int = 0
    backoff_base: float | None = None
    backoff_max: float | None = None
    revert_fn: RunFunction | None = field(default=None)

    def __call__(self, job: Job, ctx: JobContext) -> Any:
        return self.run(job, ctx)

    def revert(self, fn: RunFunction) -> RunFunction:
        """Register ``fn`` as this kind's revert (``@deploy_site.revert``)."""
        self.revert_fn = fn
        return fn

    @property
    def has_revert(self) -> bool:
        return self.revert_fn is not None

    def enqueue(self, **kwargs: Any) -> tuple[Job, bool]:
        """``enqueue(this_kind, **kwargs)``."""
        from .store import enqueue

        return enqueue(self.name, **kwargs)

    def is_retryable(self, exc: BaseException) -> bool:
        if getattr(exc, "retryable", False) is True:
            return True
        return bool(self.retryable and self.retryable(exc))


def name_problem(name: Any, what: str) -> str | None:
    """Why ``name`` cannot be a kind name or step id, or None."""
    if not isinstance(name, str) or not name.strip():
        return f"{what} must be a non-blank string, not {name!r}."
    if len(name) > NAME_MAX_LENGTH:
        return f"{what} {name[:20]!r}… is {len(name)} characters long; the limit is {NAME_MAX_LENGTH}."
    if text_problem(name):
        return f"{what} {name!r} holds {text_problem(name)}."
    return None


def _is_int(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


#: The most tries a job may be allowed (the column holds far more; a retry adds one).
MAX_ATTEMPTS_LIMIT = 1_000_000


def max_attempts_problem(value: Any) -> str | None:
    """Why ``value`` cannot be a job's ``max_attempts``, or None."""
    if not _is_int(value) or not 1 <= value <= MAX_ATTEMPTS_LIMIT:
        return f"max_attempts must be an integer from 1 to {MAX_ATTEMPTS_LIMIT:,}, not {value!r:.40}."
    return None


def _normalise_steps(steps: Iterable[Any]) -> tuple[tuple[str, str], ...]:
    normalised: list[tuple[str, str]] = []
    for step in steps:
        step_id, title = (step, step) if isinstance(step, str) else tuple(step)
        problem = name_problem(step_id, "A step id")
        if problem:
            raise ValueError(problem)
        normalised.append((step_id, str(title)[:255]))
    ids = [step_id for step_id, _ in normalised]
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
) -> Callable[[RunFunction], JobKind]:
    """Register a job kind; the decorated function becomes its ``run``.

    >>> @job("deploy_site", steps=[("build", "Build"), ("switch", "Switch traffic")])
    ... def deploy_site(job, ctx):
    ...     ctx.step("build", lambda: build(job.subject["site_id"]))
    """
    if max_attempts_problem(max_attempts):
        raise ValueError(max_attempts_problem(max_attempts))
    if not _is_int(priority) or priority not in PRIORITY_RANGE:
        raise ValueError(f"priority must be an integer from -100 to 100, not {priority!r}.")

    def register(fn: RunFunction) -> JobKind:
        kind_name = name or fn.__name__
        problem = name_problem(kind_name, "A job kind's name")
        if problem:
            raise ValueError(problem)
        existing = _registry.get(kind_name)
        if existing is not None and _qualname(existing.run) != _qualname(fn):
            raise ValueError(
                f"Job kind {kind_name!r} is registered twice: by {_qualname(existing.run)} "
                f"and by {_qualname(fn)}."
            )
        kind = JobKind(
            name=kind_name,
            run=fn,
            title=(title or kind_name)[:255],
            steps=_normalise_steps(steps),
            max_attempts=max_attempts,
            retryable=retryable,
            queue=queue,
            priority=priority,
            backoff_base=backoff_base,
            backoff_max=backoff_max,
        )
        _registry[kind_name] = kind
        return kind

    return register


def _qualname(fn: Callable[..., Any]) -> str:
    return f"{fn.__module__}.{fn.__qualname__}"


def get_kind(name: str) -> JobKind:
    try:
        return _registry[name]
    except KeyError:
        raise JobError("unknown_job_kind", f"Unknown job kind {name!r}.") from None


def known_kinds() -> list[str]:
    return list(_registry)


def unregister(name: str) -> None:
    """Forget a kind (tests that register kinds on the fly clean up with this)."""
    _registry.pop(name, None)
