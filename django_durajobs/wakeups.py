"""SQLite has no server to notify idle workers: a worker watches the database file's change
counter instead, so a job enqueued by another process starts within milliseconds, not at the
next poll."""

from __future__ import annotations

import sqlite3
import threading
from contextlib import closing

from .redaction import package_logger

logger = package_logger("django_durajobs.worker")

#: How often an idle worker reads ``PRAGMA data_version``: a few microseconds each time.
CHECK_SECONDS = 0.005
RETRY_SECONDS = 1.0


def is_a_file(path: str) -> bool:
    """Whether the SQLite database ``path`` names is a file (others could write it), not in memory."""
    return path != ":memory:" and "mode=memory" not in path


def watch_sqlite(path: str, wake: threading.Event, stopping: threading.Event) -> None:
    """Set ``wake`` whenever another connection commits to the SQLite file at ``path``, until
    ``stopping`` is set.

    ``PRAGMA data_version`` changes when another connection commits: an enqueue in a web process,
    an answer in the admin, but also a commit of the worker's own threads (its idle threads then
    look once more and find nothing, as after a NOTIFY on PostgreSQL).
    """
    while not stopping.is_set():
        try:
            with closing(sqlite3.connect(path, check_same_thread=False)) as watcher:
                seen = _data_version(watcher)
                while not stopping.wait(CHECK_SECONDS):
                    version = _data_version(watcher)
                    if version != seen:
                        seen = version
                        wake.set()
        except sqlite3.Error as exc:
            logger.warning("Cannot watch %s for changes (%s); polling meanwhile", path, exc)
            stopping.wait(RETRY_SECONDS)


def _data_version(watcher: sqlite3.Connection) -> int:
    return int(watcher.execute("PRAGMA data_version").fetchone()[0])
