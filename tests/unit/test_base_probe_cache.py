"""The base probe's cache (``reprobuild.imaging.image.base_probe``): keyed by the base's digest
and by the probe's own source. A cache keyed by digest alone kept answering for a probe that
could no longer run on any base, so every warm machine passed while every fresh one failed."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest

from reprobuild.imaging.image import base_probe

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
