"""CUDA from the lock's own wheels on a plain Python base (issue 38): `init` writes a GPU
image on the plain base, `image` builds it with no flag, the manifest names the CUDA the
wheels carry, and the image runs on this GPU-less machine, deterministically.

The lock (tests/data/projects/cuda-wheels) is a small stand-in for PyPI's torch and its
nvidia-* wheels: two CUDA 13 toolkit components (CUPTI, NVTX) from this machine's wheel index
beside numpy. It takes the same path as torch's 3.7 GB: nvidia-* wheels hash-checked from the
lock, no NGC base, the stack probed in the built image. Installed by uv as layers by package
(issue 52) as a CPU image is: the base is plain, so the venv sees nothing else of it."""

from __future__ import annotations

import contextlib
import json
import shutil
from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING

import docker.errors
import pytest

from helpers import DATA, MakeTag, build_json, published_image, run_cli, tar_context
from layerimage import dist_infos, image_layers, overlaps, writable_by
from reprobuild.imaging.render import UID

if TYPE_CHECKING:
    from docker import DockerClient

pytestmark = [pytest.mark.engine, pytest.mark.registry]

TRAIN = """\
import importlib.metadata as md
import numpy as np

rng = np.random.default_rng(0)
w = rng.standard_normal((48, 48))
for step in range(4):
    w = np.tanh(w @ w.T / 48.0)
    print(f"step {step} loss {float((w * w).mean()):.17g}")
print("cupti", md.version("nvidia-cuda-cupti"))
"""


def test_cuda_wheels_build_on_the_plain_base_and_run_without_a_gpu(
    base_ref: str, tmp_path: Path, unique_tag: MakeTag, docker_client: DockerClient
) -> None:
    project = tmp_path / "cuda-wheels"
    shutil.copytree(DATA / "projects" / "cuda-wheels", project)
    (project / "train.py").write_text(TRAIN)
    proc = run_cli("init", str(project), "--base", base_ref)
    assert proc.returncode == 0, proc.stderr
    assert "carries CUDA as wheels" in proc.stderr
    config = (project / "reprobuild.yaml").read_text()
    assert f"  gpu: {base_ref}" in config and "  cpu:" not in config, config
    tag, again = unique_tag("cuda-wheels"), unique_tag("cuda-wheels")
    try:
        built = build_json(str(project), "--tag", tag)  # no --gpu: the project builds one image
        manifest = json.loads(run_cli("inspect", tag, "--json").stdout)["manifest"]
        assert manifest["variant"] == "gpu"
        assert manifest["build"]["installer"] == "uv", manifest["build"]
        # the same inputs, nothing cached: the same image
        assert build_json(str(project), "--tag", again, "--no-cache")["id"] == built["id"]
        assert manifest["gpu"]["stack"] == "wheels"
        assert manifest["gpu"]["cuda"] == "13.0"
        assert manifest["gpu"]["driver_min"]  # CUDA 13.0's floor, from the driver table
        wheels = manifest["stack"]["wheels"]
        assert wheels["cuda"]["source"] in (
            "wheel nvidia-cuda-cupti 13.0.85",
            "wheel nvidia-nvtx 13.0.85",
        )
        assert manifest["stack"]["labels"]["io.reprobuild.cuda"] == "13.0"
        labels = docker_client.images.get(tag).labels
        assert labels["io.reprobuild.driver.min"] == manifest["gpu"]["driver_min"]
        # layers by package, as a CPU image's: the CUDA wheels' group and numpy's apart, no
        # file in two layers, nothing the run user can write; the venv still sees the base's
        # site-packages, as a GPU image's does
        layers = list(image_layers(docker_client, tag))
        held = [names for layer in layers if (names := dist_infos(layer))]
        assert held == [{"nvidia_cuda_cupti", "nvidia_nvtx"}, {"numpy"}], held
        assert overlaps(layers) == []
        base = len(docker_client.images.get(base_ref).attrs["RootFS"]["Layers"])
        assert writable_by(layers[base:], UID) == []
        cfg = docker_client.containers.run(
            tag, ["cat", "/opt/venv/pyvenv.cfg"], remove=True, entrypoint=[]
        )
        assert b"include-system-site-packages = true" in cfg, cfg
        # No GPU here: the image runs on CPU (strict mode; no REPRO_ALLOW_CPU), twice alike.
        verify = run_cli("verify", tag, "--", "python", "train.py", cwd=tmp_path, timeout=900)
        assert verify.returncode == 0, verify.stderr
        assert verify.stdout.startswith("identical: 2 runs of `python train.py`"), verify.stdout
    finally:
        for name in (tag, again):
            with contextlib.suppress(docker.errors.ImageNotFound):
                docker_client.images.remove(name, force=True)


# A plain Debian base with Debian's python3-setuptools 66.1.1 (what python3-pip brings),
# recorded as that package records it in dist-packages; and a lock (as uv's and Poetry's do)
# that pins its own setuptools, from PyPI.
DEBIAN_SETUPTOOLS = "usr/lib/python3/dist-packages/setuptools-66.1.1.egg-info/PKG-INFO"
SETUPTOOLS_PIN = (
    "setuptools==80.9.0 \\\n"
    "    --hash=sha256:062d34222ad13e0cc312a4c02d73f059e86a4acbfbdea8f8f76b28c99f306922\n"
)


@pytest.fixture(scope="module")
def base_with_setuptools(base_ref: str, docker_client: DockerClient) -> Iterator[str]:
    files = {
        "Dockerfile": (f"FROM {base_ref}\nCOPY usr/ /usr/\n".encode(), 0o644),
        DEBIAN_SETUPTOOLS: (b"Metadata-Version: 2.1\nName: setuptools\nVersion: 66.1.1\n", 0o644),
    }
    with published_image(docker_client, tar_context(files), "base-debian-setuptools") as ref:
        yield ref


def test_a_cuda_wheel_lock_pins_its_own_setuptools_over_a_plain_bases(
    base_with_setuptools: str, tmp_path: Path, unique_tag: MakeTag, docker_client: DockerClient
) -> None:
    """issue 51: `poetry.lock:5646: setuptools==68.2.2 would replace the base's setuptools
    66.1.1 (...): a GPU image keeps the base's stack` on a plain Debian CPython base. The
    installer's tools are not the stack the guard keeps: the image builds, its venv holds the
    lock's setuptools, and the base's stays as it was."""
    project = tmp_path / "cuda-wheels"
    shutil.copytree(DATA / "projects" / "cuda-wheels", project)
    with (project / "requirements.lock").open("a") as fh:
        fh.write(SETUPTOOLS_PIN)
    (project / "train.py").write_text(TRAIN)
    proc = run_cli("init", str(project), "--base", base_with_setuptools)
    assert proc.returncode == 0, proc.stderr
    assert "carries CUDA as wheels" in proc.stderr
    tag = unique_tag("cuda-wheels-setuptools")
    try:
        build_json(str(project), "--tag", tag)
        manifest = json.loads(run_cli("inspect", tag, "--json").stdout)["manifest"]
        dists = {d["name"]: d for d in manifest["distributions"]}
        assert dists["setuptools"]["version"] == "80.9.0", dists["setuptools"]
        out = docker_client.containers.run(
            tag,
            ["python", "-c", "import setuptools, sys; print(setuptools.__version__, sys.prefix)"],
            remove=True,
        )
        assert out.decode().split()[0] == "80.9.0"
        base_copy = docker_client.containers.run(
            tag, ["cat", "/" + DEBIAN_SETUPTOOLS], remove=True, entrypoint=[]
        )
        assert b"Version: 66.1.1" in base_copy  # the base's own record, untouched
    finally:
        with contextlib.suppress(docker.errors.ImageNotFound):
            docker_client.images.remove(tag, force=True)


def test_loading_and_saving_images_waits_as_long_as_the_engine_takes() -> None:
    """A CUDA-wheel image is several GB: the engine answers a load only once every layer is
    unpacked, which took over docker-py's default 60 s read timeout on a loaded 2-CPU host
    (Engine 26.1.5). Image transfers go through a client with no read timeout; every other
    call keeps the default, so a hung engine is still noticed."""
    from reprobuild.backends.engine import Engine

    engine = Engine()
    assert engine.client.api.timeout == 60
    assert engine.transfer_client.api.timeout is None
    assert engine.transfer_client.ping()
