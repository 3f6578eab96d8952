"""A minimal init for when the entrypoint is PID 1 (no ``docker run --init``, no tini).

PID 1 is special: the kernel delivers it no signal whose handler is the default (so a program
that is PID 1 and installs no SIGTERM handler ignores ``docker stop`` until SIGKILL), and it
inherits every orphaned process, which stay zombies until PID 1 reaps them. So as PID 1 the
entrypoint does not ``exec``; it forks:

- the child makes its own process group, takes the terminal's foreground if there is one
  (so Ctrl-C and terminal reads reach it, not us), restores default signal handling, and
  ``exec``s the command;
- the parent forwards SIGTERM, SIGINT, SIGHUP, SIGQUIT, SIGUSR1 and SIGUSR2 to the child's
  process group, reaps every child that exits (``waitpid(-1)``), and when the command exits,
  reaps what is left and exits with its status: the exit code, or 128 + the signal number.

The parent never handles a signal asynchronously: it keeps the forwarded signals and SIGCHLD
blocked and takes them one at a time with ``sigwaitinfo`` (as tini does). A Python handler
runs only between bytecodes, so a signal that lands after the interpreter's last check and
before a blocking ``waitpid`` would wait for the next child to exit (``docker stop`` would
then SIGKILL a job that had a SIGTERM handler to save its checkpoint); a blocked signal stays
pending until ``sigwaitinfo`` takes it, so none is late or lost. The child restores the mask
it inherited before it ``exec``s.
Outside PID 1 the same loop runs when forced (``REPROBUILD_FORCE_INIT=1``, for tests); it then
also makes itself a child subreaper (``PR_SET_CHILD_SUBREAPER``), so orphans come to it as they
would to PID 1.
"""

from __future__ import annotations

import contextlib
import os
import signal
import sys
from collections.abc import Sequence

from reprobuild_entrypoint.launch import exec_command

FORWARDED = (
    signal.SIGTERM,
    signal.SIGINT,
    signal.SIGHUP,
    signal.SIGQUIT,
    signal.SIGUSR1,
    signal.SIGUSR2,
)
_PR_SET_CHILD_SUBREAPER = 36
RECEIVED: list[int] = []
"""The signals forwarded to the command, in order (for the run's exit record)."""


def exit_status(wait_status: int) -> int:
    """Shell convention: the exit code, or 128 + N when killed by signal N."""
    # os.waitstatus_to_exitcode is Python 3.9+; the runtime runs on 3.8 too.
    if os.WIFSIGNALED(wait_status):
        return 128 + os.WTERMSIG(wait_status)
    if os.WIFEXITED(wait_status):
        return os.WEXITSTATUS(wait_status)
    raise ValueError(f"not an exit or a signal: wait status {wait_status}")


def become_subreaper() -> bool:
    """Have orphaned descendants re-parented to us (Linux >= 3.4). False when not possible."""
    try:
        import ctypes

        libc = ctypes.CDLL(None, use_errno=True)
        return bool(libc.prctl(_PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0) == 0)
    except (OSError, AttributeError):
        return False


def _child(command: Sequence[str], saved_mask: set[int | signal.Signals]) -> None:
    """In the forked child: own process group, the terminal, default signals, exec."""
    status = 1
    try:
        with contextlib.suppress(OSError):
            os.setpgid(0, 0)
        _take_terminal()
        for signum in FORWARDED:
            signal.signal(signum, signal.SIG_DFL)
        signal.pthread_sigmask(signal.SIG_SETMASK, saved_mask)
        status = exec_command(command)
    finally:
        os._exit(status)


def _take_terminal() -> None:
    """Become the terminal's foreground process group, when stdin is a terminal."""
    try:
        if not os.isatty(0):
            return
        previous = signal.signal(signal.SIGTTOU, signal.SIG_IGN)  # we are in the background
        try:
            os.tcsetpgrp(0, os.getpgrp())
        finally:
            signal.signal(signal.SIGTTOU, previous)
    except OSError:
        pass


def _forward(child: int, signum: int) -> None:
    RECEIVED.append(signum)
    try:
        os.killpg(child, signum)
    except OSError:  # the group is gone, or not made yet: the child itself
        with contextlib.suppress(OSError):
            os.kill(child, signum)


def supervise(command: Sequence[str]) -> int:
    """Run ``command`` as our child and act as its init; returns its exit status."""
    if os.getpid() != 1:
        become_subreaper()
    waited = {*FORWARDED, signal.SIGCHLD}
    saved_mask = signal.pthread_sigmask(signal.SIG_BLOCK, waited)
    # no handlers: blocked, they wait for sigwaitinfo (the kernel queues a blocked signal even
    # for PID 1). SIGCHLD too: an inherited SIG_IGN would have the kernel reap our children
    # before we learn their status
    for waited_signal in waited:
        signal.signal(waited_signal, signal.SIG_DFL)
    sys.stdout.flush()
    sys.stderr.flush()
    child = os.fork()
    if child == 0:  # pragma: no cover - replaced by exec (covered by subprocess tests)
        _child(command, saved_mask)
    with contextlib.suppress(OSError):  # the child does it too; whoever is first wins
        os.setpgid(child, child)
    status = _reap(child)
    while status is None:
        signum = signal.sigwaitinfo(waited).si_signo
        if signum == signal.SIGCHLD:
            status = _reap(child)
        else:
            _forward(child, signum)
    _reap_remaining()
    return status


def _reap(child: int) -> int | None:
    """Reap every child that has exited (SIGCHLD coalesces, so one signal may stand for many);
    the command's exit status once it is among them, else None."""
    while True:
        try:
            pid, wait_status = os.waitpid(-1, os.WNOHANG)
        except ChildProcessError:  # pragma: no cover - the command is our child until reaped
            return 1
        if pid == 0:
            return None
        if pid == child:
            return exit_status(wait_status)


def _reap_remaining() -> None:
    """Collect zombies already waiting; running orphans die with the container."""
    while True:
        try:
            pid, _ = os.waitpid(-1, os.WNOHANG)
        except ChildProcessError:
            return
        if pid == 0:
            return
