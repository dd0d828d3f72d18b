"""The job's event stream (``GET /jobs/<id>/events/``) as Django's ASGI handler serves it: a
change delivered within a second, the end of a terminal job, resumption from ``Last-Event-ID``,
a limit of open streams per user; and as its WSGI handler answers it, by polling."""

from __future__ import annotations

import asyncio
import json
import time

import pytest
from asgiref.sync import async_to_sync, sync_to_async
from django.contrib.auth.models import User
from django.test import AsyncClient, Client

from django_durajobs import Status, cancel, drain, enqueue, update
from django_durajobs.views.watching import close_watchers, watcher

pytestmark = pytest.mark.django_db(transaction=True)


@pytest.fixture(autouse=True)
def quick_polls(settings):
    settings.DURAJOBS = {"STREAM_POLL_SECONDS": 0.1, "STREAM_HEARTBEAT_SECONDS": 0.3, "STREAMS_PER_USER": 3}
    yield
    close_watchers()  # the test's event loop is gone: its watcher's connection goes too


@pytest.fixture
def owner() -> User:
    return User.objects.create_user("owner")


@pytest.fixture
def asking(owner):
    job, _created = enqueue(
        "browser_deploy_site", subject={"domain": "shop.example", "occupied": True}, created_by=owner
    )
    drain()
    return job


@pytest.fixture
def streams(owner) -> AsyncClient:
    """The owner's client for ASGI requests, logged in before any event loop runs."""
    client = AsyncClient()
    client.force_login(owner)
    return client


class Events:
    """A stream's events as they come, parsed: ``(event, id, data)``; comments are heartbeats."""

    def __init__(self, response) -> None:
        self.chunks = aiter(response.streaming_content)
        self.pending = ""

    async def next(
        self, timeout: float = 2.0, heartbeats: bool = False
    ) -> tuple[str, str | None, dict | None]:
        """The next event (a heartbeat only if ``heartbeats``); a timeout ends the stream."""
        while "\n\n" not in self.pending:
            chunk = await asyncio.wait_for(anext(self.chunks), timeout)
            self.pending += chunk.decode() if isinstance(chunk, bytes) else chunk
        block, self.pending = self.pending.split("\n\n", 1)
        fields = dict(line.split(": ", 1) for line in block.split("\n") if not line.startswith(":"))
        if block.startswith(":") and heartbeats:
            return "heartbeat", None, None
        if block.startswith(":") or "retry" in fields:
            return await self.next(timeout, heartbeats)
        return fields.get("event", "message"), fields.get("id"), json.loads(fields.get("data", "null"))


def test_a_change_reaches_an_open_stream_within_a_second(owner, asking, streams):
    async def scenario() -> float:
        response = await streams.get(f"/jobs/{asking.pk}/events/")
        assert response["Content-Type"].startswith("text/event-stream")
        events = Events(response)
        kind, _id, summary = await events.next()
        assert (kind, summary["status"]) == ("job", Status.NEEDS_USER)
        started = time.monotonic()
        await sync_to_async(update)(asking.pk, progress=90, wait_reason="Checking the DNS record")
        kind, _id, summary = await events.next(timeout=1.0)
        assert (kind, summary["progress"], summary["wait_reason"]) == ("job", 90, "Checking the DNS record")
        return time.monotonic() - started

    assert async_to_sync(scenario)() < 1.0


def test_a_stream_ends_when_its_job_ends(owner, asking, streams):
    async def scenario() -> list[str]:
        events = Events(await streams.get(f"/jobs/{asking.pk}/events/"))
        await events.next()
        await sync_to_async(cancel)(asking.pk, by=owner)
        kind, _id, summary = await events.next()
        assert (kind, summary["status"], summary["terminal"]) == ("job", Status.CANCELLED, True)
        assert (await events.next())[0] == "end"
        with pytest.raises(StopAsyncIteration):
            await events.next()
        return []

    async_to_sync(scenario)()


def test_a_job_that_ends_while_the_client_reads_the_change_before_is_shown_ended_before_the_end(
    owner, asking, streams
):
    """The stream sends one change and waits for the client to read it; the job ends meanwhile.
    The client is sent the ended job before ``end``, not ``end`` alone."""

    async def scenario() -> None:
        events = Events(await streams.get(f"/jobs/{asking.pk}/events/"))
        await events.next()
        await sync_to_async(update)(asking.pk, progress=70)
        assert (await events.next())[2]["progress"] == 70  # the stream now waits for the next read
        await sync_to_async(cancel)(asking.pk, by=owner)
        (stream,) = watcher().streams[asking.pk]
        while not stream.over:  # the watcher has read the ended job before the client reads again
            await asyncio.sleep(0.01)
        kind, last, summary = await events.next()
        assert (kind, summary["status"], last) == ("job", Status.CANCELLED, stream.version)
        assert (await events.next())[0] == "end"

    async_to_sync(scenario)()


def test_a_stream_resumed_from_its_last_event_id_skips_what_the_client_has(owner, asking, streams):
    async def scenario() -> None:
        client = streams
        events = Events(await client.get(f"/jobs/{asking.pk}/events/"))
        _kind, seen, _summary = await events.next()
        resumed = Events(await client.get(f"/jobs/{asking.pk}/events/", headers={"Last-Event-ID": seen}))
        assert (await resumed.next(heartbeats=True))[0] == "heartbeat"  # nothing new: no event
        await sync_to_async(update)(asking.pk, progress=70)
        _kind, newer, summary = await resumed.next()
        assert newer != seen and summary["progress"] == 70
        await sync_to_async(cancel)(asking.pk)
        _kind, last, _summary = await resumed.next()
        finished = await client.get(f"/jobs/{asking.pk}/events/", headers={"Last-Event-ID": last})
        assert finished.status_code == 204  # a terminal job the client has: EventSource stops

    async_to_sync(scenario)()


def test_one_user_opens_a_limited_number_of_streams(owner, asking, streams):
    async def scenario() -> list[int]:
        client = streams
        responses = [await client.get(f"/jobs/{asking.pk}/events/") for _ in range(5)]
        for response in responses[:3]:
            await Events(response).next()
        return [response.status_code for response in responses]

    assert async_to_sync(scenario)() == [200, 200, 200, 429, 429]


def test_under_wsgi_the_stream_answers_at_once_and_the_browser_polls(owner, asking):
    client = Client()
    client.force_login(owner)
    first = client.get(f"/jobs/{asking.pk}/events/")
    text = first.content.decode()
    assert text.startswith("retry: 2000\n\n") and "event: job\n" in text
    seen = next(line[4:] for line in text.splitlines() if line.startswith("id: "))
    again = client.get(f"/jobs/{asking.pk}/events/", headers={"Last-Event-ID": seen})
    assert again.content.decode() == "retry: 2000\n\n"
    cancel(asking.pk)
    ended = client.get(f"/jobs/{asking.pk}/events/", headers={"Last-Event-ID": seen}).content.decode()
    assert '"status": "cancelled"' in ended and ended.endswith("event: end\ndata: {}\n\n")


def test_a_group_stream_shows_the_groups_jobs_the_user_sees_new_ones_too_and_ends_with_them(owner, streams):
    other = User.objects.create_user("other")
    first, _ = enqueue(
        "browser_renew_certificate", subject={"domain": "a.example"}, created_by=owner, group_id="r7"
    )
    enqueue(
        "browser_renew_certificate", subject={"domain": "hidden.example"}, created_by=other, group_id="r7"
    )

    async def scenario() -> None:
        events = Events(await streams.get("/jobs/events/?group=r7"))
        _kind, _id, summary = await events.next()
        assert summary["id"] == first.pk
        later, _ = await sync_to_async(enqueue)(
            "browser_renew_certificate", subject={"domain": "b.example"}, created_by=owner, group_id="r7"
        )
        await sync_to_async(enqueue)(
            "browser_renew_certificate",
            subject={"domain": "hidden-2.example"},
            created_by=other,
            group_id="r7",
        )
        _kind, _id, summary = await events.next()
        assert summary["id"] == later.pk  # the other user's new job is not shown
        await sync_to_async(cancel)(first.pk)
        _kind, _id, summary = await events.next()
        assert (summary["id"], summary["status"]) == (first.pk, Status.CANCELLED)
        await sync_to_async(cancel)(later.pk)
        assert (await events.next())[2]["id"] == later.pk
        assert (await events.next())[0] == "end"  # every job it shows has ended

    async_to_sync(scenario)()


def test_a_group_stream_needs_a_group_the_user_sees_something_of(owner):
    enqueue("browser_renew_certificate", subject={"domain": "a.example"}, group_id="r8")
    client = Client()
    client.force_login(owner)
    for query in ("", "?group=", "?group=r%00"):
        refused = client.get(f"/jobs/events/{query}")
        assert (refused.status_code, refused.json()["code"]) == (400, "invalid_input")
    hidden = client.get("/jobs/events/?group=r8")
    assert (hidden.status_code, hidden.json()["code"]) == (404, "job_not_found")
    assert Client().get("/jobs/events/?group=r8").status_code == 404
