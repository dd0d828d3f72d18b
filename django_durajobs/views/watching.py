"""What the open streams watch: one watcher per event loop reads, every ``STREAM_POLL_SECONDS``
(or at once on PostgreSQL's NOTIFY, ``listening.py``), a version of every watched job in one
thread of its own, and hands each changed job's new ``describe()`` to the streams that watch it.

However many streams a process holds open, its reads go through that one thread, so they
hold one database connection between them, not one each.
"""

from __future__ import annotations

import asyncio
import hashlib
from collections import Counter, defaultdict
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from functools import partial
from typing import Any, TypeVar

from django.db import DatabaseError, connections
from django.db.models import Count, Max
from django.http import HttpRequest
from django.utils import translation

from ..access import access_policy
from ..conf import get_setting
from ..engine.describe import describe
from ..errors import JobError
from ..models import Job, JobLog, JobStep
from ..redaction import package_logger
from ..store import children_counts
from .listening import Listener, announces_changes

logger = package_logger("django_durajobs.streams")
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
    row, a step's state, a new log line, a child's status, which also says how many children a
    waiting parent waits for): four grouped queries however many jobs."""
    parts: dict[int, list[Any]] = {
        pk: list(values) for pk, *values in Job.objects.filter(pk__in=ids).values_list("pk", *SHOWN_COLUMNS)
    }
    states = JobStep.objects.filter(job_id__in=ids).values_list("job_id", "phase", "state")
    for job_id, phase, state, number in states.annotate(Count("id")).order_by("job_id", "phase", "state"):
        parts[job_id].append((phase, state, number))
    lines = JobLog.objects.filter(job_id__in=ids).values_list("job_id").annotate(Max("id")).order_by()
    for job_id, last_line in lines:
        parts[job_id].append(last_line)
    for parent_id, children in children_counts(ids).items():
        parts[parent_id].append(sorted(children.items()))
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


#: What a stream learns of a job: its new version and ``describe()`` (both None once it is gone).
Change = tuple[str | None, dict[str, Any] | None]
#: The most jobs of a group one stream watches: the newest.
GROUP_STREAM_MAX_JOBS = 100


def versions_text(versions: dict[int, str | None]) -> str:
    """One version for several jobs: it changes when any of theirs does."""
    return hashlib.blake2b(repr(sorted(versions.items())).encode(), digest_size=8).hexdigest()


def group_members(groups: list[str]) -> dict[str, list[int]]:
    """The newest ``GROUP_STREAM_MAX_JOBS`` jobs of each group, by id."""
    jobs = Job.objects.order_by("-id").values_list("pk", flat=True)
    return {group: list(jobs.filter(group_id=group)[:GROUP_STREAM_MAX_JOBS]) for group in groups}


@dataclass
class Membership:
    """A group stream's group, and the request whose access policy says which new jobs of it to show."""

    group_id: str
    request: HttpRequest
    refused: set[int] = field(default_factory=set)

    def visible(self, ids: list[int]) -> list[int]:
        jobs = access_policy().visible(self.request, Job.objects.filter(pk__in=ids))
        return list(jobs.values_list("pk", flat=True))


class Stream:
    """One open stream's place in the watcher: the jobs it watches with the version of each it has
    shown, and the changes it has not sent yet."""

    def __init__(
        self, shown: dict[int, Change], owner: Any, language: str, group: Membership | None = None
    ) -> None:
        """A stream of the jobs ``shown`` (by id: the version and summary the client is sent first)."""
        self.owner, self.language, self.group = owner, language, group
        self.versions = {pk: version for pk, (version, _summary) in shown.items()}
        self.ended = {
            pk for pk, (_version, summary) in shown.items() if summary is None or summary["terminal"]
        }
        self.pending: dict[int, Change] = {}
        self.changed = asyncio.Event()

    @property
    def version(self) -> str | None:
        """What the client has seen: the job's version, or the group's."""
        if self.group is None:
            return next(iter(self.versions.values()))
        return versions_text(self.versions)

    @property
    def over(self) -> bool:
        """Every job it watches has ended, or is gone."""
        return self.ended >= set(self.versions)

    def deliver(self, pk: int, version: str | None, summary: dict[str, Any] | None) -> None:
        self.versions[pk], self.pending[pk] = version, (version, summary)
        if summary is None or summary["terminal"]:
            self.ended.add(pk)
        self.changed.set()

    async def next_changes(self, timeout: float) -> dict[int, Change] | None:
        """The changes since the last call, or None when ``timeout`` passed without one."""
        try:
            await asyncio.wait_for(self.changed.wait(), timeout)
        except TimeoutError:
            return None
        self.changed.clear()
        taken, self.pending = self.pending, {}
        return taken


class Watcher:
    """The streams of one event loop, and the thread that reads for them all."""

    def __init__(self) -> None:
        self.executor = ThreadPoolExecutor(max_workers=1, thread_name_prefix="durajobs-streams")
        self.streams: dict[int, set[Stream]] = defaultdict(set)
        self.group_streams: set[Stream] = set()
        self.per_owner: Counter[Any] = Counter()
        self.polling: asyncio.Task[None] | None = None
        self.woken = asyncio.Event()

    async def read(self, function: Callable[..., T], *args: Any, language: str | None = None) -> T:
        """``function(*args)`` in the watcher's thread, in ``language``; its connection is closed
        when it failed, or when no stream is open."""
        call = partial(_reading, function, args, language, lambda: not self.streams)
        return await asyncio.get_running_loop().run_in_executor(self.executor, call)

    def open(self, stream: Stream) -> bool:
        """Start watching for ``stream``; False when its owner (a user's id) holds
        ``STREAMS_PER_USER`` streams already."""
        if self.per_owner[stream.owner] >= get_setting("STREAMS_PER_USER"):
            return False
        self.per_owner[stream.owner] += 1
        for pk in stream.versions:
            self.streams[pk].add(stream)
        if stream.group is not None:
            self.group_streams.add(stream)
        if self.polling is None or self.polling.done():
            self.polling = asyncio.get_running_loop().create_task(self.poll())
        return True

    def close(self, stream: Stream) -> None:
        for pk in stream.versions:
            self.streams[pk].discard(stream)
            if not self.streams[pk]:
                del self.streams[pk]
        self.group_streams.discard(stream)
        self.per_owner[stream.owner] -= 1
        if self.per_owner[stream.owner] <= 0:
            del self.per_owner[stream.owner]

    async def poll(self) -> None:
        """While any stream is open: find the groups' new jobs, read the versions, deliver what
        changed, sleep."""
        listener = self.listener()
        try:
            while self.streams:
                try:
                    await self.add_new_members()
                    await self.deliver_changes(list(self.streams))
                except DatabaseError:
                    logger.warning("Job streams could not read the jobs; trying again.", exc_info=True)
                await self.pause()
        finally:
            if listener is not None:
                listener.stop()
        await self.read(connections.close_all)  # the last stream closed: hold no connection

    def listener(self) -> Listener | None:
        """With ``STREAM_NOTIFY`` on PostgreSQL, a thread that wakes this watcher on each notification."""
        if not announces_changes():
            return None
        loop = asyncio.get_running_loop()
        return Listener(lambda: loop.call_soon_threadsafe(self.woken.set))

    async def pause(self) -> None:
        """Until ``STREAM_POLL_SECONDS`` passed, or a notification came."""
        try:
            await asyncio.wait_for(self.woken.wait(), get_setting("STREAM_POLL_SECONDS"))
        except TimeoutError:
            pass
        self.woken.clear()

    async def add_new_members(self) -> None:
        """Jobs that joined a watched group since its streams opened: those each stream's policy
        shows are watched from now on (and sent, as jobs it has not seen)."""
        if not self.group_streams:
            return
        groups = sorted({stream.group.group_id for stream in self.group_streams if stream.group})
        members = await self.read(group_members, groups)
        for stream in list(self.group_streams):
            assert stream.group is not None
            new = [pk for pk in members[stream.group.group_id] if pk not in stream.versions]
            new = [pk for pk in new if pk not in stream.group.refused]
            if not new:
                continue
            shown = set(await self.read(stream.group.visible, new))
            stream.group.refused.update(set(new) - shown)
            for pk in shown:
                stream.versions[pk] = None
                self.streams[pk].add(stream)

    async def deliver_changes(self, ids: list[int]) -> None:
        versions = await self.read(job_versions, ids)
        for pk in ids:
            behind: dict[str, list[Stream]] = defaultdict(list)  # by language: one summary for each
            for stream in self.streams.get(pk, ()):
                if stream.versions.get(pk) != versions.get(pk):
                    behind[stream.language].append(stream)
            for language, streams in behind.items():
                version, summary = await self.read(version_and_summary, pk, language=language)
                for stream in streams:
                    stream.deliver(pk, version, summary)


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
