"""What the open streams watch: one watcher per event loop reads, every ``STREAM_POLL_SECONDS``,
a version of every watched job in one thread of its own, and hands each changed job's new
``describe()`` to the streams that watch it.

However many streams a process holds open, its reads go through that one thread, so they
hold one database connection between them, not one each.
"""

from __future__ import annotations

import asyncio
import hashlib
import logging
from collections import Counter, defaultdict
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from functools import partial
from typing import Any, TypeVar

from django.db import DatabaseError, connections
from django.db.models import Count, Max
from django.utils import translation

from ..conf import get_setting
from ..engine.describe import describe
from ..errors import JobError
from ..models import Job, JobLog, JobStep

logger = logging.getLogger(__name__)
T = TypeVar("T")

#: The columns of a job whose change a stream shows (the rest follow them, or are the steps' and log's).
SHOWN_COLUMNS = (
    "status",
    "phase",
    "progress",
    "attempt",
    "max_attempts",
    "next_run_at",
    "eta_at",
    "label",
    "wait_reason",
    "user_message",
    "error_code",
    "cancel_requested",
    "pause_requested",
)


def job_versions(ids: list[int]) -> dict[int, str]:
    """A short text per job that changes whenever what ``describe()`` shows of it changes (its
    row, a step's state, a new log line): three grouped queries however many jobs."""
    parts: dict[int, list[Any]] = {
        pk: list(values) for pk, *values in Job.objects.filter(pk__in=ids).values_list("pk", *SHOWN_COLUMNS)
    }
    states = JobStep.objects.filter(job_id__in=ids).values_list("job_id", "phase", "state")
    for job_id, phase, state, number in states.annotate(Count("id")).order_by("job_id", "phase", "state"):
        parts[job_id].append((phase, state, number))
    lines = JobLog.objects.filter(job_id__in=ids).values_list("job_id").annotate(Max("id")).order_by()
    for job_id, last_line in lines:
        parts[job_id].append(last_line)
    return {
        pk: hashlib.blake2b(repr(values).encode(), digest_size=8).hexdigest() for pk, values in parts.items()
    }


def version_and_summary(pk: int) -> tuple[str | None, dict[str, Any] | None]:
    """The job's version and ``describe()``; ``(None, None)`` once it is gone."""
    version = job_versions([pk]).get(pk)
    if version is None:
        return None, None
    try:
        return version, describe(pk)
    except JobError:  # deleted in between
        return None, None


class Stream:
    """One open stream's place in the watcher: the version it has shown, and the next change."""

    def __init__(self, pk: int, version: str | None, owner: Any, language: str) -> None:
        self.pk, self.version, self.owner, self.language = pk, version, owner, language
        self.latest: tuple[str | None, dict[str, Any] | None] | None = None
        self.changed = asyncio.Event()

    def deliver(self, version: str | None, summary: dict[str, Any] | None) -> None:
        self.version, self.latest = version, (version, summary)
        self.changed.set()

    async def next_change(self, timeout: float) -> tuple[str | None, dict[str, Any] | None] | None:
        """The job's next version and summary, or None when ``timeout`` passed without one."""
        try:
            await asyncio.wait_for(self.changed.wait(), timeout)
        except TimeoutError:
            return None
        self.changed.clear()
        return self.latest


class Watcher:
    """The streams of one event loop, and the thread that reads for them all."""

    def __init__(self) -> None:
        self.executor = ThreadPoolExecutor(max_workers=1, thread_name_prefix="durajobs-streams")
        self.streams: dict[int, set[Stream]] = defaultdict(set)
        self.per_owner: Counter[Any] = Counter()
        self.polling: asyncio.Task[None] | None = None

    async def read(self, function: Callable[..., T], *args: Any, language: str | None = None) -> T:
        """``function(*args)`` in the watcher's thread, in ``language``; its connection is closed
        when it failed, or when no stream is open."""
        call = partial(_reading, function, args, language, lambda: not self.streams)
        return await asyncio.get_running_loop().run_in_executor(self.executor, call)

    def open(self, pk: int, version: str | None, owner: Any, language: str) -> Stream | None:
        """A stream of job ``pk`` for ``owner`` (a user's id) in ``language``, or None when they
        hold ``STREAMS_PER_USER`` already."""
        if self.per_owner[owner] >= get_setting("STREAMS_PER_USER"):
            return None
        stream = Stream(pk, version, owner, language)
        self.per_owner[owner] += 1
        self.streams[pk].add(stream)
        if self.polling is None or self.polling.done():
            self.polling = asyncio.get_running_loop().create_task(self.poll())
        return stream

    def close(self, stream: Stream) -> None:
        self.streams[stream.pk].discard(stream)
        if not self.streams[stream.pk]:
            del self.streams[stream.pk]
        self.per_owner[stream.owner] -= 1
        if self.per_owner[stream.owner] <= 0:
            del self.per_owner[stream.owner]

    async def poll(self) -> None:
        """While any stream is open: read the versions, deliver what changed, sleep."""
        while self.streams:
            try:
                await self.deliver_changes(list(self.streams))
            except DatabaseError:
                logger.warning("Job streams could not read the jobs; trying again.", exc_info=True)
            await asyncio.sleep(get_setting("STREAM_POLL_SECONDS"))
        await self.read(connections.close_all)  # the last stream closed: hold no connection

    async def deliver_changes(self, ids: list[int]) -> None:
        versions = await self.read(job_versions, ids)
        for pk in ids:
            behind: dict[str, list[Stream]] = defaultdict(list)  # by language: one summary for each
            for stream in self.streams.get(pk, ()):
                if stream.version != versions.get(pk):
                    behind[stream.language].append(stream)
            for language, streams in behind.items():
                version, summary = await self.read(version_and_summary, pk, language=language)
                for stream in streams:
                    stream.deliver(version, summary)


def _reading(
    function: Callable[..., T], args: tuple[Any, ...], language: str | None, idle: Callable[[], bool]
) -> T:
    try:
        with translation.override(language):
            return function(*args)
    except DatabaseError:
        connections.close_all()
        raise
    finally:
        if idle():
            connections.close_all()


_watchers: dict[asyncio.AbstractEventLoop, Watcher] = {}


def watcher() -> Watcher:
    """The running event loop's watcher."""
    loop = asyncio.get_running_loop()
    if loop not in _watchers:
        for ended in [other for other in _watchers if other.is_closed()]:
            _watchers.pop(ended).executor.shutdown(wait=False)
        _watchers[loop] = Watcher()
    return _watchers[loop]


def close_watchers() -> None:
    """Close every watcher's database connection and thread (a process or a test that ends)."""
    while _watchers:
        _loop, ended = _watchers.popitem()
        ended.executor.submit(connections.close_all).result()
        ended.executor.shutdown()
