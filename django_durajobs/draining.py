"""``drain()``: running due jobs in the calling thread, for tests and scripts (no worker)."""

from __future__ import annotations

import signal
import threading
import time

from django.db import connections

from . import store
from .conf import get_setting
from .engine.async_runner import execute_here, runs_async
from .engine.runner import execute
from .errors import JobError
from .redaction import package_logger
from .registry import get_kind, has_kind_finders, jobs_cannot_start, known_kinds

logger = package_logger("django_durajobs.worker")

#: How many times a claim is tried again, 10 ms apart, while a due job is there that it passed
#: over (another worker's claim was reading it, or a limit holds it back).
LOOKS_AFTER_A_PASSED_OVER_JOB = 5

#: Kinds of due jobs that a finder refused in this process: not looked up again.
_refused_kinds: set[str] = set()


def drain(max_jobs: int = 100) -> int:
    """Run due jobs in this thread until none is due (or ``max_jobs`` ran); returns how many ran.

    Due means: queued jobs whose ``next_run_at`` has passed, timed waits whose ``resume_at``
    has passed (woken first, as a worker would), and pending reverts. An async job runs on an
    event loop of its own, its database work in this thread. For tests and scripts;
    production runs ``manage.py runjobs``. Each job's lease is kept alive while it runs, as a
    worker's heartbeat does, so a long step is never taken over by another worker.
    """
    worker_id = store.new_worker_id("drain")
    ran = 0
    looks_left = LOOKS_AFTER_A_PASSED_OVER_JOB
    with CtrlC() as ctrl_c:
        while ran < max_jobs:
            lease = store.claim(worker_id)
            if lease is None:
                if (
                    store.wake_due_waits()
                    or store.wake_forgotten_parents()
                    or store.wake_forgotten_event_waiters()
                    or learn_due_kinds(worker_id)
                ):
                    continue
                if looks_left and store.passed_over_by_lock():
                    looks_left -= 1
                    time.sleep(0.01)
                    continue
                break
            looks_left = LOOKS_AFTER_A_PASSED_OVER_JOB
            with LeaseKeeper(lease):
                (execute_here if runs_async(lease) else execute)(lease)
            ran += 1
            if ctrl_c.pressed:
                raise KeyboardInterrupt(f"drain() was interrupted after {ran} job(s)")
    return ran


class CtrlC:
    """Ctrl-C during ``drain()`` in the main thread: the job running then fails its try with the
    ``KeyboardInterrupt`` (as any its code raises), and ``drain()`` stops there, raising one."""

    def __init__(self) -> None:
        self.pressed = False
        self._installed = False

    def __enter__(self) -> CtrlC:
        main = threading.current_thread() is threading.main_thread()
        if main and signal.getsignal(signal.SIGINT) is signal.default_int_handler:
            signal.signal(signal.SIGINT, self._press)
            self._installed = True
        return self

    def _press(self, signum: int, frame: object) -> None:
        self.pressed = True
        raise KeyboardInterrupt

    def __exit__(self, *exc_info: object) -> None:
        if self._installed:
            signal.signal(signal.SIGINT, signal.default_int_handler)


def learn_due_kinds(worker_id: str) -> int:
    """Register the kinds of due jobs that no ``@job`` declared but a finder knows (a Django Tasks
    task, by its dotted path), so that claims take them; returns how many were found. The due jobs
    of a kind no finder gives are left to its finder's ``cannot_start`` (a task's fail), else
    stay queued, for a worker that knows their kind."""
    if not has_kind_finders():
        return 0
    found = 0
    for name in store.due_kinds_not_in(known_kinds() + sorted(_refused_kinds)):
        try:
            get_kind(name)
        except JobError as exc:
            if jobs_cannot_start(name, worker_id):
                continue
            _refused_kinds.add(name)
            logger.warning("Jobs of kind %r stay queued: %s (%s)", name, exc.message, exc.code)
            continue
        found += 1
    return found


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
        if not store.jobs_connection().in_atomic_block:
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
            connections.close_all()
