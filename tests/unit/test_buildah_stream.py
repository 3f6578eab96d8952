"""buildah.py's process runner: an overall deadline for network steps, bounded output lines,
and the log tail on failure (run with /bin/sh standing in for buildah)."""

from __future__ import annotations

import time

import pytest

from reprobuild import buildah
from reprobuild.errors import BuildError, EngineError


def test_deadline_stops_a_step_that_hangs() -> None:
    start = time.monotonic()
    with pytest.raises(EngineError, match=r"^pulling x did not finish within 0\.5 s; stopped$"):
        buildah._stream(["sh", "-c", "echo started; exec sleep 30"], "pulling x", print, 0.5)
    assert time.monotonic() - start < 10


def test_long_output_line_is_read_in_pieces() -> None:
    seen: list[int] = []
    script = "head -c 1000000 /dev/zero | tr '\\0' a; echo; echo done"
    buildah._stream(["sh", "-c", script], "build", lambda line: seen.append(len(line)))
    assert max(seen) <= buildah._LINE_MAX
    assert sum(seen) == 1000000 + len("done")


def test_failure_names_the_error_line() -> None:
    with pytest.raises(BuildError, match="build failed: Error: no such step") as info:
        buildah._stream(
            ["sh", "-c", "echo one; echo 'Error: no such step'; exit 3"], "build", print
        )
    assert "one" in (info.value.log_tail or "")
