"""The base probe's cache (``reprobuild.imaging.baseprobe.base_probe``): keyed by the base's digest
and by the probe's own source. A cache keyed by digest alone kept answering for a probe that
could no longer run on any base, so every warm machine passed while every fresh one failed."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest

from reprobuild.bases.refs import parse_pinned
from reprobuild.errors import ConfigError
from reprobuild.imaging.baseprobe import base_probe
from reprobuild.imaging.plan import plan_build

DIGEST = "sha256:" + "ab" * 32


class RunsTheProbeHere:
    """An engine whose ``run`` executes the command with this interpreter (``python3 -c``)."""

    def __init__(self) -> None:
        self.runs = 0

    def run(self, image: str, command: list[str], *, entrypoint: list[str], timeout: float) -> Any:
        self.runs += 1
        done = subprocess.run([sys.executable, *entrypoint[1:]], capture_output=True, check=False)
        return SimpleNamespace(exit_code=done.returncode, stdout=done.stdout, stderr=done.stderr)


def _base() -> Any:
    return SimpleNamespace(digest=DIGEST, by_digest=lambda: f"team/base@{DIGEST}")


def test_the_probe_runs_once_per_digest_and_an_old_key_is_not_read(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("REPROBUILD_CACHE_DIR", str(tmp_path))
    stale = tmp_path / "bases" / f"v3-{DIGEST.replace(':', '-')}.json"  # the old key
    stale.parent.mkdir(parents=True)
    stale.write_text(json.dumps({"stale": True}))
    engine = RunsTheProbeHere()
    first = base_probe(engine, _base())  # type: ignore[arg-type]
    assert engine.runs == 1 and "distributions" in first and "stale" not in first
    assert base_probe(engine, _base()) == first  # type: ignore[arg-type]
    assert engine.runs == 1
    (entry,) = set((tmp_path / "bases").glob("*.json")) - {stale}
    assert entry.name.startswith(stale.stem + "-")


def test_plan_checks_select_python_against_a_base_probed_here_before(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """issue 51: render and image check the chosen Python against the base before fetching.
    A base given by digest is known to render once it was probed here (init --base does)."""
    monkeypatch.setenv("REPROBUILD_CACHE_DIR", str(tmp_path / "cache"))
    project = tmp_path / "tiny"
    shutil.copytree(Path(__file__).resolve().parent.parent / "data" / "projects" / "tiny", project)
    ref = f"127.0.0.1:5000/team/base@{DIGEST}"
    here = ".".join(map(str, sys.version_info[:2]))
    other = "3.12" if here != "3.12" else "3.11"
    config = project / "reprobuild.yaml"
    config.write_text(config.read_text() + f"select:\n  python: '{other}'\n")
    plan_build(project, base=ref)  # not probed yet: nothing known, nothing refused

    base_probe(RunsTheProbeHere(), parse_pinned(ref))  # type: ignore[arg-type]
    with pytest.raises(ConfigError, match=rf"select.python {other} is not the base's CPython "
                       rf"{here} \(127.0.0.1:5000/team/base@sha256:abab"):  # fmt: skip
        plan_build(project, base=ref)
