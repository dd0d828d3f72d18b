"""``DURAJOBS["STREAM_NOTIFY"]`` on PostgreSQL: a worker announces each status change with
``pg_notify``, and uvicorn's watcher, listening, reads at once. Its polling is set to 30 s here,
so a change that arrives in a few seconds came by the notification."""

from __future__ import annotations

import asyncio
import time

import pytest
from django.conf import settings
from django.contrib.auth.models import User
from django.test import Client

from django_durajobs import enqueue
from tests.e2e import test_async_asgi
from tests.e2e.test_end_user_streams_asgi import Stream
from tests.helpers import stop_cleanly

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.slow]

asgi = test_async_asgi.asgi
POLL_SECONDS = 30


@pytest.fixture
def child_env(child_env, db_vendor):
    if db_vendor != "postgresql":
        pytest.skip("NOTIFY is PostgreSQL's")
    return {**child_env, "DURAJOBS_STREAM_NOTIFY": "1", "DURAJOBS_STREAM_POLL_SECONDS": str(POLL_SECONDS)}


def test_a_status_change_a_worker_makes_reaches_the_stream_by_notification(asgi, runjobs, child_env):
    user = User.objects.create_user("customer")
    job, _created = enqueue(
        "browser_deploy_site", subject={"domain": "shop.example", "occupied": True}, created_by=user
    )
    client = Client()
    client.force_login(user)
    cookie = f"{settings.SESSION_COOKIE_NAME}={client.cookies[settings.SESSION_COOKIE_NAME].value}"
    loop = asyncio.new_event_loop()
    try:
        stream = loop.run_until_complete(Stream.open(asgi.port, f"/jobs/{job.pk}/events/", cookie))
        loop.run_until_complete(stream.until('"status": "queued"', 30))
        started = time.monotonic()
        worker = runjobs("--poll-interval", "0.1", env=child_env)
        loop.run_until_complete(stream.until('"status": "needs_user"', POLL_SECONDS / 2))
        print(f"the question reached the stream {time.monotonic() - started:.2f} s after the worker started")
        stop_cleanly([worker])
        stream.writer.close()
    finally:
        loop.close()
