"""Threads started with the stop signals held back (reprobuild._util.threads): a signal that
comes while ``Thread.start()`` waits is handled once the thread runs, never in the middle of
its start (a CLI stopped there printed "Exception ignored in thread started by ... KeyError"
after its one error line: tests/hostile/test_verify_hostile.py, SIGINT to verify)."""

from __future__ import annotations

import importlib
import signal
import subprocess
import sys
import threading
import time

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
    # the main thread's mask is as it was
    assert not STOP_SIGNALS & signal.pthread_sigmask(signal.SIG_BLOCK, [])


def test_the_started_thread_and_its_processes_take_the_stop_signals() -> None:
    """The thread unblocks the stop signals first thing: a process it starts (buildah, pip)
    inherits its mask, and must stop on the SIGTERM that is to stop it. With the thread
    keeping them blocked, ``terminate()`` did nothing (checked)."""
    masks: list[set[int]] = []
    outcome: list[str] = []

    def work() -> None:
        masks.append(signal.pthread_sigmask(signal.SIG_BLOCK, []))
        proc = subprocess.Popen(["sleep", "30"])
        proc.terminate()
        try:
            proc.wait(timeout=10)
            outcome.append(f"ended by signal {-proc.returncode}")
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
            outcome.append("ignored SIGTERM")

    thread = start(threading.Thread(target=work))
    thread.join(20)
    assert not masks[0] & STOP_SIGNALS
    assert outcome == [f"ended by signal {int(signal.SIGTERM)}"]


@pytest.mark.parametrize("signum", [signal.SIGTERM, signal.SIGINT])
def test_a_stop_signal_inside_a_library_s_thread_start_is_raised_after_it(signum: int) -> None:
    """Threads that libraries start (a ThreadPoolExecutor's workers) go through a plain
    ``Thread.start()``: the CLI's handler, answering there, raises the signal again once start
    has returned, and the thread runs whole."""
    cli = importlib.import_module("reprobuild.cli.main")  # the package exports main()

    ran = threading.Event()
    thread = threading.Thread(target=ran.set, daemon=True)
    started = thread._started  # type: ignore[attr-defined]
    answered: list[bool] = []

    class StartedSignalledInWait:
        """The thread's start handshake, with the signal answered inside start()'s wait."""

        def wait(self, timeout: float | None = None) -> bool:
            handler = cli._on_signal if signum != signal.SIGINT else cli._on_sigint
            handler(signum, sys._getframe())  # as if the signal came here: no raise
            answered.append(True)
            return bool(started.wait(timeout))

        def __getattr__(self, name: str) -> object:
            return getattr(started, name)

    thread._started = StartedSignalledInWait()  # type: ignore[attr-defined]
    wanted = cli.Stopped if signum != signal.SIGINT else KeyboardInterrupt
    saved = {sig: signal.getsignal(sig) for sig in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)}
    signal.signal(signum, cli._on_signal if signum != signal.SIGINT else cli._on_sigint)
    try:
        try:
            thread.start()
        except wanted:
            pytest.fail("the handler raised inside Thread.start(): the thread is half-started")
        assert answered == [True]
        with pytest.raises(wanted):
            time.sleep(10)  # the signal, sent again to this thread once start() returned
    finally:
        for sig, handler in saved.items():
            signal.signal(sig, handler)
    assert ran.wait(10)  # the thread ran whole
