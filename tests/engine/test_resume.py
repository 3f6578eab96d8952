"""Issue 12's proof on real containers: a run stopped by ``docker stop`` and resumed in a fresh
container from the checkpoint its SIGTERM handler left on a mounted volume ends with the same
validation loss, bit for bit, as a straight run; resuming without restoring the RNG state (the
control) does not. Scripts: ``torch_resume.py`` (an MLP with dropout, a DataLoader that
shuffles with 2 workers) and ``keras_resume.py`` (dropout, ``fit(shuffle=True)``), both
unseeded. The entrypoint runs as init (PID 1), so its exit record says the run ended by signal.
"""

from __future__ import annotations

import json
import re
import time
from pathlib import Path
from typing import TYPE_CHECKING

import pytest

if TYPE_CHECKING:
    from docker import DockerClient

pytestmark = [pytest.mark.engine, pytest.mark.registry, pytest.mark.heavy]
QUIET = {"REPRO_QUIET": "1", "TF_CPP_MIN_LOG_LEVEL": "3"}
EPOCHS = 4
STOP_AFTER = 2
FINAL = re.compile(r"^final val_loss (\S+)$", re.M)


def start(docker_client: DockerClient, image: str, script: str, out: Path, *args: str) -> object:
    return docker_client.containers.run(
        image,
        ["python", f"scripts/{script}", "--epochs", str(EPOCHS), *args],
        environment={**QUIET, "REPRO_RUN_DIR": "/out/runs"},
        volumes={str(out): {"bind": "/out", "mode": "rw"}},
        detach=True,
        network_disabled=True,
    )


def finish(container: object) -> str:
    try:
        code = container.wait(timeout=600)["StatusCode"]  # type: ignore[attr-defined]
        out: str = container.logs(stdout=True, stderr=False).decode()  # type: ignore[attr-defined]
        err = container.logs(stdout=False, stderr=True).decode()  # type: ignore[attr-defined]
    finally:
        container.remove(force=True)  # type: ignore[attr-defined]
    assert code == 0, f"exited {code}:\n{out}\n{err[-3000:]}"
    return out


def final_loss(out: str) -> str:
    found = FINAL.search(out)
    assert found, out
    return found.group(1)


def volume(tmp_path: Path, name: str) -> Path:
    folder = tmp_path / name
    (folder / "runs").mkdir(parents=True)
    folder.chmod(0o777)
    (folder / "runs").chmod(0o777)
    return folder


@pytest.mark.parametrize("script", ["torch_resume.py", "keras_resume.py"])
def test_stopped_and_resumed_run_ends_as_the_straight_run(
    determinism_image: str, docker_client: DockerClient, tmp_path: Path, script: str
) -> None:
    straight = final_loss(
        finish(start(docker_client, determinism_image, script, volume(tmp_path, "a")))
    )

    out = volume(tmp_path, "b")
    container = start(docker_client, determinism_image, script, out, "--slow", "3")
    deadline = time.monotonic() + 300
    while f"epoch {STOP_AFTER} " not in container.logs(stderr=False).decode():  # type: ignore[attr-defined]
        assert time.monotonic() < deadline, container.logs().decode()  # type: ignore[attr-defined]
        time.sleep(0.2)
    container.stop(timeout=30)  # type: ignore[attr-defined]
    stopped = finish(container)
    assert f"saved after epoch {STOP_AFTER}" in stopped, stopped
    [exit_record] = [json.loads(p.read_text()) for p in (out / "runs").glob("run-*-exit.json")]
    assert exit_record["ended_by"] == "signal", exit_record
    assert exit_record["signals_received"] == ["SIGTERM"] and exit_record["exit_status"] == 0

    resumed = finish(start(docker_client, determinism_image, script, out, "--resume"))
    assert f"resumed after epoch {STOP_AFTER}" in resumed
    assert final_loss(resumed) == straight, (resumed, straight)

    control = finish(start(docker_client, determinism_image, script, out, "--resume", "--no-rng"))
    assert final_loss(control) != straight, "resuming without the RNG state must differ"


def test_verify_resume_at_in_containers(determinism_image: str, tmp_path: Path) -> None:
    """``reprobuild verify IMAGE --resume-at 2``: identical with the RNG state restored,
    diverged without it (the control)."""
    from helpers import run_cli

    def verify(*extra: str) -> tuple[int, dict[str, object]]:
        report = tmp_path / f"report{len(extra)}.json"
        proc = run_cli(
            "verify", determinism_image, "-q", "--resume-at", str(STOP_AFTER),
            "--report", str(report), "-e", "REPRO_QUIET=1",
            "--", "python", "scripts/torch_resume.py", "--slow", "3", *extra,
            cwd=tmp_path,
            timeout=900,
        )  # fmt: skip
        return proc.returncode, json.loads(report.read_text())

    code, report = verify()
    assert (code, report["result"]) == (0, "identical"), report
    code, report = verify("--no-rng")
    assert (code, report["result"]) == (1, "diverged"), report


def test_tf_global_generator_is_restored_in_a_fresh_container(
    docker_client: DockerClient, determinism_image: str, tmp_path: Path
) -> None:
    """The global generator lives in stateful_random_ops.global_generator (TF 2.21); a fresh
    process under op determinism gets it back from the saved state."""
    out = volume(tmp_path, "tfgen")

    def run(step: str) -> str:
        container = docker_client.containers.run(
            determinism_image,
            ["python", "scripts/tf_generator.py", step],
            environment=QUIET,
            volumes={str(out): {"bind": "/out", "mode": "rw"}},
            detach=True,
            network_disabled=True,
        )
        return finish(container).strip().splitlines()[-1]

    saved, restored = run("save"), run("load")
    assert saved == restored and len(json.loads(saved)) == 3
