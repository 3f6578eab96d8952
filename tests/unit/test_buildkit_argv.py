"""What the Docker CLI is asked for a BuildKit build (issue 29). A build from an epoch adds
exactly the engine's own builder, the clamping image exporter and SOURCE_DATE_EPOCH as a build
argument; a build without one keeps the argv it always had (what Engine 20.10 and an engine
with the graph-driver store get). The real builds are tests/engine/test_buildkit.py; this fake
``docker`` (the only client reprobuild finds) only records its arguments, in addition."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from reprobuild.backends import engine as engine_module
from reprobuild.backends.engine import Engine
from reprobuild.errors import EngineError

FAKE = """#!/bin/sh
# answers `docker buildx version` and `docker version` (a 26.1 client: not a legacy one), and
# for a build records its arguments and writes the --iidfile it was given
case "$1 $2" in
  "buildx version") echo "github.com/docker/buildx 0.13.1+ds1 0.13.1+ds1-3"; exit 0 ;;
  "version --format") echo '"26.1.5+dfsg1"'; exit 0 ;;
esac
python3 -c 'import json, sys; print(json.dumps(sys.argv[1:]))' "$@" >>"$ARGV_LOG"
while [ $# -gt 0 ]; do
  if [ "$1" = "--iidfile" ]; then echo "sha256:feed" >"$2"; fi
  shift
done
"""


@pytest.fixture
def fake_docker(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    folder = tmp_path / "bin"
    folder.mkdir()
    tool = folder / "docker"
    tool.write_text(FAKE)
    tool.chmod(0o755)
    log = tmp_path / "argv.jsonl"
    monkeypatch.setenv("PATH", f"{folder}:/usr/bin:/bin")
    # The only client: this machine's own /usr/bin/docker (a 20.10 one here) is not asked.
    monkeypatch.setattr(engine_module, "_docker_clients", lambda: iter([str(tool)]))
    monkeypatch.setenv("ARGV_LOG", str(log))
    return log


def _argv(log: Path) -> list[str]:
    lines = log.read_text().splitlines()
    assert len(lines) == 1, lines
    words: list[str] = json.loads(lines[0])
    return words


def _without_paths(argv: list[str], context: Path) -> list[str]:
    at = argv.index("--iidfile")
    assert argv[-1] == str(context)
    return argv[:at] + argv[at + 2 : -1]


def test_a_build_from_an_epoch_clamps_times_with_the_engines_buildkit(
    fake_docker: Path, tmp_path: Path
) -> None:
    assert Engine().build(tmp_path, "x:1", builder="buildkit", no_cache=True, epoch=1700000000)
    assert _without_paths(_argv(fake_docker), tmp_path) == [
        "buildx", "build", "--builder", "default", "--provenance=false",
        "--output", "type=image,rewrite-timestamp=true",
        "--build-arg", "SOURCE_DATE_EPOCH=1700000000",
        "--progress=plain", "-t", "x:1", "--no-cache",
    ]  # fmt: skip


@pytest.mark.parametrize(
    ("builder", "expected"),
    [
        ("buildkit", ["buildx", "build", "--builder", "default", "--load", "--provenance=false"]),
        ("buildx", ["buildx", "build", "--load", "--provenance=false"]),
    ],
)
def test_a_build_without_an_epoch_keeps_its_argv(
    fake_docker: Path, tmp_path: Path, builder: str, expected: list[str]
) -> None:
    Engine().build(tmp_path, "x:1", builder=builder, network=False)  # type: ignore[arg-type]
    assert _without_paths(_argv(fake_docker), tmp_path) == [
        *expected, "--progress=plain", "-t", "x:1", "--network=none",
    ]  # fmt: skip


@pytest.mark.parametrize("builder", ["buildx", "classic"])
def test_only_the_engines_buildkit_builds_from_an_epoch(
    fake_docker: Path, tmp_path: Path, builder: str
) -> None:
    with pytest.raises(EngineError, match=f"needs builder buildkit, not {builder}"):
        Engine().build(tmp_path, "x:1", builder=builder, epoch=0)  # type: ignore[arg-type]
    assert not fake_docker.exists()
