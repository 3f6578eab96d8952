"""``reprobuild verify --local``: the runs go on this host, under the in-image runtime (the
``_startup`` hook active in every Python the command starts), with no engine at all. The
scripts are the engine tests' (tests/data/projects/verify), run with this interpreter."""

from __future__ import annotations

import json
import random
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from helpers import run_cli

PY = sys.executable


@pytest.fixture
def scripts(project: Callable[[str], Path]) -> Path:
    return project("verify")


def verify_local(scripts: Path, *args: str) -> tuple[int, str, str, dict[str, Any]]:
    report = scripts / "report.json"
    proc = run_cli("verify", "--local", "--report", str(report), *args, cwd=scripts, timeout=120)
    data: dict[str, Any] = json.loads(report.read_text()) if report.exists() else {}
    return proc.returncode, proc.stdout, proc.stderr, data


def test_deterministic_script_is_identical(scripts: Path) -> None:
    code, out, err, report = verify_local(
        scripts, "--seed", "5", "--output", "metrics.json", "--output", "ckpt/", "--", PY, "det.py"
    )
    assert code == 0, err
    assert out.splitlines()[0].startswith(
        f"identical: 2 runs of `{PY} det.py` on this host (--local): 6 stdout lines and 2 output"
    )
    # the hook was active in the program: an unseeded random.random() is the seeded one
    assert f"[1] epoch 1 loss {random.Random(5).random()!r}" in err.splitlines()
    assert report["result"] == "identical" and report["local"] is True
    first, second = report["runs"]
    assert first["outputs"] == second["outputs"]
    assert set(first["outputs"]) == {"metrics.json", "ckpt/weights.bin"}
    assert first["run_record"]["determinism"]["seed"] == 5
    assert first["run_record"]["determinism"]["seed_source"] == "REPRO_SEED"
    assert second["record_differences"] == []


def test_wall_clock_is_reported_at_its_line(scripts: Path) -> None:
    code, out, _err, report = verify_local(scripts, "--", PY, "clock.py")
    assert code == 1
    div = report["divergence"]
    assert (div["where"], div["line"], div["runs"]) == ("stdout", 3, [1, 2])
    assert div["a"].startswith("step 2 at ") and div["b"].startswith("step 2 at ")
    assert div["a"] != div["b"]
    assert div["numeric"]["abs_diff"] > 0 and div["numeric"]["ulps"] > 0
    lines = out.splitlines()
    assert lines[0] == "diverged: stdout line 3 differs between run 1 and run 2"
    assert lines[1] == f"  run 1: {div['a']!r}" and lines[2] == f"  run 2: {div['b']!r}"


def test_the_runtime_off_is_the_control(scripts: Path) -> None:
    code, _out, _err, report = verify_local(scripts, "--mode", "off", "--", PY, "det.py")
    assert code == 1
    assert report["divergence"]["line"] == 1  # `random` is not seeded any more
    assert report["runs"][0]["run_record"]["determinism"]["mode"] == "off"


def test_early_stop(scripts: Path) -> None:
    start = time.monotonic()
    code, out, err, report = verify_local(scripts, "--", PY, "early.py")
    elapsed = time.monotonic() - start
    assert code == 1, (out, err, report)
    assert report["divergence"]["line"] == 1
    assert report["stopped_early"] is True
    assert [r["killed"] for r in report["runs"]] == [True, True]
    assert elapsed < 20, f"took {elapsed:.1f} s: the runs were not stopped at the divergence"


def test_failing_command(scripts: Path) -> None:
    code, out, err, report = verify_local(scripts, "--", PY, "fail.py")
    assert (code, out) == (1, "")
    lines = err.splitlines()
    assert lines[-3] == "FileNotFoundError: /data/train.csv"
    assert lines[-2].startswith("error: run ") and lines[-2].endswith(
        f"of 2: `{PY} fail.py` exited with status 3"
    )
    assert lines[-1].startswith("hint: the last lines of its stderr are above; report: ")
    assert report["result"] == "failed"
    assert report["failure"]["exit_code"] == 3
    assert report["failure"]["stderr_tail"][-1] == "FileNotFoundError: /data/train.csv"


def test_output_no_run_wrote(scripts: Path) -> None:
    code, _out, err, report = verify_local(scripts, "--output", "nothing.bin", "--", PY, "det.py")
    assert code == 1
    assert "error: no run wrote $REPRO_OUTPUT_DIR/nothing.bin (named by --output)" in err
    assert report["result"] == "failed"


def test_keep_leaves_the_runs_directories(scripts: Path, tmp_path: Path) -> None:
    keep = tmp_path / "kept"
    code, _out, err, _ = verify_local(
        scripts, "--keep", str(keep), "--output", "ckpt.bin", "--", PY, "ckpt.py"
    )
    assert code == 1, err
    first = (keep / "run-1" / "out" / "ckpt.bin").read_bytes()
    second = (keep / "run-2" / "out" / "ckpt.bin").read_bytes()
    assert first[:6] == second[:6] == b"HEADER" and first != second
    assert list((keep / "run-1" / "records").glob("run-*.json"))


def test_what_a_run_leaves_behind_is_stopped_with_it(scripts: Path) -> None:
    """A background child holding stdout open would keep a run going forever; in a container
    it dies with the container, and --local does the same."""
    program = (
        "import subprocess, sys\n"
        "subprocess.Popen([sys.executable, '-c', 'import time; time.sleep(120)'])\n"
        "print('started a helper and left')\n"
    )
    start = time.monotonic()
    code, _out, err, report = verify_local(scripts, "--", PY, "-c", program)
    assert code == 0, err
    assert report["lines_compared"] == 1
    assert time.monotonic() - start < 20


def test_runs_that_print_nothing_to_stdout_are_not_called_identical(scripts: Path) -> None:
    """GPJax's collapsed_vi example trains 500 steps behind a tqdm bar (stderr) and prints
    nothing: verify called it "identical: 2 runs ...: 0 stdout lines, bit for bit", proving
    nothing. Now it fails, saying why, and an --output still gives it something to compare."""
    quiet = scripts / "quiet.py"
    quiet.write_text(
        "import random, sys\n"
        "print(f'loss {random.random()}', file=sys.stderr)\n"
        "open('/dev/null', 'w').write('x')\n"
    )
    code, out, err, report = verify_local(scripts, "--", PY, "quiet.py")
    assert code == 1, out + err
    errors = [line for line in err.splitlines() if line.startswith("error: ")]
    assert errors == [
        f"error: nothing to compare: no run of `{PY} quiet.py` printed a line to stdout "
        "(stderr is not compared)"
    ], err
    assert "hint: print what the training computes (its loss, its metrics) to stdout" in err
    assert report["result"] == "failed" and report["lines_compared"] == 0
    assert report["failure"]["message"].startswith("nothing to compare: ")
