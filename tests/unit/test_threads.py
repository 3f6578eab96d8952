"""Threads started with the stop signals held back (reprobuild._util.threads): a signal that
comes while ``Thread.start()`` waits is handled once the thread runs, never in the middle of
its start (a CLI stopped there printed "Exception ignored in thread started by ... KeyError"
after its one error line: tests/hostile/test_verify_hostile.py, SIGINT to verify)."""

from __future__ import annotations

import signal
import threading

import pytest

from reprobuild._util.threads import STOP_SIGNALS, start


def test_a_signal_sent_during_start_is_handled_after_it(monkeypatch: pytest.MonkeyPatch) -> None:
    seen: list[str] = []
    ran = threading.Event()

    def on_signal(signum: int, frame: object) -> None:
        seen.append("handled" if thread_started.is_set() else "during start")
        raise KeyboardInterrupt

    thread_started = threading.Event()

    def body() -> None:
        ran.set()

    thread = threading.Thread(target=body, daemon=True)
    real_start = thread.start

    def start_and_signal() -> None:
        # the signal comes to this (the main) thread while start() is under way; sent to the
        # process, another thread of pytest-xdist's could take it (see the module's note)
        signal.pthread_kill(threading.get_ident(), signal.SIGINT)
        real_start()
        thread_started.set()

    monkeypatch.setattr(thread, "start", start_and_signal)
    old = signal.signal(signal.SIGINT, on_signal)
    try:
        with pytest.raises(KeyboardInterrupt):
            start(thread)
    finally:
        signal.signal(signal.SIGINT, old)
    assert seen == ["handled"]
    assert ran.wait(10)
    # the main thread's mask is as it was; the thread inherited the stop signals blocked
    assert not STOP_SIGNALS & signal.pthread_sigmask(signal.SIG_BLOCK, [])


def test_the_started_thread_keeps_the_stop_signals_blocked() -> None:
    masks: list[set[int]] = []
    thread = start(
        threading.Thread(target=lambda: masks.append(signal.pthread_sigmask(signal.SIG_BLOCK, [])))
    )
    thread.join(10)
    assert masks[0] >= STOP_SIGNALS
