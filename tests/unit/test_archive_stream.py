"""buildah.archive_stream: the archive buildah pushes, read while it is written. A stand-in
``buildah`` on PATH writes to the pipe it is given, fails half-way or stalls."""

from __future__ import annotations

import os
import stat
import time
from pathlib import Path

import pytest

from reprobuild.backends import buildah
from reprobuild.errors import EngineError

FAKE = """#!/bin/sh
for a in "$@"; do case $a in docker-archive:*) dest=${a#docker-archive:};; esac; done
out=${dest%%:*}
echo "$@" > "$FAKE_ARGS"
case "$FAKE_MODE" in
  ok) head -c 3000000 /dev/zero | tr '\\0' 'x' > "$out" ;;
  fail) printf 'partial' > "$out"; echo "Error: writing blob: no space left" >&2; exit 125 ;;
  stall) printf 'partial' > "$out"; exec sleep 60 ;;
esac
"""


@pytest.fixture
def fake(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    tool = tmp_path / "bin" / "buildah"
    tool.parent.mkdir()
    tool.write_text(FAKE)
    tool.chmod(tool.stat().st_mode | stat.S_IXUSR)
    monkeypatch.setenv("PATH", f"{tool.parent}{os.pathsep}{os.environ['PATH']}")
    monkeypatch.setenv("FAKE_ARGS", str(tmp_path / "args"))
    return tmp_path / "args"


def test_the_reader_gets_every_byte_buildah_writes_and_the_name(
    fake: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("FAKE_MODE", "ok")
    with buildah.archive_stream("ab" * 32, "team/app:v1", chunk=65536) as chunks:
        got = list(chunks)
    assert sum(map(len, got)) == 3_000_000 and set(b"".join(got)) == {ord("x")}
    assert max(map(len, got)) <= 65536  # chunks, not the whole archive in memory
    args = fake.read_text().split()
    assert args[:3] == ["push", "--quiet", "ab" * 32]
    assert args[3].startswith("docker-archive:/dev/fd/") and args[3].endswith(":team/app:v1")


def test_a_push_that_fails_half_way_raises_buildahs_message(
    fake: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("FAKE_MODE", "fail")
    with (
        pytest.raises(EngineError, match="no space left"),
        buildah.archive_stream("ab" * 32, "team/app:v1") as chunks,
    ):
        assert b"".join(chunks) == b"partial"  # the load reads a cut-off archive...


def test_buildahs_failure_explains_the_loads(fake: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The engine refuses the cut-off archive first; the error says why it was cut off."""
    monkeypatch.setenv("FAKE_MODE", "fail")
    with (
        pytest.raises(EngineError, match=r"buildah push .* failed: .*no space left") as caught,
        buildah.archive_stream("ab" * 32, "team/app:v1") as chunks,
    ):
        b"".join(chunks)
        raise EngineError("cannot load the image archive into the engine: unexpected EOF")
    assert "unexpected EOF" not in str(caught.value)


def test_a_load_that_fails_stops_buildah(fake: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("FAKE_MODE", "stall")
    start = time.monotonic()
    with (
        pytest.raises(EngineError, match="engine is gone"),
        buildah.archive_stream("ab" * 32, "team/app:v1") as chunks,
    ):
        next(chunks)
        raise EngineError("engine is gone")
    assert time.monotonic() - start < 15  # buildah (sleeping 60 s) was stopped


def test_a_stalled_push_ends_at_its_deadline(fake: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("FAKE_MODE", "stall")
    start = time.monotonic()
    with (
        pytest.raises(EngineError, match="stopped after 1 s"),
        buildah.archive_stream("ab" * 32, "team/app:v1", deadline_s=1) as chunks,
    ):
        assert b"".join(chunks) == b"partial"
    assert time.monotonic() - start < 15


def test_no_buildah_says_how_to_install_it(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setenv("PATH", str(tmp_path))
    with (
        pytest.raises(EngineError, match="`buildah` is not installed") as caught,
        buildah.archive_stream("ab" * 32, "x:y"),
    ):
        pass
    assert "apt-get install buildah" in str(caught.value.hint)
