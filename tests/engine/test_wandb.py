"""W&B runs started in a reprobuild image carry its stack, with no change to the program: an
image built from tests/data/projects/wandb (wandb from a hashed lock), its unmodified training
scripts run in containers with no network at all (W&B's offline mode), each run's directory
mounted out, and its ``run-*.wandb`` file read back with wandb's own protobuf classes."""

from __future__ import annotations

import contextlib
import json
import shutil
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Any

import docker.errors
import pytest

from helpers import DATA, build_json, run_cli
from reprobuild.checks import wandbruns
from reprobuild_entrypoint import wandbrun
from wandblog import WandbRun, offline_runs, read_run, run_file

if TYPE_CHECKING:
    from docker import DockerClient

pytestmark = [pytest.mark.engine, pytest.mark.registry]
MOUNT = "/wandb-out"


@pytest.fixture(scope="module")
def image(
    base_ref: str, tmp_path_factory: pytest.TempPathFactory, docker_client: DockerClient
) -> Iterator[dict[str, Any]]:
    root = tmp_path_factory.mktemp("wandb") / "project"
    shutil.copytree(DATA / "projects" / "wandb", root)
    tag = f"reprobuild-test/wandb:{uuid.uuid4().hex[:12]}"
    try:
        result = build_json(str(root), "--base", base_ref, "--tag", tag, "-q")
        yield {"tag": tag, "id": result["id"], "labels": docker_client.images.get(tag).labels}
    finally:
        with contextlib.suppress(docker.errors.ImageNotFound):
            docker_client.images.remove(tag, force=True)


def _train(client: DockerClient, image: dict[str, Any], out: Path, script: str, seed: str) -> Path:
    """Run ``script`` in a container with no network; its offline run directory."""
    out.mkdir(parents=True)
    out.chmod(0o777)  # the image's user is not root
    env = {
        "WANDB_MODE": "offline",
        "WANDB_DIR": MOUNT,
        "REPRO_SEED": seed,
        "REPRO_IMAGE": image["id"],
        "REPRO_RUN_DIR": "/tmp/run",
    }
    container = client.containers.run(
        image["tag"],
        ["python", script],
        detach=True,
        network_mode="none",
        environment=env,
        volumes={str(out): {"bind": MOUNT, "mode": "rw"}},
    )
    try:
        status = container.wait(timeout=300)["StatusCode"]
        err = container.logs(stdout=False, stderr=True).decode()
    finally:
        container.remove(force=True)
    assert status == 0, err[-3000:]
    assert "reprobuild: W&B" not in err, err[-3000:]
    (run_dir,) = offline_runs(out / "wandb")
    return run_dir


@pytest.fixture(scope="module")
def runs(
    image: dict[str, Any], docker_client: DockerClient, tmp_path_factory: pytest.TempPathFactory
) -> dict[str, Path]:
    """``train.py`` with seeds 11 and 12, ``train_own.py`` with 11: their run directories."""
    out = tmp_path_factory.mktemp("wandb-runs")
    return {
        name: _train(docker_client, image, out / name, script, seed)
        for name, script, seed in (
            ("11", "train.py", "11"),
            ("12", "train.py", "12"),
            ("own", "train_own.py", "11"),
        )
    }


def _read(run_dir: Path) -> WandbRun:
    return read_run(run_file(run_dir))


def test_an_unmodified_run_carries_the_image_stack(
    image: dict[str, Any], runs: dict[str, Path]
) -> None:
    labels = image["labels"]
    for seed in ("11", "12"):
        run = _read(runs[seed])
        stack = run.config[wandbrun.CONFIG_KEY]
        assert stack["seed"] == stack["rank_seed"] == int(seed)
        assert stack["seed_source"] == "REPRO_SEED"
        assert stack["image"] == "reprobuild-test/wandb"
        assert stack["image.ref"] == image["id"] == run.docker
        assert stack["manifest_sha256"] == labels["io.reprobuild.manifest.sha256"]
        assert stack["lock_sha256"] == labels["io.reprobuild.lock.sha256"]
        assert stack["determinism"] == "warn" and stack["cpu.mode"] == "native"
        assert stack["cpu.model"] and isinstance(stack["threads"], int)
        record = f"reprobuild/run-{stack['run_id']}.json"
        assert {"reprobuild/manifest.json", record} <= set(run.files)
        files = runs[seed] / "files"
        assert json.loads((files / record).read_text())["run_id"] == stack["run_id"]
        manifest = json.loads((files / "reprobuild" / "manifest.json").read_text())
        assert manifest["name"] == "reprobuild-test/wandb"
        assert run.kinds.count("history") == 5


def test_the_scripts_own_tags_config_and_group_are_unchanged(runs: dict[str, Path]) -> None:
    run = _read(runs["own"])
    assert run.tags == ["baseline", "v2"]
    assert run.group == "sweep-7"
    config = {k: v for k, v in run.config.items() if k not in ("_wandb", wandbrun.CONFIG_KEY)}
    assert config == {"lr": 0.01, "layers": [64, 32], "optimizer": "adam"}
    assert run.config[wandbrun.CONFIG_KEY]["seed"] == 11


def test_diff_of_two_offline_runs_names_the_seed(runs: dict[str, Path]) -> None:
    proc = run_cli("diff", str(runs["11"]), str(runs["12"]), "--json")
    assert proc.returncode == 1, proc.stdout + proc.stderr
    report = json.loads(proc.stdout)
    seeds = [d for d in report["differences"] if d["key"] == "seed"]
    assert seeds and (seeds[0]["a"], seeds[0]["b"]) == (11, 12), report["differences"]
    same = run_cli("diff", str(runs["11"]), str(runs["11"]))
    assert same.returncode == 0, same.stdout + same.stderr


def test_verify_wandb_writes_the_verdict_into_both_offline_runs(
    image: dict[str, Any], tmp_path: Path
) -> None:
    """``verify IMAGE --wandb --keep DIR``: both containers run W&B offline with its directory
    on their record mounts; each kept run carries the stack and, after the comparison, the
    verdict as a file of the run (``files/reprobuild/verify.json``, what ``wandb sync``
    uploads with its other files)."""
    keep, report = tmp_path / "keep", tmp_path / "report.json"
    args = ("verify", image["tag"], "--wandb", "--keep", str(keep), "--report", str(report))
    proc = run_cli(*args, "-q", "--", "python", "train.py", timeout=600)
    assert proc.returncode == 0, proc.stdout + proc.stderr[-3000:]
    records = [r["run_record"]["run_id"] for r in json.loads(report.read_text())["runs"]]
    run_dirs = wandbruns.offline_runs(keep)
    assert len(run_dirs) == 2, proc.stderr[-3000:]
    for run_dir, record_id in zip(run_dirs, records, strict=True):
        stack = _read(run_dir).config[wandbrun.CONFIG_KEY]
        assert stack["run_id"] == record_id
        verdict = json.loads((run_dir / "files" / "reprobuild" / "verify.json").read_text())
        assert verdict["result"] == "identical" and verdict["run_ids"] == records
        assert verdict["report"] == str(report.absolute()) or verdict["report"] == str(report)
    assert "wandb: verdict 'identical' written to 2 offline run(s)" in proc.stderr
