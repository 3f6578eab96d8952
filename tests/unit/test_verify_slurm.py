"""``reprobuild verify --slurm SCRIPT`` against a stand-in ``sbatch`` that plays back what a
job writes (stdout, each node's records, outputs): the verdict, the first divergence named
(stdout line, a node's record field, an output file), a job that fails, and the options that
do not go with --slurm. The real sbatch and jobs: tests/engine/test_slurm.py."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from reprobuild.cli import main

SBATCH = """#!/bin/sh
# a stand-in for sbatch --parsable --wait: one "job" per call, numbered in $FAKE_COUNT
n=$(($(cat "$FAKE_COUNT" 2>/dev/null || echo 0) + 1)); echo "$n" > "$FAKE_COUNT"
for word in "$@"; do
  case $word in --output=*) out=${word#--output=} ;; --error=*) err=${word#--error=} ;; esac
done
loss=0.25
[ "$n" = "$FAKE_DIVERGE_AT" ] && [ "$FAKE_WHAT" = stdout ] && loss=0.2500001
printf 'epoch 0 loss 0.5 (3.2s)\\nfinal_loss %s\\n' "$loss" > "$out"
echo "reprobuild: job $n on c1 c2" > "$err"
for i in 0 1; do
  mkdir -p "$REPRO_JOB_DIR/runs/node-$i" "$REPRO_JOB_DIR/out/node-$i"
  seed=$i; [ "$n" = "$FAKE_DIVERGE_AT" ] && [ "$FAKE_WHAT" = record ] && seed=9
  printf '{"kind": "reprobuild.run", "run_id": "r%s","seed": %s,"argv": ["--rdzv-id=rb-%s"]}\\n' \\
    "$n$i" "$seed" "$n" \\
    > "$REPRO_JOB_DIR/runs/node-$i/run-2026-r$n$i.json"
  w=abc; [ "$n" = "$FAKE_DIVERGE_AT" ] && [ "$FAKE_WHAT" = output ] && w=abd
  echo "$w" > "$REPRO_JOB_DIR/out/node-$i/weights.bin"
done
echo "$n;cluster"
[ "$n" = "$FAKE_FAIL_AT" ] && exit 1
exit 0
"""


@pytest.fixture
def sbatch(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    (bin_dir / "sbatch").write_text(SBATCH)
    (bin_dir / "sbatch").chmod(0o755)
    monkeypatch.setenv("PATH", f"{bin_dir}:{os.environ['PATH']}")
    monkeypatch.setenv("FAKE_COUNT", str(tmp_path / "count"))
    monkeypatch.chdir(tmp_path)
    script = tmp_path / "job.sbatch"
    script.write_text("#!/bin/bash\n")
    return script


def test_two_identical_jobs(sbatch: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["verify", "--slurm", str(sbatch), "--keep", "kept"]) == 0
    out = capsys.readouterr().out
    assert out.startswith("identical: 2 Slurm jobs (1, 2)")
    assert "2 stdout lines, the records of 2 node(s), 2 output file(s)" in out
    assert (sbatch.parent / "kept" / "run-2" / "runs" / "node-1").is_dir()


@pytest.mark.parametrize(
    ("what", "where"),
    [
        ("stdout", "stdout"),
        ("record", "records of node-0: seed"),
        ("output", "out/node-0/weights.bin"),
    ],
)
def test_the_first_divergence_is_named(
    sbatch: Path,
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
    what: str,
    where: str,
) -> None:
    monkeypatch.setenv("FAKE_DIVERGE_AT", "2")
    monkeypatch.setenv("FAKE_WHAT", what)
    assert main(["verify", "--slurm", str(sbatch), "--json"]) == 1
    report = json.loads(capsys.readouterr().out)
    assert report["result"] == "diverged"
    assert report["first_divergence"]["where"] == where
    assert [job["job_id"] for job in report["jobs"]] == ["1", "2"]


def test_the_wall_clock_field_is_not_a_divergence(
    sbatch: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # the stand-in prints "(3.2s)" every time; a real job's durations differ: masked as verify's
    text = (sbatch.parent / "bin" / "sbatch").read_text().replace("(3.2s)", "($n.1s)")
    (sbatch.parent / "bin" / "sbatch").write_text(text)
    assert main(["verify", "--slurm", str(sbatch)]) == 0


def test_a_failed_job_is_an_error(
    sbatch: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("FAKE_FAIL_AT", "1")
    assert main(["verify", "--slurm", str(sbatch)]) != 0
    err = capsys.readouterr().err
    assert "Slurm job 1 (run 1) did not complete: sbatch --wait exited 1" in err


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["img:1", "--", "python", "x.py"], "IMAGE does not go with --slurm"),
        (["--nodes", "2"], "--nodes does not go with --slurm"),
        (["--runs", "1"], "--runs 1: comparing needs at least 2 runs"),
    ],
)
def test_options_that_do_not_go_with_slurm(
    sbatch: Path, capsys: pytest.CaptureFixture[str], args: list[str], message: str
) -> None:
    assert main(["verify", "--slurm", str(sbatch), *args]) != 0
    assert message in capsys.readouterr().err
    assert not (sbatch.parent / "count").exists()  # nothing submitted
