"""``reprobuild verify --local --resume-at K`` (issue 12) on the torch resume script: a
straight run, one stopped by SIGTERM after epoch K, resumed with REPRO_RESUME=1 from its
output directory; identical when the script restores the RNG state, diverged when not."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

from helpers import DATA, run_cli

pytestmark = pytest.mark.heavy
SCRIPT = DATA / "projects" / "determinism" / "scripts" / "torch_resume.py"


def resume_at(tmp_path: Path, *extra: str) -> tuple[int, str, dict[str, object]]:
    report = tmp_path / "report.json"
    proc = run_cli(
        "verify", "--local", "-q", "--resume-at", "2", "--report", str(report),
        "--", sys.executable, str(SCRIPT), "--epochs", "3", "--slow", "2", *extra,
        cwd=tmp_path,
        timeout=600,
    )  # fmt: skip
    return proc.returncode, proc.stdout + proc.stderr, json.loads(report.read_text())


def test_resume_at_is_identical_when_the_rng_state_is_restored(tmp_path: Path) -> None:
    code, out, report = resume_at(tmp_path)
    assert code == 0, out
    assert report["result"] == "identical", report
    legs = {leg["name"]: leg for leg in report["legs"]}  # type: ignore[attr-defined]
    assert legs["stopped"]["stopped_at"] == "epoch 2" and legs["stopped"]["exit_code"] == 0


def test_resume_at_diverges_without_the_rng_state(tmp_path: Path) -> None:
    code, out, report = resume_at(tmp_path, "--no-rng")
    assert code == 1, out
    assert report["result"] == "diverged"
    assert "epoch 3 val_loss" in str(report["summary"])
