"""The GPU build path on a stand-in for an NGC base (FIXTURE: tests/data/ngc-standin; it
follows NGC's conventions but is not NVIDIA's image and has no CUDA). CI has no GPU: this
covers what the build does with such a base: the venv sees the base's framework, the base's
pip constraint and packages are respected, and its entrypoint is chained."""

from __future__ import annotations

import contextlib
import io
import json
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Any

import docker.errors
import pytest

from helpers import DATA, MakeTag, build_json, published_image, run_cli, tar_context

if TYPE_CHECKING:
    from docker import DockerClient

pytestmark = [pytest.mark.engine, pytest.mark.registry]
STANDIN = DATA / "ngc-standin"
TORCH_CPU = (
    "torch==2.13.0+cpu "
    "--hash=sha256:6746dbcbeb526eb61330b76b41ff1b4eb848951103a892eeb080dfa2b264667b\n"
)
IDNA_310 = (
    "idna==3.10 --hash=sha256:946d195a0d259cbba61165e88e65941f16e9b36ea6ddb97f00452bae8b1287d3\n"
)
ALLOW_CPU = {"REPRO_ALLOW_CPU": "1", "REPRO_QUIET": "1"}


def _context(base_ref: str) -> io.BytesIO:
    dockerfile = (STANDIN / "Dockerfile.in").read_text().replace("{base}", base_ref)
    files = {"Dockerfile": (dockerfile.encode(), 0o644)}
    for path in sorted(STANDIN.rglob("*")):
        if path.is_file() and path.name != "Dockerfile.in":
            files[str(path.relative_to(STANDIN))] = (path.read_bytes(), path.stat().st_mode & 0o777)
    return tar_context(files)


@pytest.fixture(scope="module")
def standin(base_ref: str, docker_client: DockerClient) -> Iterator[str]:
    """Build the stand-in and publish it to the loopback registry, so it has a digest."""
    with published_image(docker_client, _context(base_ref), "ngc-standin") as ref:
        yield ref


@pytest.fixture(scope="module")
def gpu_image(
    standin: str, docker_client: DockerClient, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[tuple[str, dict[str, Any]]]:
    import shutil

    root = tmp_path_factory.mktemp("gpu") / "tiny-gpu"
    shutil.copytree(DATA / "projects" / "tiny-gpu", root)
    tag = f"reprobuild-test/tiny-gpu:{uuid.uuid4().hex[:12]}"
    try:
        result = build_json(str(root), "--gpu", "--base", standin, "--tag", tag)
        yield tag, result
    finally:
        with contextlib.suppress(docker.errors.ImageNotFound):
            docker_client.images.remove(tag, force=True)


def test_venv_sees_the_base_framework_and_holds_the_lock(
    gpu_image: tuple[str, dict[str, Any]],
) -> None:
    _tag, result = gpu_image
    dists = {d["name"]: d for d in result["manifest"]["distributions"]}
    assert dists["torch"] == {
        "name": "torch",
        "version": "2.6.0a0+ecf3bae40a.nv25.1",
        "origin": "base",
    }
    assert dists["six"] == {"name": "six", "version": "1.17.0", "origin": "lock"}
    assert result["manifest"]["variant"] == "gpu"


def test_gpu_image_chains_the_ngc_entrypoint_and_sets_gpu_knobs(
    gpu_image: tuple[str, dict[str, Any]], docker_client: DockerClient
) -> None:
    tag, _ = gpu_image
    # The stub torch is only a distribution to see, not a framework to import.
    show = (
        "import os, importlib.metadata as m; print(m.version('torch'), "
        "*(os.environ.get(k) for k in ('NGC_STANDIN_ENTRYPOINT_RAN', "
        "'CUBLAS_WORKSPACE_CONFIG', 'TORCH_ALLOW_TF32_CUBLAS_OVERRIDE', "
        "'NVIDIA_TF32_OVERRIDE')))"
    )
    container = docker_client.containers.run(
        tag, ["python", "-c", show], environment=ALLOW_CPU, detach=True, network_disabled=True
    )
    try:
        assert container.wait(timeout=120)["StatusCode"] == 0, container.logs().decode()
        out = container.logs(stdout=True, stderr=False).decode().split()
        err = container.logs(stdout=False, stderr=True).decode()
    finally:
        container.remove(force=True)
    assert out == ["2.6.0a0+ecf3bae40a.nv25.1", "1", ":4096:8", "0", "0"]
    assert "== NGC stand-in (fixture) ==" in err


def _gpu_project(tmp_path: Path, lock_text: str) -> Path:
    import shutil

    root = tmp_path / "tiny-gpu"
    shutil.copytree(DATA / "projects" / "tiny-gpu", root)
    (root / "requirements-gpu.lock").write_text(lock_text)
    return root


@pytest.mark.parametrize(
    ("lock", "expected"),
    [
        (
            TORCH_CPU,
            "requirements-gpu.lock:1: torch==2.13.0+cpu would replace the base's torch "
            "2.6.0a0+ecf3bae40a.nv25.1",
        ),
        (
            IDNA_310,
            "requirements-gpu.lock:1: idna==3.10 conflicts with the base's pip constraint "
            "idna==3.9 (/etc/pip/constraint.txt)",
        ),
    ],
    ids=["replaces-base-torch", "breaks-constraint"],
)
def test_lock_that_fights_the_base_is_refused_before_building(
    standin: str, tmp_path: Path, docker_client: DockerClient, lock: str, expected: str
) -> None:
    tag = f"reprobuild-test/refused:{uuid.uuid4().hex[:8]}"
    proc = run_cli(
        "image", str(_gpu_project(tmp_path, lock)), "--gpu", "--base", standin, "--tag", tag, "-q"
    )
    assert proc.returncode == 1
    error = proc.stderr.strip().splitlines()[0]
    assert error.startswith("error: ") and expected in error, proc.stderr
    assert "hint: " in proc.stderr
    with pytest.raises(docker.errors.ImageNotFound):
        docker_client.images.get(tag)


def test_manifest_and_labels_record_the_stack(
    gpu_image: tuple[str, dict[str, Any]], docker_client: DockerClient
) -> None:
    import hashlib

    from reprobuild_entrypoint.drivercheck import required_driver

    tag, result = gpu_image
    manifest = result["manifest"]
    need = required_driver("12.6.3.004")
    assert need is not None
    assert manifest["gpu"] == {
        "cuda": "12.6.3.004",
        "stack": "base",  # NGC's conventions: the base declares its CUDA
        "driver_min": need.driver_min,
        "driver_min_compat": need.driver_min_compat,
        "driver_source": need.source,
    }
    declared = manifest["stack"]["declared"]
    assert declared["cudnn"] == "9.6.0.74"
    assert declared["nccl"] == "2.23.4"
    assert declared["ngc_release"] == "25.01"
    constraint = (STANDIN / "constraint.txt").read_bytes()
    assert manifest["stack"]["pip_constraint"] == {
        "path": "/etc/pip/constraint.txt",
        "sha256": hashlib.sha256(constraint).hexdigest(),
    }
    labels = docker_client.images.get(tag).attrs["Config"]["Labels"]
    assert labels["io.reprobuild.cuda"] == "12.6.3.004"
    assert labels["io.reprobuild.cudnn"] == "9.6.0.74"
    assert labels["io.reprobuild.nccl"] == "2.23.4"
    assert labels["io.reprobuild.torch"] == "2.6.0a0+ecf3bae40a.nv25.1"
    assert labels["io.reprobuild.driver.min"] == need.driver_min
    # the SBOM names the stack too: CUDA, cuDNN, NCCL as declared; the base's torch, unhashed
    from reprobuild.backends.engine import Engine
    from reprobuild.checks.sbom import read_sbom

    sbom = {c["bom-ref"]: c for c in json.loads(read_sbom(Engine(), tag))["components"]}
    assert [sbom[f"nvidia-{k}"]["version"] for k in ("cuda", "cudnn", "nccl")] == [
        "12.6.3.004", "9.6.0.74", "2.23.4",
    ]  # fmt: skip
    torch = sbom["base:pkg:pypi/torch@2.6.0a0%2Becf3bae40a.nv25.1"]
    assert "hashes" not in torch and torch["properties"][0]["value"] == "base"


def test_gpu_image_without_a_gpu_refuses_in_strict(
    gpu_image: tuple[str, dict[str, Any]], docker_client: DockerClient
) -> None:
    tag, _ = gpu_image
    container = docker_client.containers.run(
        tag,
        ["python", "-c", "print('ran')"],
        environment={"REPRO_QUIET": "1"},
        detach=True,
        network_disabled=True,
    )
    try:
        code = container.wait(timeout=120)["StatusCode"]
        out = container.logs(stdout=True, stderr=False).decode()
        err = container.logs(stdout=False, stderr=True).decode()
    finally:
        container.remove(force=True)
    assert code == 3, err
    assert out == ""
    assert "no NVIDIA GPU is visible in this GPU image" in err


# ------------------------------------------------------------ catalog refresh and base lock


def _standin_tag(docker_client: DockerClient, standin: str) -> str:
    repo = standin.split("@", 1)[0]
    [tag] = [t for t in docker_client.images.get(standin).tags if t.startswith(repo + ":")]
    return str(tag)


def test_resolve_refresh_reads_the_standin_from_the_registry(
    standin: str, docker_client: DockerClient, tmp_path: Path
) -> None:
    """A catalog entry with a stale digest and stale versions, refreshed from the loopback
    registry: the digest from the Registry API, the versions from the image's own config."""
    from reprobuild.bases.catalog import load_catalog, parse_catalog, write_catalog

    stale = "sha256:" + "00" * 32
    fact = {"value": "0.0", "source": "stale"}
    catalog = parse_catalog(
        {
            "schema_version": 2,
            "bases": {
                "standin": {
                    "kind": "gpu",
                    "ref": f"{_standin_tag(docker_client, standin)}@{stale}",
                    "platform": "linux/amd64",
                    "entrypoint": [],
                    "source": "stale",
                    "verified": False,
                    "versions": {
                        k: fact for k in ("python", "cuda", "cudnn", "nccl", "torch", "driver_min")
                    },
                }
            },
        },
        "t",
    )
    path = tmp_path / "catalog.yaml"
    write_catalog(path, catalog)
    proc = run_cli("resolve", "--refresh", "standin", "--catalog", str(path), "--json")
    assert proc.returncode == 0, proc.stderr
    report = json.loads(proc.stdout)
    assert report["written"] is True
    entry = load_catalog(path).get("standin")
    assert entry.ref.digest == standin.split("@", 1)[1] != stale
    assert entry.verified
    assert entry.entrypoint == ("/opt/nvidia/nvidia_entrypoint.sh",)
    assert entry.version("cuda") == "12.6.3.004"  # ENV CUDA_VERSION, not the 9.0 label
    assert entry.version("cudnn") == "9.6.0.74"
    assert entry.version("nccl") == "2.23.4"
    assert entry.version("torch") == "2.6.0a0+ecf3bae40a.nv25.1"
    assert entry.version("ngc_release") == "25.01"
    assert entry.version("driver_min") not in (None, "0.0")
    assert entry.version("python") == "0.0"  # the stand-in declares no Python: kept as it was
    fields = {c["field"] for c in report["changes"]}
    assert {"digest", "cuda", "entrypoint", "verified"} <= fields
    # a second refresh finds nothing to change
    again = run_cli("resolve", "--refresh", "standin", "--catalog", str(path), "--dry-run")
    assert again.returncode == 0, again.stderr
    assert "unchanged" in again.stdout


def test_a_locked_catalog_name_builds_on_its_locked_digest(
    standin: str, docker_client: DockerClient, tmp_path: Path, unique_tag: MakeTag
) -> None:
    """base.gpu names a base the project's reprobuild.bases.lock pins (here one no catalog
    ships): the build uses the locked digest and the locked entrypoint, no --base needed."""
    import shutil

    root = tmp_path / "tiny-gpu"
    shutil.copytree(DATA / "projects" / "tiny-gpu", root)
    config = root / "reprobuild.yaml"
    config.write_text(config.read_text().replace("base:\n", "base:\n  gpu: standin-25.01\n"))
    lock = json.loads((root / "reprobuild.bases.lock").read_text())
    lock["bases"]["standin-25.01"] = {
        "ref": standin,
        "platform": "linux/amd64",
        "entrypoint": ["/opt/nvidia/nvidia_entrypoint.sh"],
        "versions": {},
        "locked_by": "test",
    }
    (root / "reprobuild.bases.lock").write_text(json.dumps(lock))
    tag = unique_tag("tiny-gpu-locked")
    result = build_json(str(root), "--gpu", "--tag", tag)
    manifest = result["manifest"]
    assert isinstance(manifest, dict)
    assert manifest["base_digest"] == standin.split("@", 1)[1]
    labels = docker_client.images.get(tag).labels
    assert labels["org.opencontainers.image.base.digest"] == standin.split("@", 1)[1]
    env = docker_client.images.get(tag).attrs["Config"]["Env"]
    assert 'REPROBUILD_BASE_ENTRYPOINT=["/opt/nvidia/nvidia_entrypoint.sh"]' in env
