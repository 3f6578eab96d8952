"""Public projects all the way (issue 51): each project's own lock, manifest and training code,
copied byte for byte from its repository (tests/data/projects/README.md names upstream, commit,
licence and each file's `git hash-object`), goes through `reprobuild init` (nothing but the
test base, the Python and the command given), `reprobuild image`, and the project's own code
trains for a few steps in the image under `reprobuild verify`, which must call the two runs
identical. Both projects seed their runs themselves (a fixed PRNG key; a pytest fixture), so no
`--mode off` control is asked of them.

Heavy: every wheel of the lock is fetched from PyPI and installed; rl-replicas' torch 2.5.1
brings its CUDA 12 wheels (about 3 GB), the one real PyPI torch of the suite."""

from __future__ import annotations

import json
import shutil
import time
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest

from helpers import DATA, MakeTag, build_json, run_cli

if TYPE_CHECKING:
    from docker import DockerClient

pytestmark = [pytest.mark.engine, pytest.mark.registry, pytest.mark.heavy, pytest.mark.journey]

VERIFY_TIMEOUT_S = 1500


@dataclass(frozen=True)
class Wild:
    """One public project: its folder under tests/data/projects, what init is told, and what
    its training prints."""

    folder: str
    command: tuple[str, ...]
    init_args: tuple[str, ...]
    config_lines: tuple[str, ...]
    notes: tuple[str, ...]  # what init says of the lock
    verify_args: tuple[str, ...]
    trained: str  # a line the training prints once it has trained


# Both lay their package out under src/ and their lock does not install the project itself
# (uv.lock's editable root; PDM's lock names no project), which init leaves to `include` (it
# copies src/ into the image): the image puts /app/src on the import path, as `uv run` finds
# the editable install, so the runs need no flag (issue 51).
NO_FLAG: tuple[str, ...] = ()

# rejax (github.com/keraJLi/rejax) when it locked with PDM: brax and evosax were main
# dependencies then, and gym 0.26.2 (brax's and gymnax's) is locked as an sdist only, so
# init pins its build requirements and image builds it.
REJAX_PDM = Wild(
    folder="wild-rejax-pdm",
    # its example script: 10 TD3 agents, 10 000 steps each, on gymnax's Pendulum, in one jit
    command=("python", "examples/random_search_hyperopt.py"),
    init_args=(),
    config_lines=(
        "lock: pdm.lock",
        "  - examples",
        "  - src",
        "build_lock: build-requirements.lock  # the sdists' build requirements, hashed",
    ),
    notes=("pdm.lock builds 1 packages from their sdists",),
    verify_args=NO_FLAG,
    trained="with return: ",
)

RL_REPLICAS = Wild(
    folder="wild-rl-replicas",
    # its own integration test: PPO on gymnasium's CartPole-v1, 5 epochs of 500 steps
    command=(
        "python",
        "-m",
        "pytest",
        "-p",
        "no:cacheprovider",
        "-s",
        "tests/integration_tests/test_ppo.py::TestPPO::test_ppo_with_cartpole",
    ),
    init_args=("--group", "dev"),
    config_lines=("lock: uv.lock", "gpu_lock: uv.lock", "  - src", "  - tests", "  groups: [dev]"),
    notes=(
        "uv.lock: the project rl-replicas itself is not installed from the lock",
        "uv.lock carries CUDA as wheels",
    ),
    # each epoch prints its wall-clock time, "time: 3.41    " ("{:<8.3g}"): verify's built-in
    # rule leaves the value out, and the padding that tells its width
    verify_args=NO_FLAG,
    trained="sampling/average_episode_length: ",
)


def journey(
    wild: Wild, base_ref: str, tmp_path: Path, tag: str, docker_client: DockerClient
) -> dict[str, Any]:
    project = tmp_path / wild.folder
    shutil.copytree(DATA / "projects" / wild.folder, project)
    # no --python: init reads the base's CPython (Debian 12's 3.11.2), not the newest the
    # lock allows (issue 51)
    init = ("init", str(project), "--base", base_ref)
    proc = run_cli(*init, *wild.init_args, "--command", " ".join(wild.command))
    assert proc.returncode == 0, proc.stderr
    for note in (*wild.notes, f"read for CPython 3.11 (the CPython of base {base_ref})"):
        assert note in proc.stderr, proc.stderr
    config = (project / "reprobuild.yaml").read_text()
    for line in (*wild.config_lines, '  python: "3.11"'):
        assert f"\n{line}" in config, config
    start = time.monotonic()
    build_json(str(project), "--tag", tag, timeout=3600)
    built_s = time.monotonic() - start
    size_mb = docker_client.images.get(tag).attrs["Size"] / 1e6
    print(f"{wild.folder}: image built in {built_s:.0f} s, {size_mb:.0f} MB")  # shown with -s
    report_path = tmp_path / "verify.json"
    start = time.monotonic()
    verify = run_cli(
        "verify", tag, *wild.verify_args, "--report", str(report_path), "--", *wild.command,
        cwd=tmp_path, timeout=VERIFY_TIMEOUT_S,
    )  # fmt: skip
    print(f"{wild.folder}: verify took {time.monotonic() - start:.0f} s")
    assert verify.returncode == 0, verify.stdout[-3000:] + verify.stderr[-3000:]
    assert verify.stdout.startswith("identical: 2 runs of "), verify.stdout
    report: dict[str, Any] = json.loads(report_path.read_text())
    assert report["result"] == "identical"
    # verify shows run 1's stdout as it comes: the training got to its end
    assert f"[1] {wild.trained}" in verify.stderr, verify.stderr[-3000:]
    return report


def test_rejax_trains_from_its_pdm_lock_identically(
    base_ref: str, tmp_path: Path, unique_tag: MakeTag, docker_client: DockerClient
) -> None:
    report = journey(REJAX_PDM, base_ref, tmp_path, unique_tag("wild-rejax-pdm"), docker_client)
    assert report["lines_compared"] == 3, report["summary"]
    (returns,) = {tuple(run["series"]["return"]["values"]) for run in report["runs"]}
    assert len(returns) == 1 and returns[0] < 0, returns


def test_rl_replicas_trains_torch_from_pypi_identically(
    base_ref: str, tmp_path: Path, unique_tag: MakeTag, docker_client: DockerClient
) -> None:
    tag = unique_tag("wild-rl-replicas")
    report = journey(RL_REPLICAS, base_ref, tmp_path, tag, docker_client)
    manifest = json.loads(run_cli("inspect", tag, "--json").stdout)["manifest"]
    assert manifest["variant"] == "gpu" and manifest["gpu"]["stack"] == "wheels"
    assert report["lines_compared"] >= 70, report["summary"]  # 14 lines an epoch
    # the five epochs' wall-clock times and pytest's "1 passed in 32.25s" were left out,
    # nothing else
    for run in report["runs"]:
        rules = {r["rule"]: r["fields"] for r in run["ignored"]["rules"]}
        assert rules == {"timed": 5, "duration": 1}, run["ignored"]
