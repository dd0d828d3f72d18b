"""The production worker behind ``manage.py runjobs``: threads that claim and run jobs.

One process runs up to ``concurrency`` jobs at once (each holds one of as many slots): sync jobs
in job threads (each with its own database connection; a thread is added whenever every thread
has a job, up to ``concurrency``), async jobs as tasks on an event loop (``event_loop.py``,
started when a kind is ``async def``). A housekeeping loop in the calling thread heartbeats,
recovers expired leases, wakes timed waits, enqueues what schedules make due and gives up jobs
that are stuck past their deadline; on PostgreSQL, a listener wakes idle threads on ``NOTIFY``
so a new job starts within milliseconds rather than a poll interval.

Over 400 lines: the threads, their heartbeats and the graceful stop are one lifecycle; the claim
loop is the seam to split along.
"""

from __future__ import annotations

import itertools
import signal
import threading
import time
from collections.abc import Iterable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from django.db import DEFAULT_DB_ALIAS, connections
from django.db.backends.base.base import BaseDatabaseWrapper

from . import clock, store
from .conf import get_setting, jobs_database
from .draining import learn_due_kinds
from .engine.async_runner import runs_async
from .engine.runner import abandon, execute
from .listening import RECONNECT_DELAYS, Listener, can_listen
from .redaction import package_logger
from .registry import has_async_kinds
from .stop_signals import StopSignals
from .wakeups import is_a_file, watch_sqlite

if TYPE_CHECKING:
    import concurrent.futures

    from .event_loop import AsyncJobs

logger = package_logger("django_durajobs.worker")

SCHEDULE_TICK_SECONDS = 1.0  # how often each worker looks for due schedules
KIND_LOOKUP_SECONDS = 5.0  # how often it looks for due jobs of kinds no @job registered (tasks)


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
        #: The job thread (or an async job's task) -> the lease it runs.
        self._held: dict[threading.Thread | concurrent.futures.Future[Any], store.Lease] = {}
        #: One per job running here, sync or async: a job thread takes one before it claims.
        self._slots = threading.Semaphore(self.options.concurrency)
        self._live_threads = 0  # job threads, not counting those whose job was given up
        self._idle_threads = 0  # of those, the ones without a job: claiming, or waiting to
        self._async: AsyncJobs | None = None
        #: Job threads whose job was given up past its deadline: each ends once its step returns,
        #: and a new thread has taken its place.
        self._abandoned: set[threading.Thread] = set()
        self._job_numbers = itertools.count()
        self._to_release: list[store.Lease] = []  # jobs a lost database or a crash interrupted
        self._lock = threading.Lock()
        self._threads: list[threading.Thread] = []
        self.crashed = False  # a thread died of an unexpected error: the process should exit non-zero

    # Lifecycle ---------------------------------------------------------------------------------

    def run(self) -> None:
        """Run until SIGTERM/SIGINT (or ``stop()``); returns once every job is finished or released."""
        signals = StopSignals(self._on_stop_signal)
        signals.install()
        try:
            self._serve()
        finally:
            signals.uninstall()

    def _serve(self) -> None:
        options = self.options
        logger.info(
            "Worker %s starting: concurrency %s, queues %s%s",
            self.worker_id,
            options.concurrency,
            ", ".join(options.queues) or "all",
            ", burst" if options.burst else "",
        )
        self._with_database(self._recover_at_start)
        self._with_database(
            lambda: store.register_worker(self.worker_id, options.queues, options.concurrency)
        )
        self._with_database(store.sync_schedules)
        self._with_database(lambda: learn_due_kinds(self.worker_id))
        if has_async_kinds():
            self._async_jobs()
        with self._lock:
            self._start_job_thread()  # more start as jobs keep the threads busy
        if can_listen():
            listener = Listener(
                self.worker_id, self.wake, self.stopping, self._listens, options.poll_interval
            )
            self._start(listener.run, "durajobs-listen")
        elif (db := store.jobs_connection()).vendor == "sqlite" and is_a_file(
            path := str(db.settings_dict["NAME"])
        ):
            self._start(lambda: watch_sqlite(path, self.wake, self.stopping), "durajobs-watch")
        try:
            self._housekeep()
        finally:
            self._shut_down()

    def _listens(self, listens: bool) -> None:
        """The listener's word, written from its thread, which keeps no connection to the jobs."""
        try:
            self._with_database(lambda: store.worker_listens(self.worker_id, listens), attempts=1)
        finally:
            store.jobs_connection().close()

    def stop(self, *, hurry: bool = False) -> None:
        """Stop claiming; with ``hurry``, release running jobs without waiting for them."""
        self.stopping.set()
        self.wake.set()
        if hurry:
            self.hurry.set()

    def _on_stop_signal(self, signum: signal.Signals) -> None:
        hurry = self.stopping.is_set()  # a second signal: no more waiting
        logger.info(
            "Worker %s got %s: %s",
            self.worker_id,
            signum.name,
            "releasing running jobs now" if hurry else "finishing running jobs",
        )
        self.stop(hurry=hurry)

    def _async_jobs(self) -> AsyncJobs:
        """The event loop of async jobs: started with the worker when it knows an async kind, or
        when it meets the first one (an ``async def`` task, found by its dotted path)."""
        from .event_loop import AsyncJobs

        with self._lock:
            if self._async is None:
                self._async = AsyncJobs(self)
                self._async.start()
            return self._async

    def _start(self, target, name: str) -> None:
        thread = threading.Thread(target=self._thread_main, args=(target,), name=name, daemon=True)
        self._threads.append(thread)
        thread.start()

    def _start_job_thread(self) -> None:
        """Start a job thread; called with the lock held."""
        self._live_threads += 1
        self._idle_threads += 1
        self._start(self._run_jobs, f"durajobs-job-{next(self._job_numbers)}")

    def _thread_main(self, target) -> None:
        try:
            target()
        except Exception:
            logger.exception("Worker %s: thread %s crashed", self.worker_id, threading.current_thread().name)
            self.crashed = True
            self.stop()
        finally:
            connections.close_all()

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
        me = threading.current_thread()
        lease = None
        try:
            while lease is not None or not self.stopping.is_set():
                if me in self._abandoned:  # its slot was given back when its job was given up
                    return
                self._with_database(refresh_connection)
                if lease is None:
                    if not self._slots.acquire(timeout=min(0.5, self.options.poll_interval)):
                        continue  # as many jobs run as may
                    lease = self._with_database(self._claim)
                    if lease is None:
                        self._slots.release()
                        if self.options.burst and not self._with_database(store.wake_due_waits):
                            return
                        self.wake.wait(self.options.poll_interval)
                        self.wake.clear()
                        continue
                if runs_async(lease):
                    self._async_jobs().submit(lease)  # its slot goes with it, back when its task ends
                    lease = None
                    continue
                lease = self._run(lease)
                if lease is None and me not in self._abandoned:
                    self._slots.release()
        finally:
            with self._lock:
                if me not in self._abandoned:
                    self._live_threads -= 1
                    self._idle_threads -= 1

    def _claim(self) -> store.Lease | None:
        return store.claim(self.worker_id, self.options.queues)

    def _keeps_claiming(self) -> bool:
        return not self.stopping.is_set()

    def _run(self, lease: store.Lease) -> store.Lease | None:
        """Run one job; returns the next one when finishing it claimed that too."""
        me = threading.current_thread()
        with self._lock:
            self._held[me] = lease
            self._idle_threads -= 1
            if not self._idle_threads and self._live_threads < self.options.concurrency:
                self._start_job_thread()  # one to claim while this one is busy
        try:
            next_lease = execute(lease, then_claim=self._keeps_claiming).next_lease
        except Exception as exc:
            if not self._interrupted(me, lease, exc):
                raise
            store.jobs_connection().close()
            return None
        finally:
            with self._lock:
                if me not in self._abandoned:
                    self._idle_threads += 1
        with self._lock:
            if me in self._abandoned:  # its job was given up meanwhile; another thread took its place
                return None
            if next_lease is None:
                self._held.pop(me, None)
            else:
                self._held[me] = next_lease
        return next_lease

    def _interrupted(
        self,
        holder: threading.Thread | concurrent.futures.Future[Any],
        lease: store.Lease,
        exc: BaseException,
    ) -> bool:
        """A job's run raised: it is given back as soon as the database answers. True when the
        database was lost or made a write of the run's a deadlock's victim; anything else is a
        bug, for the caller to raise."""
        with self._lock:
            self._held.pop(holder, None)
            self._to_release.append(lease)
        if store.database_trouble(exc):
            why = "the database connection was lost"
        elif store.deadlock(exc):
            why = "its write was a deadlock's victim"
        else:
            return False
        logger.error("Job %s interrupted: %s (%s)", lease.job.pk, why, exc)
        return True

    # Async jobs: the event loop's tasks hold leases too ------------------------------------------

    def hold(self, task: concurrent.futures.Future[Any], lease: store.Lease) -> None:
        """An async job's task started: its lease is heartbeated, and watched for its deadline."""
        with self._lock:
            self._held[task] = lease

    def let_go(
        self, task: concurrent.futures.Future[Any], lease: store.Lease, error: BaseException | None
    ) -> None:
        """An async job's task ended (with ``error`` if it raised one); its slot is free."""
        self._slots.release()
        if error is None:
            with self._lock:
                self._held.pop(task, None)
            return
        if not self._interrupted(task, lease, error):
            logger.error(
                "Worker %s: the task of job %s crashed", self.worker_id, lease.job.pk, exc_info=error
            )
            self.crashed = True
            self.stop()

    # Housekeeping ------------------------------------------------------------------------------

    def _housekeep(self) -> None:
        """Heartbeats, recovery of expired leases, timed waits, schedules, and watching for the end."""
        heartbeat_every = get_setting("HEARTBEAT_SECONDS")
        recover_every = min(heartbeat_every, get_setting("LEASE_SECONDS") / 2)
        next_heartbeat = next_recovery = next_wake = next_schedules = next_kinds = time.monotonic()
        while not self.stopping.is_set():
            self._abandon_overdue()
            now = time.monotonic()
            if now >= next_schedules:
                if self._with_database(store.tick_schedules):
                    self.wake.set()
                next_schedules = now + SCHEDULE_TICK_SECONDS
            if now >= next_kinds:
                if self._with_database(lambda: learn_due_kinds(self.worker_id)):
                    self.wake.set()
                next_kinds = now + KIND_LOOKUP_SECONDS
            if now >= next_heartbeat:
                self._with_database(self._heartbeat)
                next_heartbeat = now + heartbeat_every
            if now >= next_recovery:
                self._with_database(self._release_interrupted)
                recovered = [
                    self._with_database(store.recover),
                    self._with_database(store.wake_forgotten_parents),
                    self._with_database(store.wake_forgotten_event_waiters),
                    self._with_database(store.lift_stale_lanes),
                ]
                if any(recovered):
                    self.wake.set()
                next_recovery = now + recover_every
            if now >= next_wake and not self.options.burst:
                if self._with_database(store.wake_due_waits):
                    self.wake.set()
                next_wake = now + self.options.poll_interval
            if self.options.burst and not self._busy():
                return
            self.stopping.wait(min(0.5, self.options.poll_interval, heartbeat_every, self._till_a_deadline()))

    def _busy(self) -> bool:
        """Whether a job thread is still running, or an async job."""
        return any(t.is_alive() for t in self._job_threads()) or bool(self._async and self._async.running())

    def _job_threads(self) -> Iterable[threading.Thread]:
        """The job threads still running jobs of this worker (not those whose job was given up)."""
        return (
            thread
            for thread in self._threads
            if thread.name.startswith("durajobs-job-") and thread not in self._abandoned
        )

    def _till_a_deadline(self) -> float:
        """Seconds until the first deadline of a job held here (an hour when none has one)."""
        with self._lock:
            deadlines = [lease.deadline for lease in self._held.values() if lease.deadline is not None]
        return max(0.0, min(deadlines) - clock.monotonic()) if deadlines else 3600.0

    def _abandon_overdue(self) -> None:
        """Give up each job whose thread runs past its deadline, and start a thread in its place.

        Only what the job threads keep in memory is read, so this costs no query until a
        deadline passes. A thread that came back with its job meanwhile goes on as it was.
        """
        now = clock.monotonic()
        with self._lock:
            overdue = [
                (thread, lease)
                for thread, lease in self._held.items()
                if lease.deadline is not None and now >= lease.deadline and not lease.finishing
            ]
        for holder, lease in overdue:
            if not self._with_database(lambda lease=lease: abandon(lease)):
                continue
            with self._lock:
                if self._held.get(holder) is not lease:
                    continue
                del self._held[holder]
                if isinstance(holder, threading.Thread):
                    self._abandoned.add(holder)
                    self._live_threads -= 1
                    if not self.stopping.is_set():
                        self._start_job_thread()
            if isinstance(holder, threading.Thread):
                self._slots.release()  # the stuck thread no longer counts
                logger.warning(
                    "Job %s: its thread is stuck past its deadline; a new thread takes its place",
                    lease.job.pk,
                )
            else:
                holder.cancel()  # its slot comes back when the task ends

    def _heartbeat(self) -> None:
        with self._lock:
            leases = list(self._held.values())
        store.worker_alive(self.worker_id, self.options.queues, self.options.concurrency)
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
        while self._busy() and not self.hurry.is_set() and time.monotonic() < deadline:
            self.hurry.wait(0.1)
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
        self._with_database(lambda: store.worker_stopped(self.worker_id), attempts=3)
        if self._async is not None:
            self._async.stop()
        connections.close_all()
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
                store.jobs_connection().close()
                if (attempts is not None and tries >= attempts) or self.hurry.is_set():
                    logger.error("Worker %s: database unavailable (%s); giving up", self.worker_id, exc)
                    return None
                delay = RECONNECT_DELAYS[min(tries, len(RECONNECT_DELAYS)) - 1]
                logger.warning(
                    "Worker %s: database unavailable (%s); retrying in %s s", self.worker_id, exc, delay
                )
                if self.stopping.wait(delay) and attempts is None:
                    return None


def refresh_connection() -> None:
    """Close this thread's connections (to the jobs database, and to ``default`` that jobs use)
    if they broke, or if ``CONN_MAX_AGE`` (when positive) is up.

    Unlike a request, a worker does not reconnect for every job when ``CONN_MAX_AGE`` is 0, nor
    after a query that merely failed.
    """
    _refresh(store.jobs_connection())
    if jobs_database() != DEFAULT_DB_ALIAS:
        _refresh(connections[DEFAULT_DB_ALIAS])


def _refresh(db: BaseDatabaseWrapper) -> None:
    if db.connection is None:
        return
    if db.errors_occurred:
        if not db.is_usable():
            db.close()
            return
        db.errors_occurred = False
    if db.settings_dict.get("CONN_MAX_AGE") and db.close_at is not None and time.monotonic() >= db.close_at:
        db.close()
