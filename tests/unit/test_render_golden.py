"""Rendered Dockerfiles compared whole against golden files, one per variant of the template.

Refresh after an intended change, then review the diff like code:
    REPROBUILD_UPDATE_GOLDEN=1 python -m pytest tests/unit/test_render_golden.py
"""

from __future__ import annotations

import hashlib
import os
from pathlib import Path
from typing import Any

import pytest

from reprobuild.bases.catalog import load_catalog
from reprobuild.bases.refs import parse_pinned
from reprobuild.imaging.render import FileEntry, RenderSpec, render_context, render_dockerfile
from reprobuild.locks.lockfile import load_lock

GOLDEN = Path(__file__).parent.parent / "golden"
LOCK = Path(__file__).parent.parent / "data" / "projects" / "tiny" / "requirements.lock"
BASE = "python:3.11-slim-bookworm@sha256:" + "ab" * 32
PROJECTS = LOCK.parent.parent
GPU_LOCK = PROJECTS / "tiny-gpu" / "requirements-gpu.lock"
APP = {"hello.py": FileEntry(b"print('hi')\n")}
CATALOG = load_catalog()
UV_SHA256 = "ef" * 32


def spec(**over: Any) -> RenderSpec:
    values: dict[str, Any] = dict(
        name="example/golden",
        variant="cpu",
        base=parse_pinned(BASE),
        lock=load_lock(LOCK),
        seed=1234,
        determinism="strict",
        builder_version="0.0.0-golden",
        command=("python", "hello.py"),
        app_files=APP,
        epoch=1700000000,
    )
    values.update(over)
    return RenderSpec(**values)


CASES = {
    "cpu-hermetic": spec(),
    "cpu-online-ca": spec(online=True, ca_cert=b"-----BEGIN CERTIFICATE-----\n"),
    "cpu-online-no-ca": spec(online=True),
    "cpu-apt-git-no-app": spec(
        apt=("curl=7.88.1-10+deb12u12", "git=1:2.39.5-0+deb12u2"),
        app_files={},
        command=(),
        revision="0123456789abcdef" * 2 + "01234567",
        version="v1.2.3",
        determinism="warn",
    ),
    "gpu-private-registry-base-entrypoint": spec(
        variant="gpu",
        base_entrypoint=("/opt/nvidia/nvidia_entrypoint.sh",),
        base=parse_pinned("registry.example.com:5000/team/base:1@sha256:" + "cd" * 32),
    ),
    # buildah: the wheels go straight into the one stage through RUN --mount (issue 11)
    "cpu-hermetic-mount": spec(mount_install=True),
    "gpu-ngc-pytorch-25.01-mount": spec(
        variant="gpu",
        lock=load_lock(GPU_LOCK),
        base=CATALOG.get("ngc-pytorch-25.01").ref,
        base_entrypoint=CATALOG.get("ngc-pytorch-25.01").entrypoint,
        mount_install=True,
    ),
    "cpu-online-mount-keeps-the-stage": spec(online=True, mount_install=True),
    # sdists built into wheels in a stage of their own (issue 39): beside locked wheels
    # (julius beside torch) and alone (antlr4-python3-runtime, docopt), one stage and two
    "cpu-mount-sdists-and-wheels": spec(
        lock=load_lock(PROJECTS / "sdist-torch" / "uv.lock"), mount_install=True
    ),
    "cpu-mount-sdists-only": spec(
        lock=load_lock(PROJECTS / "sdist" / "uv.lock"), mount_install=True
    ),
    "cpu-sdists-stage": spec(lock=load_lock(PROJECTS / "sdist-torch" / "uv.lock")),
    # uv installs the wheels (image: a CPU mount install whose base runs the host's uv), with
    # and without built sdists
    "cpu-uv-mount": spec(mount_install=True, uv_sha256=UV_SHA256),
    "cpu-uv-mount-sdists-and-wheels": spec(
        lock=load_lock(PROJECTS / "sdist-torch" / "uv.lock"),
        mount_install=True,
        uv_sha256=UV_SHA256,
    ),
    # CUDA from the lock's wheels on a plain base: a GPU image, uv-installed and layered
    "gpu-cuda-wheels-uv-mount": spec(
        variant="gpu",
        lock=load_lock(PROJECTS / "cuda-wheels" / "requirements.lock"),
        mount_install=True,
        uv_sha256=UV_SHA256,
    ),
    # The shipped catalog's NGC entries, as a project naming them renders them: FROM by
    # digest, NGC's entrypoint chained, the GPU lock on top of the base's frameworks.
    **{
        f"gpu-{name}": spec(
            variant="gpu",
            lock=load_lock(GPU_LOCK),
            base=CATALOG.get(name).ref,
            base_entrypoint=CATALOG.get(name).entrypoint,
        )
        for name in ("ngc-pytorch-25.01", "ngc-tensorflow-25.02")
    },
}


@pytest.mark.parametrize("case", sorted(CASES))
def test_dockerfile_matches_golden(case: str) -> None:
    text = render_dockerfile(CASES[case])
    path = GOLDEN / f"{case}.Dockerfile"
    if os.environ.get("REPROBUILD_UPDATE_GOLDEN"):
        path.write_text(text)
    assert path.is_file(), f"missing golden file {path}; run with REPROBUILD_UPDATE_GOLDEN=1"
    assert text == path.read_text()


def test_render_is_byte_identical_across_calls() -> None:
    one = render_context(spec(runtime_files={"reprobuild_entrypoint/x.py": FileEntry(b"x")}))
    two = render_context(spec(runtime_files={"reprobuild_entrypoint/x.py": FileEntry(b"x")}))
    assert one == two
    assert list(one) == sorted(one)
    assert set(one) == {
        "Dockerfile",
        "requirements.lock",
        "wheels/.keep",
        "app/hello.py",
        "runtime/reprobuild_entrypoint/x.py",
    }


def test_uv_installs_only_a_hermetic_mount_install() -> None:
    """An --online build (its stage, its index options) and a build without RUN --mount keep
    pip, whatever the spec says of uv: the uv binary is only ever mounted, never copied."""
    for case in (
        spec(uv_sha256=UV_SHA256),
        spec(online=True, mount_install=True, uv_sha256=UV_SHA256),
    ):
        text = render_dockerfile(case)
        assert "/.reprobuild/bin" not in text and UV_SHA256 not in text
        assert "pip" in text
    text = render_dockerfile(spec(mount_install=True, uv_sha256=UV_SHA256))
    assert f"REPROBUILD_UV_SHA256={UV_SHA256}" in text
    assert "--mount=type=bind,source=bin,target=/.reprobuild/bin" in text
    assert "sh /.reprobuild/install.sh --find-links" in text and "PIP_WHEEL" not in text
    # the stages' install script is in the context, by its sha256 in the steps' text
    script = render_context(spec(mount_install=True, uv_sha256=UV_SHA256))["groups/install.sh"]
    assert "pip install --python /opt/venv/bin/python" in script.data.decode()
    assert f"REPROBUILD_INSTALL_SHA256={hashlib.sha256(script.data).hexdigest()}" in text


def test_online_context_carries_the_ca_and_no_wheels_dir() -> None:
    files = render_context(spec(online=True, ca_cert=b"PEM"))
    assert files["ca/ca.pem"].data == b"PEM"
    assert "wheels/.keep" not in files


def test_label_values_cannot_break_out_of_the_dockerfile() -> None:
    from reprobuild.errors import ReprobuildError
    from reprobuild.imaging.render import dockerfile_str

    assert dockerfile_str('a"b$c\\d') == '"a\\"b\\$c\\\\d"'
    with pytest.raises(ReprobuildError):
        dockerfile_str("line\nRUN rm -rf /")


def test_a_lock_of_sdists_only_still_gets_the_install_script() -> None:
    """The built wheels' stage runs the stages' install script too, with no group of wheels."""
    lock = load_lock(PROJECTS / "sdist" / "uv.lock")
    layered = spec(lock=lock, build_lock=lock, mount_install=True, uv_sha256=UV_SHA256)
    files = render_context(layered)
    assert [f for f in files if f.startswith("groups/")] == ["groups/install.sh"]
    assert "sh /.reprobuild/install.sh -r /.reprobuild/built.txt" in render_dockerfile(layered)
