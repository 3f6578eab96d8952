"""procstream.run_streamed, the runner of the Docker CLI's and buildah's builds: an overall
deadline for network steps, bounded output lines, the log tail on failure, and the child
stopped when the caller is interrupted (/bin/sh stands in for the build tool)."""

from __future__ import annotations

import os
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
