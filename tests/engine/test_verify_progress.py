"""Issue 14's proof on real containers: `reprobuild verify` on training scripts as people write
them (tests/data/projects/determinism/scripts), run in the torch + Keras image.

- Keras `fit(verbose=1)`, a tqdm loop, a script that logs epoch times and timestamps: verify
  says `identical` with no pattern from the user, and the report lists what it left out;
- the same under `--mode off` (the control): diverged, naming the epoch and the value;
- two runs whose only difference is one loss digit inside a Keras bar: diverged, at that
  value; `--no-default-ignore` compares the bytes as written (so the timings differ);
- `--ignore REGEX` leaves out what the built-in rules do not know.
"""

from __future__ import annotations

import json
import uuid
from pathlib import Path
from typing import Any

import pytest

from helpers import run_cli

pytestmark = [pytest.mark.engine, pytest.mark.registry, pytest.mark.heavy]
QUIET = ["-e", "REPRO_QUIET=1", "-e", "TF_CPP_MIN_LOG_LEVEL=3"]
SCRIPTS = {
    "keras_progress.py": ({"duration", "time-per-step"}, {"accuracy", "loss"}),
    "torch_tqdm.py": ({"elapsed<left", "rate"}, {"loss"}),
    "torch_timed.py": ({"timestamp", "duration", "rate"}, {"loss"}),
}


def verify(tmp_path: Path, *args: str) -> tuple[int, str, str, dict[str, Any]]:
    report = tmp_path / f"report-{uuid.uuid4().hex[:8]}.json"
    split = args.index("--")
    argv = [*args[:split], *QUIET, "--report", str(report), *args[split:]]
    proc = run_cli("verify", *argv, cwd=tmp_path, timeout=900)
    data: dict[str, Any] = json.loads(report.read_text()) if report.exists() else {}
    return proc.returncode, proc.stdout, proc.stderr, data


@pytest.mark.parametrize("script", sorted(SCRIPTS))
def test_progress_and_timings_are_identical_under_the_runtime(
    determinism_image: str, tmp_path: Path, script: str
) -> None:
    rules, _ = SCRIPTS[script]
    code, out, err, report = verify(
        tmp_path, determinism_image, "--", "python", f"scripts/{script}"
    )
    assert code == 0, out + err[-3000:]
    assert report["result"] == "identical"
    assert report["stdout_compare"] == {
        "fold_redraws": True,
        "builtin_rules": True,
        "patterns": [],
    }
    ignored = report["runs"][0]["ignored"]
    counted = {r["rule"]: r for r in ignored["rules"]}
    assert rules <= set(counted), ignored
    for rule in rules:
        example = counted[rule]["example"]
        assert counted[rule]["fields"] >= 1 and example["field"] in example["text"]
    if script != "torch_timed.py":  # the two progress bars redraw; the log lines do not
        assert ignored["redraws"] >= 1 and ignored["redrawn_lines"] >= 3
    assert "not compared (run 1):" in out and "wall-clock field(s)" in out
    # The bytes differed: only what a reader sees was the same.
    assert len({r["stdout_sha256"] for r in report["runs"]}) == 2


@pytest.mark.parametrize("script", sorted(SCRIPTS))
def test_the_control_still_diverges_at_the_epoch_and_value(
    determinism_image: str, tmp_path: Path, script: str
) -> None:
    _, values = SCRIPTS[script]
    code, out, err, report = verify(
        tmp_path, determinism_image, "--mode", "off", "--", "python", f"scripts/{script}"
    )
    assert code == 1, out + err[-3000:]
    div = report["divergence"]
    assert report["result"] == "diverged" and div["where"] == "stdout"
    assert div["epoch"] == "epoch 1", div
    assert div["value"] in values, div
    assert div["numeric"]["a"] != div["numeric"]["b"]
    assert f"(epoch 1, {div['value']})" in out


def test_one_loss_digit_in_a_keras_bar_is_a_divergence(
    determinism_image: str, tmp_path: Path
) -> None:
    lock = tmp_path / "lockdir"
    lock.mkdir()
    (lock / "lock").write_text("")
    code, out, err, report = verify(
        tmp_path,
        determinism_image,
        "--data",
        f"{lock}:/data",
        "--",
        "python",
        "scripts/keras_bar_digit.py",
    )
    assert code == 1, out + err[-3000:]
    div = report["divergence"]
    assert (div["line"], div["epoch"], div["value"]) == (2, "epoch 1", "loss"), div
    assert {div["numeric"]["a"], div["numeric"]["b"]} == {"0.4123", "0.4124"}
    assert "numbers: loss 0.412" in out
    # The timings on that line were not what made it differ.
    assert "<duration>" in div["a_compared"] and "<time-per-step>" in div["a_compared"]


def test_without_the_defaults_the_bytes_are_compared(
    determinism_image: str, tmp_path: Path
) -> None:
    code, out, err, report = verify(
        tmp_path, determinism_image, "--no-default-ignore", "--", "python", "scripts/torch_timed.py"
    )
    assert code == 1, out + err[-3000:]
    assert report["stdout_compare"]["fold_redraws"] is False
    assert report["runs"][0]["ignored"]["fields"] == 0
    # The user's own patterns, on top of no defaults, make the same run identical.
    code, out, err, report = verify(
        tmp_path,
        determinism_image,
        "--no-default-ignore",
        "--ignore",
        r"^\d{4}-\S+ \S+",
        "--ignore",
        r"took (?P<value>[\d.]+ s \([\d.]+) samples/s",
        "--",
        "python",
        "scripts/torch_timed.py",
    )
    assert code == 0, out + err[-3000:]
    rules = report["runs"][0]["ignored"]["rules"]
    assert [(r["rule"], r["fields"]) for r in rules] == [("ignore-1", 3), ("ignore-2", 3)]
