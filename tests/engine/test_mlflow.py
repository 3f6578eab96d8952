"""MLflow runs started in a reprobuild image carry its stack, with no change to the program: a
real tracking server (SQLite backend on 127.0.0.1, started here), an image built from
tests/data/projects/mlflow (mlflow-skinny from a hashed lock), its unmodified training scripts
run in containers on the host network, and the runs read back through MLflow's client."""

from __future__ import annotations

import contextlib
import ipaddress
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import time
import urllib.request
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Any

import docker.errors
import pytest

from helpers import DATA, build_json, run_cli
from reprobuild_entrypoint import mlflowtags

if TYPE_CHECKING:
    from docker import DockerClient
    from docker.models.containers import Container

pytestmark = [pytest.mark.engine, pytest.mark.registry]
# MLflow 3.17's telemetry thread unsets _MLFLOW_TELEMETRY_SESSION_ID when it gives up on its
# endpoint (no route from here) while requests, on the training thread, iterates os.environ
# for proxies: `KeyError: '_MLFLOW_TELEMETRY_SESSION_ID'` failed a log_metric on a busy host.
# MLflow's own switch turns the telemetry (and the race) off; nothing here depends on it.
QUIET = {
    "GIT_PYTHON_REFRESH": "quiet",
    "REPRO_RUN_DIR": "/tmp/run",
    "MLFLOW_DISABLE_TELEMETRY": "true",
}
NO_RUN_DIR = "12"  # this seed's run has no REPRO_RUN_DIR: the record goes to the default place


def _free_port(host: str = "127.0.0.1") -> int:
    with socket.socket() as sock:
        sock.bind((host, 0))
        return int(sock.getsockname()[1])


@contextlib.contextmanager
def tracking_server(where: Path, host: str = "127.0.0.1") -> Iterator[str]:
    """``mlflow server`` with a SQLite store and proxied artifacts under ``where``, listening
    on ``host``."""
    where.mkdir(parents=True, exist_ok=True)
    port = _free_port(host)
    url = f"http://{host}:{port}"
    log = (where / "server.log").open("wb")
    proc = subprocess.Popen(
        [
            *(sys.executable, "-m", "mlflow", "server", "--host", host),
            *("--port", str(port), "--workers", "1"),
            *("--backend-store-uri", f"sqlite:///{where / 'mlflow.db'}"),
            *("--artifacts-destination", str(where / "artifacts")),
        ],
        cwd=where,
        stdout=log,
        stderr=subprocess.STDOUT,
        start_new_session=True,  # its uvicorn workers go with it (the group is stopped below)
    )
    try:
        deadline = time.monotonic() + 180
        while True:
            with (
                contextlib.suppress(OSError),
                urllib.request.urlopen(f"{url}/health", timeout=5) as answer,
            ):
                if answer.status == 200:
                    break
            if proc.poll() is not None or time.monotonic() > deadline:
                pytest.fail(f"mlflow server did not start: {(where / 'server.log').read_text()}")
            time.sleep(0.5)
        yield url
    finally:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, signal.SIGTERM)
        try:
            proc.wait(30)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
        log.close()


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    with tracking_server(tmp_path_factory.mktemp("mlflow-server")) as url:
        yield url


@pytest.fixture(scope="module")
def image(
    base_ref: str, tmp_path_factory: pytest.TempPathFactory, docker_client: DockerClient
) -> Iterator[dict[str, Any]]:
    root = tmp_path_factory.mktemp("mlflow") / "project"
    shutil.copytree(DATA / "projects" / "mlflow", root)
    tag = f"reprobuild-test/mlflow:{uuid.uuid4().hex[:12]}"
    try:
        result = build_json(str(root), "--base", base_ref, "--tag", tag, "-q")
        yield {"tag": tag, "id": result["id"], "labels": docker_client.images.get(tag).labels}
    finally:
        with contextlib.suppress(docker.errors.ImageNotFound):
            docker_client.images.remove(tag, force=True)


def _start(
    client: DockerClient, tag: str, command: list[str], env: dict[str, str], run_dir: bool = True
) -> Container:
    environment = {**QUIET, **env}
    if not run_dir:
        del environment["REPRO_RUN_DIR"]
    return client.containers.run(
        tag, command, detach=True, network_mode="host", environment=environment
    )


def _finish(container: Container, timeout: float = 300) -> tuple[int, str, str]:
    try:
        status = container.wait(timeout=timeout)["StatusCode"]
        out = container.logs(stdout=True, stderr=False).decode()
        err = container.logs(stdout=False, stderr=True).decode()
        return status, out, err
    finally:
        container.remove(force=True)


def _train(client: DockerClient, image: dict[str, Any], server: str, seed: str) -> str:
    env = {"MLFLOW_TRACKING_URI": server, "REPRO_SEED": seed, "REPRO_IMAGE": image["id"]}
    status, out, err = _finish(_start(client, image["tag"], [], env, run_dir=seed != NO_RUN_DIR))
    assert status == 0, err[-3000:]
    assert "reprobuild: MLflow" not in err
    return out.split()[-1]


@pytest.fixture(scope="module")
def runs(image: dict[str, Any], server: str, docker_client: DockerClient) -> dict[str, str]:
    """Seed -> the MLflow run ID of train.py run with that seed (seed 12 without
    ``REPRO_RUN_DIR``)."""
    return {seed: _train(docker_client, image, server, seed) for seed in ("11", "12")}


def test_an_unmodified_run_is_tagged_with_the_image_stack(
    image: dict[str, Any], server: str, runs: dict[str, str], tmp_path: Path
) -> None:
    import mlflow

    client = mlflow.MlflowClient(server)
    labels = image["labels"]
    for seed, run_id in runs.items():
        tags = client.get_run(run_id).data.tags
        assert tags["reprobuild.seed"] == tags["reprobuild.rank_seed"] == seed
        assert tags["reprobuild.seed_source"] == "REPRO_SEED"
        assert tags["reprobuild.image"] == "reprobuild-test/mlflow"
        assert tags["reprobuild.image.ref"] == image["id"]
        assert tags["reprobuild.manifest_sha256"] == labels["io.reprobuild.manifest.sha256"]
        assert tags["reprobuild.lock_sha256"] == labels["io.reprobuild.lock.sha256"]
        assert tags["reprobuild.determinism"] == "warn"
        assert tags["reprobuild.threads"].isdigit()
        assert tags["reprobuild.cpu.mode"] == "native"
        assert tags["reprobuild.cpu.model"]
        # the run id and the record with or without REPRO_RUN_DIR (seed 12: the default place)
        run_record = f"run-{tags['reprobuild.run_id']}.json"
        logged = sorted(a.path for a in client.list_artifacts(run_id, mlflowtags.ARTIFACT_DIR))
        assert logged == ["reprobuild/manifest.json", f"reprobuild/{run_record}"]
        local = client.download_artifacts(run_id, f"reprobuild/{run_record}", str(tmp_path))
        record = json.loads(Path(local).read_text())
        assert record["run_id"] == tags["reprobuild.run_id"]
        assert record["determinism"]["seed"] == int(seed)
        metric = client.get_metric_history(run_id, "loss")
        assert len(metric) == 5
    assert runs["11"] != runs["12"]


def test_a_run_that_autolog_opens_is_tagged_too(
    image: dict[str, Any], server: str, docker_client: DockerClient
) -> None:
    """``mlflow.autolog()`` and a scikit-learn ``fit``: MLflow opens (and ends) the run itself,
    the program never calls ``start_run``; the run still carries the stack and, uploaded at
    exit to the run that ended last, the manifest and run record."""
    import mlflow

    env = {"MLFLOW_TRACKING_URI": server, "REPRO_SEED": "13", "REPRO_IMAGE": image["id"]}
    command = ["python", "train_autolog.py"]
    status, out, err = _finish(_start(docker_client, image["tag"], command, env))
    assert status == 0, err[-3000:]
    assert "reprobuild: MLflow" not in err
    run = mlflow.MlflowClient(server).get_run(out.split()[-1])
    tags = run.data.tags
    assert tags["reprobuild.seed"] == "13"
    assert tags["reprobuild.image.ref"] == image["id"]
    assert tags["reprobuild.manifest_sha256"] == image["labels"]["io.reprobuild.manifest.sha256"]
    assert run.data.params["C"] == "1.0"  # autolog's own: LogisticRegression's parameters
    assert tags.get("estimator_name") == "LogisticRegression"
    logged = mlflow.MlflowClient(server).list_artifacts(run.info.run_id, mlflowtags.ARTIFACT_DIR)
    assert "reprobuild/manifest.json" in {a.path for a in logged}


def test_diff_compares_two_mlflow_runs_like_their_run_records(
    server: str, runs: dict[str, str]
) -> None:
    env = {**os.environ, "MLFLOW_TRACKING_URI": server}
    proc = run_cli("diff", f"runs:/{runs['11']}", runs["12"], "--json", env=env)
    assert proc.returncode == 1, proc.stderr[-3000:]
    report = json.loads(proc.stdout)
    assert report["a"]["source"] == f"runs:/{runs['11']}"
    seeds = [d for d in report["differences"] if d["key"] == "seed"]
    assert seeds and (seeds[0]["a"], seeds[0]["b"]) == (11, 12), report["differences"]
    same = run_cli("diff", f"runs:/{runs['11']}", f"runs:/{runs['11']}", env=env)
    assert same.returncode == 0, same.stdout + same.stderr


def test_a_tracking_server_gone_before_exit_costs_one_line_and_bounded_time(
    image: dict[str, Any], tmp_path: Path, docker_client: DockerClient
) -> None:
    """The run's server stops while the program runs: the program still exits 0, the
    artifact upload at exit gives up with one warning line, within its bound. (MLflow's own
    calls are told not to retry, as a user would for a flaky server.)"""
    env = {"MLFLOW_HTTP_REQUEST_MAX_RETRIES": "0", "MLFLOW_HTTP_REQUEST_TIMEOUT": "60"}
    with tracking_server(tmp_path / "server") as url:
        container = _start(
            docker_client,
            image["tag"],
            ["python", "train_wait.py"],
            {**env, "MLFLOW_TRACKING_URI": url},
        )
        deadline = time.monotonic() + 180
        while not container.logs(stdout=True, stderr=False).strip():
            container.reload()
            assert container.status == "running", container.logs().decode()[-3000:]
            assert time.monotonic() < deadline, "the run did not start"
            time.sleep(0.5)
    started = time.monotonic()
    container.exec_run(["touch", "/tmp/go"])
    status, _, err = _finish(container)
    elapsed = time.monotonic() - started
    assert status == 0, err[-3000:]
    ours = [line for line in err.splitlines() if line.startswith("reprobuild: MLflow")]
    assert len(ours) == 1 and "not logged as an artifact" in ours[0], err[-3000:]
    assert elapsed < mlflowtags.UPLOAD_TIMEOUT_S + 20


VERIFIED = """
import mlflow
with mlflow.start_run():
    for step in range(3):
        mlflow.log_metric("loss", 1.0 / (step + 1), step=step)
        print("step", step, "loss", 1.0 / (step + 1))
"""


def _bridge_address(client: DockerClient) -> str:
    """The host's address on the engine's default bridge: what its containers reach it at."""
    config = client.networks.get("bridge").attrs["IPAM"]["Config"][0]
    return str(config.get("Gateway") or next(ipaddress.ip_network(config["Subnet"]).hosts()))


def test_verify_mlflow_in_image_mode_tags_both_runs(
    image: dict[str, Any], tmp_path: Path, docker_client: DockerClient
) -> None:
    """``verify IMAGE --network --mlflow``: the server listens on the Docker bridge's address,
    which both the containers (on the bridge) and verify (on the host) reach; each container's
    run is tagged with the stack, and verify finds both by their run record's id and tags
    them with the verdict."""
    import mlflow

    with tracking_server(tmp_path / "server", host=_bridge_address(docker_client)) as url:
        env = {**os.environ, "MLFLOW_TRACKING_URI": url, "GIT_PYTHON_REFRESH": "quiet"}
        env["MLFLOW_DISABLE_TELEMETRY"] = "true"  # (see QUIET)
        report = tmp_path / "report.json"
        args = ("verify", image["tag"], "--network", "--mlflow", "--report", str(report), "-q")
        proc = run_cli(*args, "--", "python", "-c", VERIFIED, env=env, timeout=600)
        assert proc.returncode == 0, proc.stdout + proc.stderr[-3000:]
        runs = mlflow.MlflowClient(url).search_runs(["0"])
        assert len(runs) == 2, proc.stderr[-3000:]
        records = {r["run_record"]["run_id"] for r in json.loads(report.read_text())["runs"]}
        assert {r.data.tags["reprobuild.run_id"] for r in runs} == records
        assert {r.data.tags["reprobuild.image.ref"] for r in runs} == {image["id"]}
        assert {r.data.tags.get("reprobuild.verify.result") for r in runs} == {"identical"}
        assert "mlflow: verdict 'identical' logged to 2 run(s)" in proc.stderr
