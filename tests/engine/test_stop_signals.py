"""SIGTERM and SIGINT reach the worker through a thread of their own (``stop_signals.py``)."""

from __future__ import annotations

import os
import signal
import threading
import time

from django_durajobs.stop_signals import StopSignals


def test_a_signal_is_handed_to_a_thread_other_than_the_main_one():
    received: list[tuple[signal.Signals, str]] = []
    done = threading.Event()

    def on_signal(signum):
        received.append((signum, threading.current_thread().name))
        done.set()

    signals = StopSignals(on_signal)
    signals.install()
    try:
        os.kill(os.getpid(), signal.SIGINT)
        assert done.wait(5)
    finally:
        signals.uninstall()
    assert received == [(signal.SIGINT, "durajobs-signals")]


def test_a_signal_that_lands_while_the_main_thread_holds_the_lock_of_an_event_still_stops_it():
    """Inside ``Event.wait()`` the main thread holds the event's lock for a few bytecodes; a handler
    that set the event there would wait for itself forever."""
    stopping = threading.Event()
    signals = StopSignals(lambda signum: stopping.set())
    signals.install()
    try:
        with stopping._cond:  # where Event.wait() is, between taking its lock and waiting
            os.kill(os.getpid(), signal.SIGTERM)
            time.sleep(0.05)  # the handler runs in this thread now, with the lock held
        assert stopping.wait(5)
    finally:
        signals.uninstall()


def test_uninstalling_gives_the_signals_back_to_their_previous_handlers():
    before = signal.getsignal(signal.SIGTERM)
    signals = StopSignals(lambda signum: None)
    signals.install()
    assert signal.getsignal(signal.SIGTERM) is not before
    signals.uninstall()
    assert signal.getsignal(signal.SIGTERM) is before
