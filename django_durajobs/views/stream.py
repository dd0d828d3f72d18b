"""``GET /jobs/<id>/events/``: server-sent events, one ``describe()`` per change of the job.

Each event is ``event: job`` with the version as its ``id`` and ``describe()`` as JSON in its
``data``; a comment line every ``STREAM_HEARTBEAT_SECONDS`` keeps proxies from closing an idle
stream; ``event: end`` follows a terminal job's summary, and the stream closes. A client that
reconnects with ``Last-Event-ID`` gets the job again only if it changed since that version.

Under ASGI the stream stays open, its reads shared with every other stream of the process
(``watching.py``). Under WSGI an open stream would hold a worker thread, so the answer holds the
current summary (when it changed) and closes; the browser's ``EventSource`` reconnects after
``retry`` with its ``Last-Event-ID``: the same events, by polling.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator
from typing import Any

from asgiref.sync import sync_to_async
from django.core.handlers.asgi import ASGIRequest
from django.core.serializers.json import DjangoJSONEncoder
from django.http import HttpRequest, HttpResponse, JsonResponse, StreamingHttpResponse
from django.utils import translation
from django.utils.translation import gettext as _
from django.views.decorators.cache import never_cache
from django.views.decorators.http import require_GET

from ..conf import get_setting
from ..errors import JobError
from .replies import refusal, visible_job
from .watching import Stream, Watcher, version_and_summary, watcher

END = "event: end\ndata: {}\n\n"
HEARTBEAT = ": keep-alive\n\n"
#: The longest ``Last-Event-ID`` taken for a version; a longer one is no version of ours.
VERSION_MAX_LENGTH = 32


def event(version: str | None, summary: dict[str, Any]) -> str:
    data = json.dumps(summary, cls=DjangoJSONEncoder, ensure_ascii=False)
    return f"id: {version}\nevent: job\ndata: {data}\n\n"


def _opening(request: HttpRequest, job_id: str) -> tuple[Any, str | None, dict[str, Any] | None]:
    """Who asks, and the visible job's version and summary (``job_not_found`` when it is hidden)."""
    job = visible_job(request, job_id)
    return (request.user.pk, *version_and_summary(job.pk))


def _last_event_id(request: HttpRequest) -> str | None:
    shown = request.headers.get("Last-Event-ID") or request.GET.get("last_event_id")
    return shown if shown and len(shown) <= VERSION_MAX_LENGTH else None


def _first_events(version: str | None, summary: dict[str, Any] | None, last: str | None) -> str:
    """What a stream starts with: the reconnection delay, the job unless the client has this version."""
    text = f"retry: {int(get_setting('WSGI_STREAM_RETRY_SECONDS') * 1000)}\n\n"
    if summary is not None and version != last:
        text += event(version, summary)
    if summary is None or summary["terminal"]:
        text += END
    return text


@never_cache
@require_GET
async def job_events(request: HttpRequest, job_id: str) -> HttpResponse | StreamingHttpResponse:
    hub = watcher() if isinstance(request, ASGIRequest) else None
    language = translation.get_language()
    try:
        if hub is None:
            owner, version, summary = await sync_to_async(_opening)(request, job_id)
        else:
            owner, version, summary = await hub.read(_opening, request, job_id, language=language)
    except JobError as error:
        return refusal(error)
    last = _last_event_id(request)
    ended = summary is None or summary["terminal"]
    if ended and version == last:
        return HttpResponse(status=204)  # nothing new, ever: EventSource stops reconnecting
    if hub is None or summary is None or ended:
        return _event_stream(_first_events(version, summary, last))
    stream = hub.open(summary["id"], version, owner, language)
    if stream is None:
        message = _("You have %(count)s job streams open; close one first.")
        return JsonResponse(
            {"code": "too_many_streams", "error": message % {"count": get_setting("STREAMS_PER_USER")}},
            status=429,
        )
    return _event_stream(_streaming(hub, stream, _first_events(version, summary, last)))


def _event_stream(content: Any) -> HttpResponse | StreamingHttpResponse:
    response: HttpResponse | StreamingHttpResponse
    if isinstance(content, str):
        response = HttpResponse(content, content_type="text/event-stream; charset=utf-8")
    else:
        response = StreamingHttpResponse(content, content_type="text/event-stream; charset=utf-8")
    response["X-Accel-Buffering"] = "no"  # nginx: pass each event on at once
    return response


async def _streaming(hub: Watcher, stream: Stream, first: str) -> AsyncIterator[str]:
    """The stream's events until its job ends (or is deleted), or ``STREAM_MAX_SECONDS`` passed."""
    try:
        yield first
        loop = asyncio.get_running_loop()
        closes_at = loop.time() + get_setting("STREAM_MAX_SECONDS")
        while (left := closes_at - loop.time()) > 0:
            change = await stream.next_change(min(left, get_setting("STREAM_HEARTBEAT_SECONDS")))
            if change is None:
                yield HEARTBEAT
                continue
            version, summary = change
            if summary is not None:
                yield event(version, summary)
            if summary is None or summary["terminal"]:
                yield END
                return
    finally:
        hub.close(stream)
