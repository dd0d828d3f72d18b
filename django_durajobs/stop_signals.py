"""SIGTERM and SIGINT for the worker, relayed to a thread of their own.

A Python signal handler runs in the main thread between two bytecodes, possibly while that thread
holds the lock inside a ``threading.Event`` it is waiting on; setting that event from the handler
would then wait for itself forever, and the worker would never stop. So the handler only writes
the signal's number to a pipe, and a thread that reads it stops the worker, where a lock is safe.
"""

from __future__ import annotations

import os
import signal
import threading
from collections.abc import Callable
from types import FrameType
from typing import Any

STOP_SIGNALS = (signal.SIGTERM, signal.SIGINT)


class StopSignals:
    """Calls ``on_signal`` in a thread for each SIGTERM or SIGINT while installed."""

    def __init__(self, on_signal: Callable[[signal.Signals], None]) -> None:
        self._on_signal = on_signal
        self._previous: dict[signal.Signals, Any] = {}
        self._write_end: int | None = None

    def install(self) -> None:
        """Take the signals over; only the main thread may (elsewhere this does nothing)."""
        if threading.current_thread() is not threading.main_thread():
            return
        read_end, self._write_end = os.pipe()
        os.set_blocking(self._write_end, False)
        threading.Thread(target=self._relay, args=(read_end,), name="durajobs-signals", daemon=True).start()
        for signum in STOP_SIGNALS:
            self._previous[signum] = signal.signal(signum, self._handle)

    def uninstall(self) -> None:
        """Give the signals back to the handlers they had before; the relaying thread ends."""
        for signum, previous in self._previous.items():
            signal.signal(signum, previous)
        self._previous.clear()
        if self._write_end is not None:
            os.close(self._write_end)
            self._write_end = None

    def _handle(self, signum: int, frame: FrameType | None) -> None:
        if self._write_end is None:
            return
        try:
            os.write(self._write_end, bytes([signum]))
        except OSError:  # thousands of signals unread, or the relay is gone: it is stopping already
            pass

    def _relay(self, read_end: int) -> None:
        try:
            while received := os.read(read_end, 1):
                self._on_signal(signal.Signals(received[0]))
        finally:
            os.close(read_end)
