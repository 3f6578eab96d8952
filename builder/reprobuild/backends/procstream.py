"""Run a build tool (the Docker CLI, buildah) as a child process and stream its output.

One job, shared by engine.py's CLI builds and buildah.py: the child's lines go to a log
callback and the last few are kept for the error; the child dies with reprobuild (even when
reprobuild is SIGKILLed); an interrupted run (Ctrl-C, SIGTERM, an exception in the callback)
stops the child and waits for it, so it cleans up its own working containers and never goes on
to tag alone; an optional overall deadline bounds network steps; output lines are read at most
``LINE_MAX`` characters at a time, so a tool that prints without newlines cannot grow memory.
"""

from __future__ import annotations

import signal
import subprocess
import threading
from collections import deque
from collections.abc import Callable, Mapping

from reprobuild.errors import BuildError, EngineError

Log = Callable[[str], None]
TAIL_LINES = 25
LINE_MAX = 64 * 1024


def die_with_parent() -> None:
    """In a build client's child process: get SIGTERM when reprobuild dies (even by SIGKILL),
    so a killed run's build does not finish and tag on its own (Linux; elsewhere a no-op)."""
    try:
        import ctypes

        libc = ctypes.CDLL(None, use_errno=True)
        libc.prctl(1, signal.SIGTERM)  # PR_SET_PDEATHSIG
    except (OSError, AttributeError):
        pass


def run_streamed(
    argv: list[str],
    what: str,
    log: Log,
    *,
    env: Mapping[str, str] | None = None,
    deadline_s: float | None = None,
    stop_wait_s: float = 60.0,
) -> None:
    """Run ``argv`` to the end, each output line (stdout and stderr) to ``log``.

    A non-zero exit raises BuildError ``"{what} failed: <the last line that says error>"``
    with the output's tail. Past ``deadline_s`` (overall, not idle) the child gets SIGTERM and
    EngineError names the step. A child that does not stop within ``stop_wait_s`` of SIGTERM
    is killed.
    """
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
        proc.terminate()

    timer = threading.Timer(deadline_s, expire) if deadline_s is not None else None
    if timer is not None:
        timer.daemon = True
        timer.start()
    try:
        while line := proc.stdout.readline(LINE_MAX):
            line = line.rstrip("\n")
            tail.append(line)
            log(line)
        code = proc.wait()
    finally:
        if timer is not None:
            timer.cancel()
        if proc.poll() is None:  # interrupted: the tool must not go on (and tag) alone
            proc.terminate()
            try:
                proc.wait(timeout=stop_wait_s)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()
        proc.stdout.close()
    if expired.is_set():
        raise EngineError(f"{what} did not finish within {deadline_s:g} s; stopped")
    if code != 0:
        last = next(
            (ln for ln in reversed(tail) if "error" in ln.lower()), tail[-1] if tail else ""
        )
        raise BuildError(f"{what} failed: {last.strip()}", log_tail="\n".join(tail))
