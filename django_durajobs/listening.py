"""The worker's wake-up on PostgreSQL: a connection of its own that LISTENs for the ``pg_notify``
sent when a job becomes due, so an idle worker starts it at once instead of at its next poll.

The listening connection is ``DURAJOBS["LISTEN_DATABASE"]`` (else the jobs database). Through a
pooler in transaction mode a LISTEN hears nothing: each transaction may run on another server
connection. So the worker first sends a notification to itself, through the jobs database as
every enqueue does; not heard within a second, it says so, with the fix, and polls.
"""

from __future__ import annotations

import secrets
import threading
import time
from collections.abc import Callable
from typing import Any

from django.db import connections

from . import store
from .conf import get_setting, jobs_database, listen_database
from .redaction import package_logger
from .store.sql import driver

logger = package_logger("django_durajobs.worker")

#: Waits between attempts to reach a lost database: never more than a second, so a worker is
#: back within a second of the database (or its pooler) taking logins again. An attempt costs
#: a refused connection.
RECONNECT_DELAYS = (0.25, 0.5, 1.0)
#: How long a worker waits to hear its own notification before it gives up listening.
SELF_CHECK_SECONDS = 1.0


def can_listen() -> bool:
    """Whether the listening connection is PostgreSQL through psycopg 3."""
    db = connections[listen_database()]
    return db.vendor == "postgresql" and driver(db).__name__ == "psycopg"


class Listener:
    """Sets ``wake`` on every notification until ``stopping`` is set; ``on_change(listens)``
    says whether it hears them (for the workers table), and closes this thread's connection to
    the jobs database that the self-check opened."""

    def __init__(
        self,
        worker_id: str,
        wake: threading.Event,
        stopping: threading.Event,
        on_change: Callable[[bool], None],
        poll_interval: float,
    ) -> None:
        self.worker_id = worker_id
        self.wake = wake
        self.stopping = stopping
        self.on_change = on_change
        self.poll_interval = poll_interval

    def run(self) -> None:
        tries = 0
        while not self.stopping.is_set():
            try:
                if not self._listen():
                    return  # it cannot hear: polling it is
                tries = 0
            except Exception as exc:
                if self.stopping.is_set():
                    return
                tries += 1
                self.on_change(False)
                delay = RECONNECT_DELAYS[min(tries, len(RECONNECT_DELAYS)) - 1]
                logger.warning(
                    "Worker %s: LISTEN connection lost (%s); polling meanwhile", self.worker_id, exc
                )
                self.stopping.wait(delay)

    def _listen(self) -> bool:
        """One listening connection, until it breaks (raises) or the worker stops (True);
        False when it does not hear the worker's own notification."""
        db = connections[listen_database()]
        # A connection of its own, outside Django's (and any pool's) management.
        with driver(db).connect(**db.get_connection_params(), autocommit=True) as listener:
            listener.execute(f"LISTEN {store.NOTIFY_CHANNEL}")
            if not self._hears_itself(listener):
                self.on_change(False)
                self._say_it_polls()
                return False
            self.on_change(True)
            self.wake.set()  # anything enqueued while it was not listening
            while not self.stopping.is_set():
                for _ in listener.notifies(timeout=1.0, stop_after=1):
                    self.wake.set()
        return True

    def _hears_itself(self, listener: Any) -> bool:
        payload = f"self-check:{secrets.token_hex(8)}"
        store.notify_due(payload)  # through the jobs database, as every enqueue's
        deadline = time.monotonic() + SELF_CHECK_SECONDS
        while (left := deadline - time.monotonic()) > 0:
            for notification in listener.notifies(timeout=left, stop_after=1):
                if notification.payload == payload:
                    return True
                self.wake.set()  # a real one, heard meanwhile
        return False

    def _say_it_polls(self) -> None:
        listening, jobs = listen_database(), jobs_database()
        logger.warning(
            "Worker %s does not hear the notifications sent through the database %r on its LISTEN "
            "connection (%r): a connection pooler in transaction mode passes none. It polls every "
            "%s s instead. Set DURAJOBS['LISTEN_DATABASE'] to the alias of a direct connection to "
            "the PostgreSQL server%s.",
            self.worker_id,
            jobs,
            listening,
            self.poll_interval,
            "" if get_setting("LISTEN_DATABASE") is None else " (this one is not)",
        )
