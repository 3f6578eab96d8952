"""Public projects all the way (issue 51): each project's own lock, manifest and training code,
copied byte for byte from its repository (tests/data/projects/README.md names upstream, commit,
licence and each file's `git hash-object`), goes through `reprobuild init` (nothing but the
test base and the command given: init reads the base's Python, and selects the extra or group
that brings what the command imports), `reprobuild image`, and the project's own code
trains for a few steps in the image under `reprobuild verify`, which must call the two runs
identical. rejax and rl-replicas seed their runs themselves (a fixed PRNG key; a pytest
fixture), so no `--mode off` control is asked of them. flax's toy example does not: its data and
its batches come from NumPy's global generator, unseeded, which the image's start-up hook seeds;
with the hook off (`verify --mode off`, the control) the same image must diverge.

Heavy: every wheel of the lock is fetched from PyPI and installed; rl-replicas' torch 2.5.1
brings its CUDA 12 wheels (about 3 GB), the one real PyPI torch of the suite."""

from __future__ import annotations

import json
import shutil
import subprocess
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
    # an unseeded script: the name of the number `verify --mode off` must find differing
    control: str | None = None


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
    notes=("pdm.lock builds 1 package from its sdist",),
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
    # no --group dev: init reads the command, which runs pytest, and selects the group
    init_args=(),
    config_lines=("lock: uv.lock", "gpu_lock: uv.lock", "  - src", "  - tests", "  groups: [dev]"),
    notes=(
        "uv.lock: the project rl-replicas itself is not installed from the lock",
        "uv.lock carries CUDA as wheels",
        "runs pytest, which uv.lock installs only with its group dev: selected it",
    ),
    # each epoch prints its wall-clock time, "time: 3.41    " ("{:<8.3g}"): verify's built-in
    # rule leaves the value out, and the padding that tells its width
    verify_args=NO_FLAG,
    trained="sampling/average_episode_length: ",
)

# flax (github.com/google/flax) at the last commit that updated its uv.lock (jax 0.7.0, which its
# pyproject then allowed; at 7e8f152, 2025-09-25, flax asked for jax>=0.7.1 with the lock unchanged,
# and its toy example then fails in the image with TraceContextError: that one is not copied):
# its own NNX toy example fits a small MLP to noisy sin(x) for 10 000 SGD steps on CPU. The model's
# parameters come from a fixed key (nnx.Rngs(0)), the noise and every batch from NumPy's global
# generator, never seeded. It imports matplotlib (plt.show() draws nothing here: no display),
# which the lock holds in the `docs` extra. flax keeps its package at the top (flax/, not src/),
# and the lock leaves the project itself to `include`: the image puts /app on the import path,
# as the editable install does under `uv run`.
FLAX = Wild(
    folder="wild-flax",
    command=("python", "examples/nnx_toy_examples/01_functional_api.py"),
    # no --extra docs: init reads the example, which imports matplotlib, and selects the extra
    init_args=(),
    config_lines=("lock: uv.lock", "  - examples", "  - flax", "  extras: [docs]"),
    notes=(
        "uv.lock: the project flax itself is not installed from the lock",
        "examples/nnx_toy_examples/01_functional_api.py imports matplotlib, which uv.lock "
        "installs only with its extra docs: selected it",
    ),
    verify_args=NO_FLAG,
    trained="times called: ",
    control="loss",
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
    try:
        return _build_and_verify(wild, project, tag, tmp_path, docker_client)
    finally:
        _drop_build_cache(project)


def _drop_build_cache(project: Path) -> None:
    """buildah's layers of the journey's image, gone once it is built and verified (the image
    in the engine goes with the test's tag): rl-replicas' CUDA torch image is about 6 GB in the
    engine and twice that in buildah's storage (each package group's stage, and its copy in
    the image), and the rest of the suite shares the disk."""
    from reprobuild.backends import buildah
    from reprobuild.project.config import load_config

    buildah.forget(load_config(project).name, "cpu")
    # the package groups' stages: no name holds them once the image's chain is gone
    subprocess.run(["buildah", "rmi", "--prune"], capture_output=True, check=False, timeout=600)


def _build_and_verify(
    wild: Wild, project: Path, tag: str, tmp_path: Path, docker_client: DockerClient
) -> dict[str, Any]:
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
    if wild.control is not None:
        control_report(wild, tag, tmp_path)
    return report


def control_report(wild: Wild, tag: str, tmp_path: Path) -> dict[str, Any]:
    """The same image and command with the start-up hook off (`--mode off`): an unseeded script
    must diverge, which is what the identical runs above owe to the hook."""
    report_path = tmp_path / "control.json"
    start = time.monotonic()
    control = run_cli(
        "verify", tag, "--mode", "off", *wild.verify_args, "--report", str(report_path),
        "--", *wild.command, cwd=tmp_path, timeout=VERIFY_TIMEOUT_S,
    )  # fmt: skip
    print(f"{wild.folder}: the control took {time.monotonic() - start:.0f} s")
    assert control.returncode == 1, control.stdout[-3000:] + control.stderr[-3000:]
    assert control.stdout.startswith("diverged: stdout line "), control.stdout
    report: dict[str, Any] = json.loads(report_path.read_text())
    divergence = report["divergence"]
    assert report["result"] == "diverged" and report["mode"] == "off", report["summary"]
    assert divergence["where"] == "stdout" and divergence["value"] == wild.control, divergence
    assert divergence["numeric"]["a"] != divergence["numeric"]["b"], divergence
    for run in report["runs"]:
        assert run["run_record"]["determinism"]["mode"] == "off", run["run_record"]
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


def test_flax_trains_unseeded_identically_and_diverges_without_the_hook(
    base_ref: str, tmp_path: Path, unique_tag: MakeTag, docker_client: DockerClient
) -> None:
    report = journey(FLAX, base_ref, tmp_path, unique_tag("wild-flax"), docker_client)
    assert report["lines_compared"] == 11, report["summary"]  # a loss every 1000 steps, a count
    (losses,) = {tuple(run["series"]["loss"]["values"]) for run in report["runs"]}
    assert len(losses) == 10 and losses[-1] < losses[0], losses  # it learned
