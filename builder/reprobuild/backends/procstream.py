"""Run a build tool (the Docker CLI, buildah) as a child process and stream its output.

One job, shared by engine.py's CLI builds and buildah.py: the child's lines go to a log
callback and the last few are kept for the error; the child dies with reprobuild (even when
reprobuild is SIGKILLed); an interrupted run (Ctrl-C, SIGTERM, an exception in the callback)
stops the child and waits for it, so it cleans up its own working containers and never goes on
to tag alone; an optional overall deadline bounds network steps; output lines are read at most
``LINE_MAX`` characters at a time, so a tool that prints without newlines cannot grow memory.

The child is waited for with :func:`reap` and :func:`wait_for`, not ``Popen.poll``/``wait``:
those take a lock that a ``KeyboardInterrupt`` (or ``Stopped``) raised just after its
``acquire`` never releases (CPython checks for signals when the C call returns, before the
``try``), and every later ``wait()`` then blocks for ever: a Ctrl-C during a buildah RUN step
hung a build that way, with buildah long gone.
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import tempfile
import threading
import time
from collections import deque
from collections.abc import Callable, Mapping
from typing import Any

from reprobuild.errors import BuildError, EngineError

Log = Callable[[str], None]
TAIL_LINES = 25
LINE_MAX = 64 * 1024
POLL_S = 0.05  # how often a gentle run's output file is read


def reap(proc: subprocess.Popen[Any]) -> int | None:
    """``proc``'s exit code (negative: the signal), or None while it runs; sets
    ``proc.returncode``, which Popen's own ``poll``/``wait`` then return at once. Takes no lock:
    an exception raised between the ``waitpid`` and the assignment loses the status, and the
    next call, finding no child, says 0 as Popen does (never a wait without end)."""
    if proc.returncode is None:
        try:
            pid, status = os.waitpid(proc.pid, os.WNOHANG)
        except ChildProcessError:  # reaped already, its status lost (see above)
            proc.returncode = 0
        else:
            if pid == proc.pid:
                proc.returncode = os.waitstatus_to_exitcode(status)
    return proc.returncode


def wait_for(proc: subprocess.Popen[Any], timeout: float | None) -> int | None:
    """Wait up to ``timeout`` seconds (None: as long as it takes) for ``proc`` to exit, as
    :func:`reap` does; its exit code, or None if it still runs."""
    deadline = None if timeout is None else time.monotonic() + timeout
    delay = 0.001
    while reap(proc) is None:
        if deadline is not None and time.monotonic() >= deadline:
            return None
        time.sleep(delay if deadline is None else min(delay, max(deadline - time.monotonic(), 0)))
        delay = min(delay * 2, POLL_S)
    return proc.returncode


def kill(proc: subprocess.Popen[Any], signum: int = signal.SIGKILL) -> None:
    """Send ``signum`` to a child not yet reaped (Popen's ``send_signal`` polls first)."""
    if proc.returncode is None:
        with contextlib.suppress(ProcessLookupError):
            os.kill(proc.pid, signum)


def terminate(proc: subprocess.Popen[Any], wait_s: float) -> None:
    """Stop a child that is still running: SIGTERM, SIGKILL after ``wait_s``, and wait for it
    (a child already reaped is left alone)."""
    if reap(proc) is None:
        kill(proc, signal.SIGTERM)
        if wait_for(proc, wait_s) is None:
            kill(proc)
            wait_for(proc, None)


def die_with_parent(signum: int = signal.SIGTERM) -> None:
    """In a build client's child process: get ``signum`` when reprobuild dies (even by
    SIGKILL), so a killed run's build does not finish and tag on its own (Linux; elsewhere a
    no-op)."""
    try:
        import ctypes

        libc = ctypes.CDLL(None, use_errno=True)
        libc.prctl(1, signum)  # PR_SET_PDEATHSIG
    except (OSError, AttributeError):
        pass


def _gentle_child() -> None:
    """In a child that is stopped with SIGINT (:func:`run_streamed` ``gentle``): start with
    SIGINT ignored, and get SIGINT when reprobuild dies. A Go program (buildah) keeps an
    inherited SIG_IGN for SIGINT, except while it has asked for the signal itself: buildah asks
    while a RUN step's process runs, and then stops the step, removes its working container and
    exits. Outside those moments (creating the container, COPY, commit) the default action
    would kill it on the spot and leave its working container and temp dir behind."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    die_with_parent(signal.SIGINT)


def stop_gently(proc: subprocess.Popen[Any], wait_s: float, every_s: float = 0.1) -> None:
    """Stop a child started by :func:`_gentle_child`: SIGINT every ``every_s`` until it exits
    (it acts on the first one that lands while a RUN step runs, else it finishes the build),
    SIGKILL after ``wait_s``. A second Ctrl-C meanwhile does not cut the wait short."""
    restore = _hold_sigint()
    try:
        deadline = time.monotonic() + wait_s
        while reap(proc) is None and time.monotonic() < deadline:
            kill(proc, signal.SIGINT)
            wait_for(proc, every_s)
        if reap(proc) is None:
            kill(proc)
            wait_for(proc, None)
    finally:
        restore()


def _hold_sigint() -> Callable[[], None]:
    """Ignore SIGINT in this process until the returned function is called (main thread
    only; elsewhere nothing changes)."""
    if threading.current_thread() is not threading.main_thread():
        return lambda: None
    previous = signal.signal(signal.SIGINT, signal.SIG_IGN)

    def restore() -> None:
        signal.signal(signal.SIGINT, previous)

    return restore


def run_streamed(
    argv: list[str],
    what: str,
    log: Log,
    *,
    env: Mapping[str, str] | None = None,
    deadline_s: float | None = None,
    stop_wait_s: float = 60.0,
    gentle: bool = False,
) -> None:
    """Run ``argv`` to the end, each output line (stdout and stderr) to ``log``.

    A non-zero exit raises BuildError ``"{what} failed: <the last line that says error>"``
    with the output's tail. Past ``deadline_s`` (overall, not idle) the child gets SIGTERM and
    EngineError names the step. A child that does not stop within ``stop_wait_s`` of SIGTERM
    is killed.

    ``gentle`` (buildah builds): the child runs in a session of its own (a Ctrl-C at the
    terminal reaches only reprobuild, which decides), is stopped with SIGINT
    (:func:`stop_gently`), never SIGTERM, and writes its output to a file that this process
    follows: through a pipe, a child whose reader died (reprobuild SIGKILLed) would itself be
    killed by SIGPIPE at its next line, in the middle of a step.
    """
    if gentle:
        _run_gentle(argv, what, log, env=env, deadline_s=deadline_s, stop_wait_s=stop_wait_s)
        return
    tail: deque[str] = deque(maxlen=TAIL_LINES)
    try:
        proc = subprocess.Popen(
            argv,
            env=None if env is None else dict(env),
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
            errors="replace",
            preexec_fn=die_with_parent,
        )
    except OSError as exc:
        raise EngineError(f"cannot run {argv[0]}: {exc.strerror}") from None
    assert proc.stdout is not None
    expired = threading.Event()

    def expire() -> None:
        expired.set()
        kill(proc, signal.SIGTERM)

    timer = threading.Timer(deadline_s, expire) if deadline_s is not None else None
    if timer is not None:
        timer.daemon = True
        timer.start()
    try:
        while line := proc.stdout.readline(LINE_MAX):
            line = line.rstrip("\n")
            tail.append(line)
            log(line)
        code = wait_for(proc, None)
        assert code is not None
    finally:
        if timer is not None:
            timer.cancel()
        terminate(proc, stop_wait_s)  # interrupted: the tool must not go on (and tag) alone
        proc.stdout.close()
    _check(what, code, tail, deadline_s if expired.is_set() else None)


# How a line of reprobuild's own scripts in an image build starts (templates/build_sdists.py).
OWN_LINE = "reprobuild: "


def _check(what: str, code: int, tail: deque[str], expired_after: float | None) -> None:
    if expired_after is not None:
        raise EngineError(f"{what} did not finish within {expired_after:g} s; stopped")
    if code != 0:
        # a line of reprobuild's own in-build scripts (the wheel-build stage) says it best
        ours = next((ln for ln in reversed(tail) if ln.startswith(OWN_LINE)), None)
        last = (ours[len(OWN_LINE) :] if ours else None) or next(
            (ln for ln in reversed(tail) if "error" in ln.lower()), tail[-1] if tail else ""
        )
        raise BuildError(f"{what} failed: {last.strip()}", log_tail="\n".join(tail))


def _run_gentle(
    argv: list[str],
    what: str,
    log: Log,
    *,
    env: Mapping[str, str] | None,
    deadline_s: float | None,
    stop_wait_s: float,
) -> None:
    tail: deque[str] = deque(maxlen=TAIL_LINES)
    with tempfile.TemporaryFile() as out, open(f"/proc/self/fd/{out.fileno()}", "rb") as reader:
        try:
            proc = subprocess.Popen(
                argv,
                env=None if env is None else dict(env),
                stdin=subprocess.DEVNULL,
                stdout=out,
                stderr=subprocess.STDOUT,
                preexec_fn=_gentle_child,
                start_new_session=True,
            )
        except OSError as exc:
            raise EngineError(f"cannot run {argv[0]}: {exc.strerror}") from None
        started = time.monotonic()
        expired = False
        partial = b""

        def lines(final: bool) -> None:
            nonlocal partial
            while chunk := reader.read(LINE_MAX):
                partial += chunk
                *whole, partial = partial.split(b"\n")
                for raw in whole:
                    line = raw.decode(errors="replace")
                    tail.append(line)
                    log(line)
                if len(partial) >= LINE_MAX:  # no newline in sight: a line at most LINE_MAX
                    whole_line, partial = partial[:LINE_MAX], partial[LINE_MAX:]
                    tail.append(whole_line.decode(errors="replace"))
                    log(tail[-1])
            if final and partial:
                tail.append(partial.decode(errors="replace"))
                log(tail[-1])
                partial = b""

        try:
            while reap(proc) is None:
                lines(final=False)
                if deadline_s is not None and time.monotonic() - started > deadline_s:
                    expired = True
                    stop_gently(proc, stop_wait_s)
                    break
                wait_for(proc, POLL_S)
            lines(final=True)
        finally:
            if reap(proc) is None:  # interrupted: stopped where it can clean up after itself
                stop_gently(proc, stop_wait_s)
    code = reap(proc)
    assert code is not None
    _check(what, code, tail, deadline_s if expired else None)


def run_captured(
    argv: list[str],
    *,
    timeout: float,
    env: Mapping[str, str] | None = None,
    stop_wait_s: float = 60.0,
) -> subprocess.CompletedProcess[bytes]:
    """Run ``argv`` to the end with its stdout and stderr captured, gently (as
    :func:`run_streamed` ``gentle``): interrupted, or past ``timeout`` (then
    subprocess.TimeoutExpired), it is stopped with SIGINT and waited for."""
    proc = subprocess.Popen(
        argv,
        env=None if env is None else dict(env),
        stdin=subprocess.DEVNULL,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        preexec_fn=_gentle_child,
        start_new_session=True,
    )
    try:
        out, err = proc.communicate(timeout=timeout)
    finally:
        if reap(proc) is None:
            stop_gently(proc, stop_wait_s)
            with contextlib.suppress(OSError, ValueError, subprocess.SubprocessError):
                proc.communicate(timeout=1)
    return subprocess.CompletedProcess(argv, proc.returncode, out, err)
