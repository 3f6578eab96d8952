"""Issue 3's proof on real containers: one image with torch 2.13 (CPU), tensorflow-cpu 2.21
(Keras 3), numpy and scikit-learn; unseeded scripts run twice, each run in a fresh container.

- same image, same seed: identical output;
- another REPRO_SEED: different output;
- entrypoint bypassed (``--entrypoint python``): still identical, and equal to the entrypoint's;
- REPRO_DETERMINISM=off, the control that proves the runtime does the work: runs differ.
"""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import TYPE_CHECKING

import pytest

from helpers import run_record_paths

if TYPE_CHECKING:
    from docker import DockerClient

pytestmark = [pytest.mark.engine, pytest.mark.registry, pytest.mark.heavy]
SCRIPTS = ["torch_mlp.py", "keras_conv.py", "torch_loader.py", "set_order.py"]
QUIET = {"REPRO_QUIET": "1", "TF_CPP_MIN_LOG_LEVEL": "3"}


@pytest.fixture(scope="module")
def image(determinism_image: str) -> str:
    return determinism_image


def run(
    docker_client: DockerClient,
    image: str,
    script: str,
    env: dict[str, str] | None = None,
    entrypoint: list[str] | None = None,
) -> str:
    """One fresh container; returns stdout and fails the test on a non-zero exit."""
    command = ["python", f"scripts/{script}"]
    kwargs: dict[str, object] = {}
    if entrypoint is not None:
        kwargs["entrypoint"] = entrypoint
        command = command[1:]
    container = docker_client.containers.run(
        image,
        command,
        environment={**QUIET, **(env or {})},
        detach=True,
        network_disabled=True,
        **kwargs,
    )
    try:
        code = container.wait(timeout=600)["StatusCode"]
        out: str = container.logs(stdout=True, stderr=False).decode()
        err = container.logs(stdout=False, stderr=True).decode()
    finally:
        container.remove(force=True)
    assert code == 0, f"{script} exited {code}:\n{err[-3000:]}"
    assert out.strip(), f"{script} printed nothing:\n{err[-3000:]}"
    return out


@pytest.mark.parametrize("script", SCRIPTS)
def test_unseeded_script_reproduces_bit_for_bit(
    image: str, docker_client: DockerClient, script: str
) -> None:
    first = run(docker_client, image, script)
    second = run(docker_client, image, script)
    assert first == second
    reseeded = run(docker_client, image, script, {"REPRO_SEED": "1"})
    assert reseeded != first, "a different REPRO_SEED must change the output"
    bypassed = run(docker_client, image, script, entrypoint=["python"])
    assert bypassed == first, "bypassing the entrypoint must keep the guarantee"


@pytest.mark.parametrize("script", SCRIPTS)
def test_runtime_off_is_the_control(image: str, docker_client: DockerClient, script: str) -> None:
    off = {"REPRO_DETERMINISM": "off"}
    assert run(docker_client, image, script, off) != run(docker_client, image, script, off)


def test_docker_stop_reaches_the_program(image: str, docker_client: DockerClient) -> None:
    container = docker_client.containers.run(
        image,
        ["python", "scripts/sigterm.py"],
        environment=QUIET,
        detach=True,
        network_disabled=True,
    )
    try:
        deadline = time.monotonic() + 60
        while b"ready" not in container.logs() and time.monotonic() < deadline:
            time.sleep(0.2)
        start = time.monotonic()
        container.stop(timeout=20)
        elapsed = time.monotonic() - start
        container.reload()
        assert container.attrs["State"]["ExitCode"] == 42
        assert b"handled SIGTERM" in container.logs()
        assert elapsed < 10, f"stop took {elapsed:.1f} s: SIGTERM did not reach the program"
    finally:
        container.remove(force=True)


def test_exit_code_comes_through(image: str, docker_client: DockerClient) -> None:
    container = docker_client.containers.run(
        image, ["python", "-c", "raise SystemExit(5)"], environment=QUIET, detach=True
    )
    try:
        assert container.wait(timeout=120)["StatusCode"] == 5
    finally:
        container.remove(force=True)


def test_run_record_matches_what_was_set(
    image: str, docker_client: DockerClient, tmp_path: Path
) -> None:
    runs = tmp_path / "runs"
    runs.mkdir()
    runs.chmod(0o777)
    show = (
        "import json, os, torch; print(json.dumps({k: os.environ.get(k) for k in "
        "['PYTHONHASHSEED', 'OMP_NUM_THREADS', 'MKL_CBWR', 'TF_DETERMINISTIC_OPS']} | "
        "{'torch_threads': torch.get_num_threads(), "
        "'deterministic': torch.are_deterministic_algorithms_enabled()}))"
    )
    out = docker_client.containers.run(
        image,
        ["python", "-c", show],
        remove=True,
        network_disabled=True,
        environment={"REPRO_RUN_DIR": "/runs", "REPRO_SEED": "11", "OMP_NUM_THREADS": "2"},
        volumes={str(runs): {"bind": "/runs", "mode": "rw"}},
        stderr=True,
    ).decode()
    seen = json.loads(out.strip().splitlines()[-1])
    assert seen["PYTHONHASHSEED"] == "11"
    assert seen["OMP_NUM_THREADS"] == "2"  # user-set wins
    assert seen["torch_threads"] == 2
    assert seen["deterministic"] is True
    records = run_record_paths(runs)
    assert len(records) == 1, [p.name for p in runs.iterdir()]
    record = json.loads(records[0].read_text())
    assert record["schema_version"] == 1
    assert record["determinism"]["seed"] == 11
    assert record["determinism"]["seed_source"] == "REPRO_SEED"
    assert record["determinism"]["mode"] == "strict"
    env = record["environment"]
    for key in ("PYTHONHASHSEED", "MKL_CBWR", "TF_DETERMINISTIC_OPS"):
        assert env["set"][key] == seen[key], key
    assert env["user_set"] == {"OMP_NUM_THREADS": "2"}
    frameworks = [p for p in runs.iterdir() if "-frameworks-" in p.name]
    assert frameworks, "the program's process records what it configured"
    assert "torch" in frameworks[0].read_text()
