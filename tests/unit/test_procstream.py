"""procstream.run_streamed, the runner of the Docker CLI's and buildah's builds: an overall
deadline for network steps, bounded output lines, the log tail on failure, and the child
stopped when the caller is interrupted (/bin/sh stands in for the build tool)."""

from __future__ import annotations

import os
import sys
import time
from pathlib import Path

import pytest

from reprobuild.backends import procstream
from reprobuild.errors import BuildError, EngineError


def test_deadline_stops_a_step_that_hangs() -> None:
    start = time.monotonic()
    with pytest.raises(EngineError, match=r"^pulling x did not finish within 0\.5 s; stopped$"):
        procstream.run_streamed(
            ["sh", "-c", "echo started; exec sleep 30"], "pulling x", print, deadline_s=0.5
        )
    assert time.monotonic() - start < 10


def test_long_output_line_is_read_in_pieces() -> None:
    seen: list[int] = []
    script = "head -c 1000000 /dev/zero | tr '\\0' a; echo; echo done"
    procstream.run_streamed(["sh", "-c", script], "build", lambda line: seen.append(len(line)))
    assert max(seen) <= procstream.LINE_MAX
    assert sum(seen) == 1000000 + len("done")


def test_failure_names_the_error_line() -> None:
    with pytest.raises(BuildError, match="build failed: Error: no such step") as info:
        procstream.run_streamed(
            ["sh", "-c", "echo one; echo 'Error: no such step'; exit 3"], "build", print
        )
    assert "one" in (info.value.log_tail or "")


def test_interrupted_caller_stops_the_child(tmp_path: Path) -> None:
    pidfile = tmp_path / "pid"

    def stop(line: str) -> None:
        raise KeyboardInterrupt

    with pytest.raises(KeyboardInterrupt):
        procstream.run_streamed(
            ["sh", "-c", f"echo $$ > {pidfile}; echo go; exec sleep 30"], "build", stop
        )
    pid = int(pidfile.read_text())
    with pytest.raises(ProcessLookupError):
        os.kill(pid, 0)


def test_missing_tool_is_one_error() -> None:
    with pytest.raises(EngineError, match="cannot run /nonexistent/buildah"):
        procstream.run_streamed(["/nonexistent/buildah"], "build", print)


# ---------------------------------------------------------------- gentle (buildah's builds)
# buildah heeds SIGINT only while it has asked for it (a RUN step), and then removes its
# working container itself; a Python child that installs a handler stands in for that.
HANDLER = """
import signal, sys, time, pathlib
print("go", flush=True)
def stop(*_):
    pathlib.Path(sys.argv[1]).write_text("cleaned up")
    sys.exit(3)
if sys.argv[2] == "handle":
    signal.signal(signal.SIGINT, stop)
time.sleep(30)
"""


def test_gentle_interrupt_lets_the_child_clean_up(tmp_path: Path) -> None:
    marker = tmp_path / "marker"

    def stop(line: str) -> None:
        raise KeyboardInterrupt

    start = time.monotonic()
    with pytest.raises(KeyboardInterrupt):
        procstream.run_streamed(
            [sys.executable, "-c", HANDLER, str(marker), "handle"], "build", stop, gentle=True
        )
    assert marker.read_text() == "cleaned up"
    assert time.monotonic() - start < 10


def test_gentle_child_ignoring_sigint_is_killed_after_the_wait(tmp_path: Path) -> None:
    """A child that never asks for SIGINT (started with it ignored) is killed after
    stop_wait_s; the caller's interrupt still goes on."""
    marker = tmp_path / "marker"

    def stop(line: str) -> None:
        raise KeyboardInterrupt

    start = time.monotonic()
    with pytest.raises(KeyboardInterrupt):
        procstream.run_streamed(
            [sys.executable, "-c", HANDLER, str(marker), "ignore"],
            "build",
            stop,
            gentle=True,
            stop_wait_s=1.0,
        )
    assert not marker.exists()
    assert time.monotonic() - start < 10


def test_gentle_output_and_failure_read_like_the_pipe() -> None:
    seen: list[int] = []
    script = "head -c 1000000 /dev/zero | tr '\\0' a; echo; echo done"
    procstream.run_streamed(
        ["sh", "-c", script], "build", lambda line: seen.append(len(line)), gentle=True
    )
    assert max(seen) <= procstream.LINE_MAX
    assert sum(seen) == 1000000 + len("done")
    with pytest.raises(BuildError, match="build failed: Error: no such step") as info:
        procstream.run_streamed(
            ["sh", "-c", "echo one; echo 'Error: no such step'; exit 3"],
            "build",
            print,
            gentle=True,
        )
    assert "one" in (info.value.log_tail or "")


def test_gentle_child_runs_in_a_session_of_its_own(tmp_path: Path) -> None:
    """A Ctrl-C at the terminal goes to the foreground process group: not to the child,
    which reprobuild stops itself where it can clean up."""
    seen: list[str] = []
    procstream.run_streamed(["sh", "-c", "ps -o sid= -p $$"], "build", seen.append, gentle=True)
    assert int(seen[0]) != os.getsid(0)
