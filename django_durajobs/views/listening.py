"""PostgreSQL, with ``DURAJOBS["STREAM_NOTIFY"]``: open streams see a status change at once.

Every process that changes jobs (workers, web servers) sends ``pg_notify`` on ``CHANNEL`` with
the job's id after each status change (a ``job_changed`` receiver, connected at start-up only when
the setting is on: it costs each status change a query). Each process serving streams listens
on one connection of its own, outside Django's, while it has streams open, and wakes its watcher,
which reads at once instead of at its next ``STREAM_POLL_SECONDS``. Progress, steps and log lines
are not announced: the polling finds them.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import Any

from django.db import connection

from ..conf import get_setting
from ..models import Job
from ..redaction import package_logger
from ..signals import job_changed
from ..store.sql import driver

logger = package_logger("django_durajobs.streams")

CHANNEL = "durajobs_changed"
#: How long the listener waits for a notification before it looks whether to stop.
WAIT_SECONDS = 1.0


def announces_changes() -> bool:
    return bool(get_setting("STREAM_NOTIFY")) and connection.vendor == "postgresql"


def notify_change(sender: Any, job: Job, **kwargs: Any) -> None:
    with connection.cursor() as cursor:
        cursor.execute("SELECT pg_notify(%s, %s)", [CHANNEL, str(job.pk)])


def connect_notifier() -> None:
    """Announce every status change of this process's jobs, when ``STREAM_NOTIFY`` is on (PostgreSQL)."""
    if announces_changes():
        job_changed.connect(notify_change, sender=Job, dispatch_uid="durajobs-stream-notify")


class Listener:
    """A thread that calls ``wake()`` for each notification on ``CHANNEL`` until ``stop()``."""

    def __init__(self, wake: Callable[[], object]) -> None:
        self.wake = wake
        self.stopping = threading.Event()
        self.thread = threading.Thread(target=self.listen, name="durajobs-streams-listen", daemon=True)
        self.thread.start()

    def stop(self) -> None:
        self.stopping.set()

    def listen(self) -> None:
        while not self.stopping.is_set():
            try:
                with driver(connection).connect(**connection.get_connection_params(), autocommit=True) as own:
                    own.execute(f"LISTEN {CHANNEL}")
                    self.wake()  # whatever changed while nobody listened
                    while not self.stopping.is_set():
                        for _notification in own.notifies(timeout=WAIT_SECONDS, stop_after=1):
                            self.wake()
            except Exception:
                logger.warning("Job streams: LISTEN connection lost; polling meanwhile.", exc_info=True)
                self.stopping.wait(WAIT_SECONDS)
