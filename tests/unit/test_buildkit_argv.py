"""What the Docker CLI is asked for a BuildKit build (issue 29). A build from an epoch adds
exactly the engine's own builder, the clamping image exporter and SOURCE_DATE_EPOCH as a build
argument; a build without one keeps the argv it always had (what Engine 20.10 and an engine
with the graph-driver store get). The real builds are tests/engine/test_buildkit.py; this fake
``docker`` (the only client reprobuild finds) only records its arguments, in addition."""

from __future__ import annotations

import json
from collections.abc import Iterable
from pathlib import Path

import pytest

from reprobuild.backends import engine as engine_module
from reprobuild.backends.engine import Engine
from reprobuild.errors import EngineError

FAKE = """#!/bin/sh
# answers `docker buildx version` and `docker version` (a 26.1 client: not a legacy one), and
# for a build records its arguments and writes the --iidfile and the archive it was given
case "$1 $2" in
  "buildx version") echo "github.com/docker/buildx 0.13.1+ds1 0.13.1+ds1-3"; exit 0 ;;
  "version --format") echo '"26.1.5+dfsg1"'; exit 0 ;;
esac
python3 -c 'import json, sys; print(json.dumps(sys.argv[1:]))' "$@" >>"$ARGV_LOG"
while [ $# -gt 0 ]; do
  if [ "$1" = "--iidfile" ]; then echo "sha256:feed" >"$2"; fi
  if [ "$1" = "--output" ]; then dest=${2#*dest=}; echo archive >"${dest%%,*}"; fi
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


class LoadingEngine(Engine):
    """Loads what the fake wrote into a list, not into an engine."""

    def __init__(self) -> None:
        super().__init__()
        self.loaded: list[bytes] = []

    def load(self, archive: Path | Iterable[bytes]) -> None:
        assert isinstance(archive, Path)
        self.loaded.append(archive.read_bytes())

    def image_id(self, ref: str) -> str | None:
        return "sha256:loaded" if self.loaded and ref == "x:1" else None


def test_a_build_from_an_epoch_writes_a_clamped_archive_and_loads_it(
    fake_docker: Path, tmp_path: Path
) -> None:
    engine = LoadingEngine()
    assert engine.build(tmp_path, "x:1", builder="buildkit", no_cache=True, epoch=1700) == (
        "sha256:loaded"
    )
    argv = _without_paths(_argv(fake_docker), tmp_path)
    output = argv[argv.index("--output") + 1]
    archive = output.split(",")[1].removeprefix("dest=")
    assert argv == [
        "buildx", "build", "--builder", "default", "--provenance=false",
        "--build-arg", "SOURCE_DATE_EPOCH=1700",
        "--output", f"type=docker,dest={archive},rewrite-timestamp=true,compression=uncompressed",
        "--progress=plain", "-t", "x:1", "--no-cache",
    ]  # fmt: skip
    assert engine.loaded == [b"archive\n"]
    assert not Path(archive).exists()  # the temporary folder is gone


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
