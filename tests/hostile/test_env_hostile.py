"""Hostile ``--env NAME=VALUE`` options to ``compose``, ``compose --nodes`` and ``k8s``: each is
refused before the engine is asked (the image is given pinned, and no engine is needed to
refuse), with exit code 2, one ``error:`` line naming the bad value and what is allowed, no
output file, and nothing else changed (hostile_harness). No engine: these run anywhere.

A NUL byte cannot be passed in argv at all; the library refuses one (tests/unit/test_userenv.py).
"""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from helpers import DATA, run_cli
from hostile_harness import Snapshot, assert_clean_failure

PINNED = "127.0.0.1:5000/reprobuild-hostile/any@sha256:" + "a" * 64
JOBS = {
    "compose": ["compose"],
    "compose-nodes": ["compose", "--nodes", "2", "--nproc-per-node", "2"],
    "k8s": ["k8s", "--nodes", "2"],
}
KIB_33 = "v" * (33 * 1024)

# name: (--env options, what the error line must hold)
CASES: dict[str, tuple[list[str], str]] = {
    "no-equals": (["WANDB_MODE"], "--env 'WANDB_MODE' has no '=': use --env NAME=VALUE"),
    "empty-option": ([""], "--env '' has no '='"),
    "empty-name": (["=offline"], "--env name '' is not allowed: use a letter or '_'"),
    "name-digit-first": (["1X=1"], "--env name '1X' is not allowed"),
    "name-dash": (["MY-VAR=1"], "--env name 'MY-VAR' is not allowed"),
    "name-shell": (["$(touch /tmp/pwned)=1"], "--env name '$(touch /tmp/pwned)' is not allowed"),
    "name-space": (["A B=1"], "[A-Za-z_][A-Za-z0-9_]*"),
    "name-huge": (["N" * 5000 + "=1"], "at most 256 characters"),
    "value-newline": (["X=a\nREPRO_SEED=1"], "the value holds the control character U+000A"),
    "value-cr": (["X=a\rb"], "U+000D; use one line of printable text"),
    "value-escape": (["X=\x1b]0;title\x07"], "U+001B"),
    "value-del": (["X=\x7f"], "U+007F"),
    "value-c1": (["X=\x85"], "U+0085"),
    "value-line-separator": (["X=a\u2028b"], "U+2028"),
    "value-not-utf8": (["X=\udcff"], "the value is not UTF-8 text"),
    "value-over-32k": ([f"BIG={KIB_33}"], "--env BIG: the value is 33792 bytes, above the 32 KiB"),
    "too-many": ([f"V{i}=1" for i in range(257)], "257 --env options: at most 256 are allowed"),
    "seed": (["REPRO_SEED=1"], "--env REPRO_SEED is not allowed: reprobuild sets REPRO_SEED"),
    "determinism": (["REPRO_DETERMINISM=off"], "set determinism: in reprobuild.yaml"),
    "run-dir": (["REPRO_RUN_DIR=/tmp"], "--env REPRO_RUN_DIR is not allowed"),
    "output-dir": (["REPRO_OUTPUT_DIR=/"], "--env REPRO_OUTPUT_DIR is not allowed"),
    "backend": (["REPRO_DIST_BACKEND=mpi"], "--gpu picks nccl, else gloo"),
    "job-id": (["REPRO_JOB_ID=x"], "--env REPRO_JOB_ID is not allowed"),
    "node-index": (["NODE_INDEX=0"], "--env NODE_INDEX is not allowed"),
    "bad-after-good": (["OK=1", "OK=2", "BAD-NAME=3"], "--env name 'BAD-NAME'"),
}


@pytest.mark.parametrize("job", sorted(JOBS))
@pytest.mark.parametrize("name", sorted(CASES))
def test_hostile_env(name: str, job: str, tmp_path: Path) -> None:
    options, expected = CASES[name]
    root = tmp_path / "project"
    shutil.copytree(DATA / "projects" / "tiny", root)
    work = tmp_path / "work"
    work.mkdir()
    snap = Snapshot.take([root, work])
    command, *rest = JOBS[job]
    out = work / "job.yml"
    env_args = [arg for option in options for arg in ("--env", option)]
    proc = run_cli(
        command, str(root), *rest, "--image", PINNED, *env_args, "-o", str(out), timeout=60
    )
    assert_clean_failure(proc, expected, exit_code=2)
    assert not out.exists()
    snap.assert_unchanged()
