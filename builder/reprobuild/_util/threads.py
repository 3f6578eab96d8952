"""Starting a thread where a stop signal may come at any moment.

``Thread.start()`` waits for the new thread to say it runs. A signal handled in that wait (the
CLI raises on SIGINT, SIGTERM and SIGHUP) leaves the thread half-started, and a command that
then exits prints ``Exception ignored in thread started by ... KeyError`` from the thread's
bootstrap: a traceback after the command's one ``error:`` line. So the stop signals are held
back, at the OS level, in the main thread while the thread starts; one that came meanwhile is
handled as soon as ``start()`` returns. The new thread unblocks them first thing: a thread
inherits its creator's mask, and so does every process it starts, so a ``buildah`` or ``pip``
started from a worker thread would ignore the SIGTERM that is to stop it (and the terminal's
Ctrl-C). Python runs signal handlers in the main thread whichever thread the OS picks.
"""

from __future__ import annotations

import signal
import threading

STOP_SIGNALS = frozenset({signal.SIGINT, signal.SIGTERM, signal.SIGHUP})


def start(thread: threading.Thread) -> threading.Thread:
    """``thread.start()`` with the stop signals held back until it returns; ``thread``."""
    if threading.current_thread() is not threading.main_thread():
        thread.start()  # signals reach the main thread only: nothing to hold back here
        return thread
    old = signal.pthread_sigmask(signal.SIG_BLOCK, STOP_SIGNALS)
    run = thread.run

    def unblocked() -> None:
        signal.pthread_sigmask(signal.SIG_SETMASK, old)  # the mask the thread's creator had
        run()

    thread.run = unblocked  # type: ignore[method-assign]
    try:
        thread.start()
    finally:
        signal.pthread_sigmask(signal.SIG_SETMASK, old)
    return thread
