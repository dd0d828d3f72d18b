"""The production worker behind ``manage.py runjobs``: threads that claim and run jobs.

One process runs ``concurrency`` job threads (each with its own database connection), a
housekeeping loop in the calling thread (heartbeats, recovery of expired leases, waking timed
waits) and, on PostgreSQL, a listener that wakes idle threads on ``NOTIFY`` so a new job starts
within milliseconds rather than a poll interval.
"""

from __future__ import annotations

import signal
import threading
import time
from collections.abc import Iterable
from dataclasses import dataclass

from django.db import DEFAULT_DB_ALIAS, connection, connections

from . import store
from .conf import get_setting
from .engine.redact import package_logger
from .engine.runner import execute
from .ops import wake_due_waits

logger = package_logger("django_durajobs.worker")

RECONNECT_DELAYS = (0.5, 1, 2, 5, 10)


@dataclass
class WorkerOptions:
    concurrency: int = 1
    queues: tuple[str, ...] = ()
    burst: bool = False
    poll_interval: float = 1.0
    name: str | None = None
    grace: float = 30.0


class Worker:
    """Claims and runs due jobs until stopped (or, with ``burst``, until nothing is due).

    >>> Worker(WorkerOptions(concurrency=4, queues=("default",))).run()
    """

    def __init__(self, options: WorkerOptions | None = None) -> None:
        self.options = options or WorkerOptions()
        self.worker_id = store.new_worker_id(self.options.name)
        self.stopping = threading.Event()  # stop claiming; running jobs may finish
        self.hurry = threading.Event()  # do not wait out the grace period
        self.wake = threading.Event()  # a job may be due: idle threads look now
        self._held: dict[int, store.Lease] = {}  # job thread ident -> the lease it runs
        self._to_release: list[store.Lease] = []  # jobs a lost database or a crash interrupted
        self._lock = threading.Lock()
        self._threads: list[threading.Thread] = []
        self.crashed = False  # a thread died of an unexpected error: the process should exit non-zero

    # Lifecycle ---------------------------------------------------------------------------------

    def run(self) -> None:
        """Run until SIGTERM/SIGINT (or ``stop()``); returns once every job is finished or released."""
        self._install_signal_handlers()
        options = self.options
        logger.info(
            "Worker %s starting: concurrency %s, queues %s%s",
            self.worker_id,
            options.concurrency,
            ", ".join(options.queues) or "all",
            ", burst" if options.burst else "",
        )
        self._with_database(self._recover_at_start)
        for number in range(options.concurrency):
            self._start(self._run_jobs, f"durajobs-job-{number}")
        if connection.vendor == "postgresql" and connection.Database.__name__ == "psycopg":
            self._start(self._listen, "durajobs-listen")
        try:
            self._housekeep()
        finally:
            self._shut_down()

    def stop(self, *, hurry: bool = False) -> None:
        """Stop claiming; with ``hurry``, release running jobs without waiting for them."""
        self.stopping.set()
        self.wake.set()
        if hurry:
            self.hurry.set()

    def _install_signal_handlers(self) -> None:
        if threading.current_thread() is not threading.main_thread():
            return

        def handle(signum, frame):
            hurry = self.stopping.is_set()  # a second signal: no more waiting
            logger.info(
                "Worker %s got %s: %s",
                self.worker_id,
                signal.Signals(signum).name,
                "releasing running jobs now" if hurry else "finishing running jobs",
            )
            self.stop(hurry=hurry)

        signal.signal(signal.SIGTERM, handle)
        signal.signal(signal.SIGINT, handle)

    def _start(self, target, name: str) -> None:
        thread = threading.Thread(target=self._thread_main, args=(target,), name=name, daemon=True)
        self._threads.append(thread)
        thread.start()

    def _thread_main(self, target) -> None:
        try:
            target()
        except Exception:
            logger.exception("Worker %s: thread %s crashed", self.worker_id, threading.current_thread().name)
            self.crashed = True
            self.stop()
        finally:
            connection.close()

    def _recover_at_start(self) -> None:
        predecessors = store.recover_predecessors(self.worker_id, store.worker_prefix(self.options.name))
        expired = store.recover()
        if predecessors or expired:
            logger.info(
                "Worker %s recovered %s job(s) of its previous run and %s with expired leases",
                self.worker_id,
                predecessors,
                expired,
            )

    # Job threads -------------------------------------------------------------------------------

    def _run_jobs(self) -> None:
        lease = None
        while lease is not None or not self.stopping.is_set():
            self._with_database(refresh_connection)
            if lease is None:
                lease = self._with_database(self._claim)
            if lease is None:
                if self.options.burst and not self._with_database(wake_due_waits):
                    return
                self.wake.wait(self.options.poll_interval)
                self.wake.clear()
                continue
            lease = self._run(lease)

    def _claim(self) -> store.Lease | None:
        return store.claim(self.worker_id, self.options.queues)

    def _keeps_claiming(self) -> bool:
        return not self.stopping.is_set()

    def _run(self, lease: store.Lease) -> store.Lease | None:
        """Run one job; returns the next one when finishing it claimed that too."""
        me = threading.get_ident()
        with self._lock:
            self._held[me] = lease
        try:
            execute(lease, then_claim=self._keeps_claiming)
        except Exception as exc:
            with self._lock:
                self._held.pop(me, None)
                # Given back as soon as the database answers, with the next job if it was claimed.
                self._to_release += [held for held in (lease, lease.successor) if held is not None]
            if not store.database_trouble(exc):
                raise
            logger.error("Job %s interrupted: the database connection was lost (%s)", lease.job.pk, exc)
            connection.close()
            return None
        with self._lock:
            if lease.successor is None:
                self._held.pop(me, None)
            else:
                self._held[me] = lease.successor
        return lease.successor

    # Housekeeping ------------------------------------------------------------------------------

    def _housekeep(self) -> None:
        """Heartbeats, recovery of expired leases, timed waits, and watching for the end."""
        heartbeat_every = get_setting("HEARTBEAT_SECONDS")
        recover_every = min(heartbeat_every, get_setting("LEASE_SECONDS") / 2)
        next_heartbeat = next_recovery = next_wake = time.monotonic()
        while not self.stopping.is_set():
            now = time.monotonic()
            if now >= next_heartbeat:
                self._with_database(self._heartbeat)
                next_heartbeat = now + heartbeat_every
            if now >= next_recovery:
                self._with_database(self._release_interrupted)
                if self._with_database(store.recover) or self._with_database(store.wake_forgotten_parents):
                    self.wake.set()
                next_recovery = now + recover_every
            if now >= next_wake and not self.options.burst:
                if self._with_database(wake_due_waits):
                    self.wake.set()
                next_wake = now + self.options.poll_interval
            if self.options.burst and not any(t.is_alive() for t in self._job_threads()):
                return
            self.stopping.wait(min(0.5, self.options.poll_interval, heartbeat_every))

    def _job_threads(self) -> Iterable[threading.Thread]:
        return (thread for thread in self._threads if thread.name.startswith("durajobs-job-"))

    def _heartbeat(self) -> None:
        with self._lock:
            leases = list(self._held.values())
        lost = store.heartbeat(leases)
        with self._lock:
            # Not the ones whose outcome is being recorded: their own thread tells if it was lost.
            still_held = [lease for lease in lost if not lease.finishing and lease in self._held.values()]
        for lease in still_held:
            logger.warning("Job %s: lease lost to another worker; its thread will abandon it", lease.job.pk)

    def _release_interrupted(self) -> None:
        """Give back the jobs a lost database interrupted (each stays listed until it is done)."""
        while True:
            with self._lock:
                if not self._to_release:
                    return
                lease = self._to_release[0]
            store.release(lease.job, "lost")
            with self._lock:
                self._to_release.remove(lease)

    def _shut_down(self) -> None:
        self.stopping.set()
        self.wake.set()
        deadline = time.monotonic() + self.options.grace
        next_heartbeat = time.monotonic() + get_setting("HEARTBEAT_SECONDS")
        for thread in self._job_threads():
            while thread.is_alive() and not self.hurry.is_set() and time.monotonic() < deadline:
                thread.join(0.1)
                if time.monotonic() >= next_heartbeat:
                    self._with_database(self._heartbeat, attempts=1)
                    next_heartbeat = time.monotonic() + get_setting("HEARTBEAT_SECONDS")
        self._with_database(self._release_interrupted, attempts=3)
        with self._lock:
            unfinished = list(self._held.values())
        for lease in unfinished:
            released = self._with_database(
                lambda lease=lease: store.release(lease.job, "stopping"), attempts=3
            )
            if released:
                logger.info("Job %s released for another worker", lease.job.pk)
        connection.close()
        logger.info("Worker %s stopped", self.worker_id)

    # The database, and waiting for it ----------------------------------------------------------

    def _with_database(self, action, attempts: int | None = None):
        """``action()``, retried with backoff while the database is unreachable (not when stopping)."""
        tries = 0
        while True:
            try:
                return action()
            except Exception as exc:
                if not store.database_trouble(exc):
                    raise
                tries += 1
                connection.close()
                if (attempts is not None and tries >= attempts) or self.hurry.is_set():
                    logger.error("Worker %s: database unavailable (%s); giving up", self.worker_id, exc)
                    return None
                delay = RECONNECT_DELAYS[min(tries, len(RECONNECT_DELAYS)) - 1]
                logger.warning(
                    "Worker %s: database unavailable (%s); retrying in %s s", self.worker_id, exc, delay
                )
                if self.stopping.wait(delay) and attempts is None:
                    return None

    def _listen(self) -> None:
        """PostgreSQL: wake idle job threads as soon as a job is due (``pg_notify`` on commit)."""
        tries = 0
        while not self.stopping.is_set():
            try:
                # A connection of its own, outside Django's (and any pool's) management.
                listener = connection.Database.connect(**connection.get_connection_params(), autocommit=True)
                with listener:
                    listener.execute(f"LISTEN {store.NOTIFY_CHANNEL}")
                    tries = 0
                    self.wake.set()  # anything enqueued while we were not listening
                    while not self.stopping.is_set():
                        for _ in listener.notifies(timeout=1.0, stop_after=1):
                            self.wake.set()
            except Exception as exc:
                if not self.stopping.is_set():
                    tries += 1
                    delay = RECONNECT_DELAYS[min(tries, len(RECONNECT_DELAYS)) - 1]
                    logger.warning(
                        "Worker %s: LISTEN connection lost (%s); polling meanwhile", self.worker_id, exc
                    )
                    self.stopping.wait(delay)


def drain(max_jobs: int = 100) -> int:
    """Run due jobs in this thread until none is due (or ``max_jobs`` ran); returns how many ran.

    Due means: queued jobs whose ``next_run_at`` has passed, timed waits whose ``resume_at``
    has passed (woken first, as a worker would), and pending reverts. For tests and scripts;
    production runs ``manage.py runjobs``. Each job's lease is kept alive while it runs, as a
    worker's heartbeat does, so a long step is never taken over by another worker.
    """
    worker_id = store.new_worker_id("drain")
    ran = 0
    while ran < max_jobs:
        lease = store.claim(worker_id)
        if lease is None:
            if wake_due_waits() or store.wake_forgotten_parents():
                continue
            break
        with LeaseKeeper(lease):
            execute(lease)
        ran += 1
    return ran


class LeaseKeeper:
    """Renews one lease from a thread of its own while the calling thread runs the job.

    The thread connects to the database only once a heartbeat is due, so the short jobs of a
    test or a script cost no connection. Inside a transaction there is nothing to keep: no
    other worker can see the claim before it commits.
    """

    def __init__(self, lease: store.Lease) -> None:
        self.lease = lease
        self._done = threading.Event()
        self._thread: threading.Thread | None = None

    def __enter__(self) -> LeaseKeeper:
        if not connection.in_atomic_block:
            self._thread = threading.Thread(target=self._keep, name="durajobs-lease-keeper", daemon=True)
            self._thread.start()
        return self

    def __exit__(self, *exc_info: object) -> None:
        self._done.set()
        if self._thread is not None:
            self._thread.join()

    def _keep(self) -> None:
        try:
            while not self._done.wait(get_setting("HEARTBEAT_SECONDS")):
                if store.heartbeat([self.lease]) and not self.lease.finishing:
                    logger.warning("Job %s: lease lost to another worker", self.lease.job.pk)
                    return
        except Exception:
            logger.exception("Job %s: renewing its lease failed", self.lease.job.pk)
        finally:
            connection.close()


def refresh_connection() -> None:
    """Close this thread's connection if it broke, or if ``CONN_MAX_AGE`` (when positive) is up.

    Unlike a request, a worker does not reconnect for every job when ``CONN_MAX_AGE`` is 0, nor
    after a query that merely failed.
    """
    db = connections[DEFAULT_DB_ALIAS]
    if db.connection is None:
        return
    if db.errors_occurred:
        if not db.is_usable():
            db.close()
            return
        db.errors_occurred = False
    if db.settings_dict.get("CONN_MAX_AGE") and db.close_at is not None and time.monotonic() >= db.close_at:
        db.close()
