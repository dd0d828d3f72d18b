"""A worker's event loop: async jobs run on it as tasks, in a thread of its own.

A job thread of the worker claims a job; when its run is ``async def``, it hands the lease to
``AsyncJobs.submit`` and goes on claiming. The job's concurrency slot goes with it and is given
back when its task ends, so sync and async jobs together never exceed ``--concurrency``.

Nothing on the loop blocks on the database: the engine's database work runs in a small pool of
threads (``DURAJOBS["ASYNC_DATABASE_THREADS"]``, each with a connection it keeps), sync step
functions in threads of their own (at most ``--concurrency``). Heartbeats come from the worker's
housekeeping thread, which reads the leases of the tasks as it does those of the job threads:
a coroutine that blocks the loop stalls the worker's other async jobs, never their leases.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import threading
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, TypeVar

from asgiref.sync import sync_to_async
from django.db import connections

from . import store
from .conf import get_setting
from .engine.async_context import Threads
from .engine.async_runner import execute_async
from .redaction import package_logger
from .worker import refresh_connection

if TYPE_CHECKING:
    from .worker import Worker

logger = package_logger("django_durajobs.worker")

T = TypeVar("T")
#: How long a stopping worker waits for its cancelled tasks, and for its threads to close their
#: connections.
STOP_SECONDS = 2.0


class ConnectedThreads:
    """Threads for blocking work from the loop; each keeps its database connection between calls
    (healthy, as a job thread's: ``refresh_connection``), until ``close()`` closes them all."""

    def __init__(self, size: int, name: str) -> None:
        self._started: set[threading.Thread] = set()
        self._lock = threading.Lock()
        self._executor = concurrent.futures.ThreadPoolExecutor(
            size, thread_name_prefix=name, initializer=self._started_thread
        )

    def _started_thread(self) -> None:
        with self._lock:
            self._started.add(threading.current_thread())

    def __call__(self, fn: Callable[[], T], /) -> asyncio.Future[T]:
        return asyncio.get_running_loop().run_in_executor(self._executor, self._call, fn)

    @staticmethod
    def _call(fn: Callable[[], T]) -> T:
        refresh_connection()
        try:
            return fn()
        except Exception as exc:
            if store.database_trouble(exc):
                store.jobs_connection().close()
            raise

    def close(self) -> None:
        """Close the connection of every thread (one call each, held at a barrier until all have
        one), then let the threads end. A thread still stuck in a step keeps its own."""
        with self._lock:
            count = len(self._started)
        if count:
            barrier = threading.Barrier(count, timeout=STOP_SECONDS)
            closing = [self._executor.submit(_close_connections, barrier) for _ in range(count)]
            concurrent.futures.wait(closing, timeout=STOP_SECONDS * 2)
        self._executor.shutdown(wait=False, cancel_futures=True)


def _close_connections(barrier: threading.Barrier) -> None:
    connections.close_all()
    try:
        barrier.wait()
    except threading.BrokenBarrierError:  # a thread is stuck in a step: the others are closed
        pass


class AsyncJobs:
    """The event loop of one worker, and the async jobs running on it."""

    def __init__(self, worker: Worker) -> None:
        self._worker = worker
        self._loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self._loop.run_forever, name="durajobs-async", daemon=True)
        self._database = ConnectedThreads(get_setting("ASYNC_DATABASE_THREADS"), "durajobs-async-db")
        self._steps = ConnectedThreads(worker.options.concurrency, "durajobs-async-step")
        self._threads = Threads(database=self._database, steps=self._steps)
        self._running: set[concurrent.futures.Future[Any]] = set()
        self._lock = threading.Lock()

    def start(self) -> None:
        self._thread.start()

    def submit(self, lease: store.Lease) -> None:
        """Run the leased job as a task (from a job thread, which holds a slot for it)."""
        task = asyncio.run_coroutine_threadsafe(self._run(lease), self._loop)
        with self._lock:
            self._running.add(task)
        self._worker.hold(task, lease)
        task.add_done_callback(lambda task: self._ended(task, lease))

    def running(self) -> bool:
        with self._lock:
            return bool(self._running)

    async def _run(self, lease: store.Lease) -> None:
        # Django's async ORM runs in asgiref's thread-sensitive thread: keep its connection healthy.
        await sync_to_async(refresh_connection, thread_sensitive=True)()
        await execute_async(lease, self._threads)

    def _ended(self, task: concurrent.futures.Future[Any], lease: store.Lease) -> None:
        with self._lock:
            self._running.discard(task)
        error = None if task.cancelled() else task.exception()
        if task.cancelled():
            logger.warning("Job %s: its task was cancelled; what it still writes is refused", lease.job.pk)
        self._worker.let_go(task, lease, error)

    def stop(self) -> None:
        """Cancel the tasks still running (their leases were given back), close the connections
        of the loop's threads, and stop the loop."""
        with self._lock:
            running = list(self._running)
        for task in running:
            task.cancel()
        concurrent.futures.wait(running, timeout=STOP_SECONDS)
        closing = asyncio.run_coroutine_threadsafe(
            sync_to_async(connections.close_all, thread_sensitive=True)(), self._loop
        )
        try:
            closing.result(timeout=STOP_SECONDS)
        except TimeoutError:
            logger.warning("Worker %s: its event loop is blocked; stopping it anyway", self._worker.worker_id)
        self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join(STOP_SECONDS)
        self._database.close()
        self._steps.close()
