"""Job streams served by uvicorn (``tests/asgi.py``): 200 open streams of 20 users share a few
database connections, every one gets a change within a second, and every one ends with its job.

The connections are counted on the database server (PostgreSQL's ``pg_stat_activity``,
MariaDB's process list); on SQLite there is no server to ask, and only the delivery is checked.
"""

from __future__ import annotations

import asyncio
import time

import pytest
from django.conf import settings
from django.contrib.auth.models import User
from django.db import connection
from django.test import Client

from django_durajobs import cancel, enqueue, update
from tests.e2e import test_async_asgi
from tests.helpers import wait_for
from tests.sessions import other_sessions

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.slow]

USERS = 20
STREAMS_EACH = 10  # 200 streams, within the default STREAMS_PER_USER (20)


asgi = test_async_asgi.asgi


@pytest.fixture
def uvicorn(asgi) -> int:
    """The port of uvicorn serving the test project (``tests/asgi.py``)."""
    return asgi.port


async def all_of(*awaitables):
    return await asyncio.gather(*awaitables)


class Stream:
    """One stream over a raw socket; ``text`` is what it received so far (chunk sizes and all)."""

    def __init__(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.reader, self.writer, self.text = reader, writer, ""

    @classmethod
    async def open(cls, port: int, path: str, cookie: str) -> Stream:
        reader, writer = await asyncio.open_connection("127.0.0.1", port)
        request = (
            f"GET {path} HTTP/1.1\r\nHost: 127.0.0.1\r\nCookie: {cookie}\r\nAccept: text/event-stream\r\n\r\n"
        )
        writer.write(request.encode())
        await writer.drain()
        return cls(reader, writer)

    async def until(self, text: str, timeout: float) -> None:
        deadline = asyncio.get_running_loop().time() + timeout
        while text not in self.text:
            left = deadline - asyncio.get_running_loop().time()
            chunk = await asyncio.wait_for(self.reader.read(65536), max(left, 0.001))
            if not chunk:
                raise AssertionError(f"the stream closed before {text!r}: {self.text[-300:]}")
            self.text += chunk.decode()


@pytest.mark.serial  # it times how soon a change reaches two hundred streams
def test_two_hundred_open_streams_share_a_few_connections_and_each_gets_every_change(uvicorn, db_vendor):
    jobs, cookies = [], []
    for number in range(USERS):
        user = User.objects.create_user(f"customer-{number}")
        job, _created = enqueue(
            "browser_deploy_site", subject={"domain": f"site-{number}.example"}, created_by=user
        )
        client = Client()
        client.force_login(user)
        jobs.append(job)
        cookies.append(f"{settings.SESSION_COOKIE_NAME}={client.cookies[settings.SESSION_COOKIE_NAME].value}")
    loop = asyncio.new_event_loop()
    streams: list[Stream] = []
    try:
        streams = loop.run_until_complete(
            all_of(
                *(
                    Stream.open(uvicorn, f"/jobs/{job.pk}/events/", cookie)
                    for job, cookie in zip(jobs, cookies, strict=True)
                    for _ in range(STREAMS_EACH)
                )
            )
        )
        loop.run_until_complete(all_of(*(stream.until('"status": "queued"', 60) for stream in streams)))
        if db_vendor != "sqlite":
            with connection.cursor() as cursor:
                held = len(other_sessions(cursor))
            print(f"{len(streams)} open streams, {held} database connections held by the server")
            assert held <= 3

        started = time.monotonic()
        for job in jobs:
            update(job.pk, progress=42)
        loop.run_until_complete(all_of(*(stream.until('"progress": 42', 15) for stream in streams)))
        delivered = time.monotonic() - started
        # Under 1 s on a quiet machine (a poll interval, and the updates made one by one); the bound
        # here is that of a broken path (a stream that waits for its heartbeat or its end), not of
        # a loaded one: CI runs three suites side by side on two cores.
        print(f"a change reached all {len(streams)} streams in {delivered:.2f} s")
        assert delivered < 10

        for job in jobs:
            cancel(job.pk)
        loop.run_until_complete(all_of(*(stream.until("event: end", 5) for stream in streams)))
    finally:
        for stream in streams:
            stream.writer.close()
        loop.close()


@pytest.mark.serial  # it times the answers to a thousand requests: beside other suites they took 200 s
def test_one_user_opening_a_stream_a_thousand_times_is_refused_past_the_limit_and_harms_nothing(
    uvicorn, db_vendor
):
    user = User.objects.create_user("eager")
    job, _created = enqueue("browser_deploy_site", subject={"domain": "eager.example"}, created_by=user)
    client = Client()
    client.force_login(user)
    cookie = f"{settings.SESSION_COOKIE_NAME}={client.cookies[settings.SESSION_COOKIE_NAME].value}"
    loop = asyncio.new_event_loop()
    streams: list[Stream] = []
    try:
        streams = loop.run_until_complete(
            all_of(*(Stream.open(uvicorn, f"/jobs/{job.pk}/events/", cookie) for _ in range(1_000)))
        )
        # A thousand requests at once: 30 s alone on two cores; the bound is a broken path's.
        loop.run_until_complete(all_of(*(stream.until("\r\n\r\n", 200) for stream in streams)))
        statuses = [stream.text.split(" ", 2)[1] for stream in streams]
        assert (statuses.count("200"), statuses.count("429")) == (20, 980)
        refused = next(stream for stream in streams if stream.text.startswith("HTTP/1.1 429"))
        loop.run_until_complete(refused.until("too_many_streams", 5))
        if db_vendor != "sqlite":
            with connection.cursor() as cursor:
                assert len(other_sessions(cursor)) <= 3
        for stream in streams:
            stream.writer.close()
        shown = Client()
        shown.force_login(user)
        assert shown.get(f"/jobs/{job.pk}/").json()["status"] == "queued"  # nothing changed

        def reopens() -> bool:  # the closed streams free their places
            again = loop.run_until_complete(Stream.open(uvicorn, f"/jobs/{job.pk}/events/", cookie))
            loop.run_until_complete(again.until("\r\n\r\n", 10))
            again.writer.close()
            return again.text.startswith("HTTP/1.1 200")

        wait_for(reopens, timeout=10, message="a stream to open again")
    finally:
        for stream in streams:
            stream.writer.close()
        loop.close()
