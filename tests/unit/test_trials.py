"""Trial seeds (issue 12): ``REPRO_SEED=s REPRO_TRIAL=k`` runs trial k of the experiment
seeded s with a run seed derived by the written formula; ``reprobuild verify --trial``."""

from __future__ import annotations

import hashlib
import json
import random
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from helpers import run_cli
from reprobuild_entrypoint.settings import SettingsError, from_environ
from reprobuild_entrypoint.trials import TRIAL_SEED_FORMULA, trial_seed

PY = sys.executable


def test_the_formula_is_the_one_written_down() -> None:
    seed, trial = 11, 3
    digest = hashlib.sha256(f"reprobuild-trial:{seed}:{trial}".encode()).digest()
    assert trial_seed(11, 3) == int.from_bytes(digest[:4], "big")
    assert "sha256" in TRIAL_SEED_FORMULA and "[:4]" in TRIAL_SEED_FORMULA
    seeds = {trial_seed(s, k) for s in range(20) for k in range(50)}
    assert len(seeds) == 1000  # no (s, k) pair shares a seed here, unlike s + k would


def test_settings_derive_the_run_seed_and_keep_both_numbers() -> None:
    settings = from_environ({"REPRO_SEED": "11", "REPRO_TRIAL": "3"})
    assert (settings.seed, settings.experiment_seed, settings.trial) == (trial_seed(11, 3), 11, 3)
    assert settings.seed_source == "REPRO_TRIAL of REPRO_SEED"
    image = from_environ({"REPROBUILD_IMAGE_SEED": "7", "REPRO_TRIAL": "0"})
    assert (image.seed, image.experiment_seed) == (trial_seed(7, 0), 7)
    plain = from_environ({"REPRO_SEED": "11"})
    assert (plain.seed, plain.experiment_seed, plain.trial) == (11, None, None)


@pytest.mark.parametrize("bad", ["-1", "x", "4294967296"])
def test_a_bad_trial_is_refused(bad: str) -> None:
    with pytest.raises(SettingsError, match=r"REPRO_TRIAL=.* is not a trial number"):
        from_environ({"REPRO_TRIAL": bad})


def verify_trial(scripts: Path, trial: str) -> tuple[int, str, dict[str, Any]]:
    report = scripts / f"report-{trial}.json"
    proc = run_cli(
        "verify", "--local", "--report", str(report), "--seed", "11", "--trial", trial,
        "--", PY, "det.py",
        cwd=scripts,
        timeout=120,
    )  # fmt: skip
    return proc.returncode, proc.stderr, json.loads(report.read_text())


def test_verify_trial_3_of_seed_11_is_identical_and_differs_from_trial_4(
    project: Callable[[str], Path],
) -> None:
    scripts = project("verify")
    code, err, three = verify_trial(scripts, "3")
    assert code == 0, err
    assert three["result"] == "identical" and three["trial"] == 3
    record = three["runs"][0]["run_record"]["determinism"]
    assert (record["experiment_seed"], record["trial"], record["seed"]) == (
        11,
        3,
        trial_seed(11, 3),
    )
    # the program drew from the derived seed
    assert f"[1] epoch 1 loss {random.Random(trial_seed(11, 3)).random()!r}" in err.splitlines()
    code, err, four = verify_trial(scripts, "4")
    assert code == 0, err
    assert four["runs"][0]["stdout_sha256"] != three["runs"][0]["stdout_sha256"]
