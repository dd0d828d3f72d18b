"""Server-sent events: ``GET /jobs/<id>/events/`` for one job, ``GET /jobs/events/?group=<id>``
for the jobs of a group the requester sees; one ``describe()`` per change of a job.

Each event is ``event: job`` with the job's ``describe()`` as JSON in its ``data``; the last
event of a change carries the version the client has then as its ``id``. A comment line every
``STREAM_HEARTBEAT_SECONDS`` keeps proxies from closing an idle stream; ``event: end`` follows
once every job watched has ended, and the stream closes. A client that reconnects with
``Last-Event-ID`` is sent the jobs again only if they changed since that version.

Under ASGI the stream stays open, its reads shared with every other stream of the process
(``watching.py``). Under WSGI an open stream would hold a worker thread, so the answer holds the
current summaries (when they changed) and closes; the browser's ``EventSource`` reconnects after
``retry`` with its ``Last-Event-ID``: the same events, by polling.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator, Callable
from typing import Any

from asgiref.sync import sync_to_async
from django.core.handlers.asgi import ASGIRequest
from django.core.serializers.json import DjangoJSONEncoder
from django.http import HttpRequest, HttpResponse, JsonResponse, StreamingHttpResponse
from django.utils import translation
from django.utils.translation import gettext as _
from django.views.decorators.cache import never_cache
from django.views.decorators.http import require_GET

from ..access import access_policy
from ..conf import get_setting
from ..errors import JobError
from ..models import Job
from .replies import query_texts, refusal, visible_job
from .watching import GROUP_STREAM_MAX_JOBS, Change, Membership, Stream, Watcher, version_and_summary, watcher

END = "event: end\ndata: {}\n\n"
HEARTBEAT = ": keep-alive\n\n"
#: The longest ``Last-Event-ID`` taken for a version; a longer one is no version of ours.
VERSION_MAX_LENGTH = 32
Opening = tuple[Any, dict[int, Change]]


def events(changes: dict[int, Change], version: str | None) -> str:
    """An ``event: job`` per job still there; the last one carries ``version`` as its id."""
    shown = [summary for _version, summary in changes.values() if summary is not None]
    texts = []
    for number, summary in enumerate(shown, start=1):
        data = json.dumps(summary, cls=DjangoJSONEncoder, ensure_ascii=False)
        event_id = f"id: {version}\n" if number == len(shown) else ""
        texts.append(f"{event_id}event: job\ndata: {data}\n\n")
    return "".join(texts)


def _job_opening(request: HttpRequest, job_id: str) -> Opening:
    """Who asks, and the visible job's version and summary (``job_not_found`` when it is hidden)."""
    job = visible_job(request, job_id)
    return request.user.pk, {job.pk: version_and_summary(job.pk)}


def _group_opening(request: HttpRequest, group: str) -> Opening:
    """Who asks, and the version and summary of each job of ``group`` it sees (the newest ones)."""
    jobs = access_policy().visible(request, Job.objects.filter(group_id=group)).order_by("-id")
    ids = list(jobs.values_list("pk", flat=True)[:GROUP_STREAM_MAX_JOBS])
    if not ids:
        raise JobError(
            "job_not_found", _("No job of the group %(group)s is shown to you.") % {"group": group}
        )
    return request.user.pk, {pk: version_and_summary(pk) for pk in ids}


def _last_event_id(request: HttpRequest) -> str | None:
    shown = request.headers.get("Last-Event-ID") or request.GET.get("last_event_id")
    return shown if shown and len(shown) <= VERSION_MAX_LENGTH else None


@never_cache
@require_GET
async def job_events(request: HttpRequest, job_id: str) -> HttpResponse | StreamingHttpResponse:
    """``GET /jobs/<id>/events/``: the job's changes until it ends."""
    return await _serve(request, _job_opening, job_id)


@never_cache
@require_GET
async def group_events(request: HttpRequest) -> HttpResponse | StreamingHttpResponse:
    """``GET /jobs/events/?group=<group>``: the changes of the group's jobs the requester sees,
    those that join it later included, until they have all ended."""
    try:
        group = (query_texts(request, "group") or [""])[-1]
        if not group:
            raise JobError("invalid_input", _("A group stream names its group: ?group=…"))
    except JobError as error:
        return refusal(error)
    return await _serve(request, _group_opening, group, group=group)


async def _serve(
    request: HttpRequest, opening: Callable[..., Opening], *args: Any, group: str | None = None
) -> HttpResponse | StreamingHttpResponse:
    hub = watcher() if isinstance(request, ASGIRequest) else None
    language = translation.get_language()
    try:
        if hub is None:
            owner, shown = await sync_to_async(opening)(request, *args)
        else:
            owner, shown = await hub.read(opening, request, *args, language=language)
    except JobError as error:
        return refusal(error)
    stream = Stream(shown, owner, language, Membership(group, request) if group else None)
    last = _last_event_id(request)
    if stream.over and stream.version == last:
        return HttpResponse(status=204)  # nothing new, ever: EventSource stops reconnecting
    first = f"retry: {int(get_setting('WSGI_STREAM_RETRY_SECONDS') * 1000)}\n\n"
    if stream.version != last:
        first += events(shown, stream.version)
    if stream.over:
        first += END
    if hub is None or stream.over:
        return _event_stream(first)
    if not hub.open(stream):
        message = _("You have %(count)s job streams open; close one first.")
        return JsonResponse(
            {"code": "too_many_streams", "error": message % {"count": get_setting("STREAMS_PER_USER")}},
            status=429,
        )
    return _event_stream(_streaming(hub, stream, first))


def _event_stream(content: str | AsyncIterator[str]) -> HttpResponse | StreamingHttpResponse:
    response: HttpResponse | StreamingHttpResponse
    if isinstance(content, str):
        response = HttpResponse(content, content_type="text/event-stream; charset=utf-8")
    else:
        response = StreamingHttpResponse(content, content_type="text/event-stream; charset=utf-8")
    response["X-Accel-Buffering"] = "no"  # nginx: pass each event on at once
    return response


async def _streaming(hub: Watcher, stream: Stream, first: str) -> AsyncIterator[str]:
    """The stream's events until its jobs have ended (or are gone), or ``STREAM_MAX_SECONDS`` passed."""
    try:
        yield first
        loop = asyncio.get_running_loop()
        closes_at = loop.time() + get_setting("STREAM_MAX_SECONDS")
        while (left := closes_at - loop.time()) > 0:
            changes = await stream.next_changes(min(left, get_setting("STREAM_HEARTBEAT_SECONDS")))
            if changes is None:
                yield HEARTBEAT
                continue
            # Over as of these changes: those delivered while the client reads them go next.
            over = stream.over
            yield events(changes, stream.version)
            if over:
                yield END
                return
    finally:
        hub.close(stream)
