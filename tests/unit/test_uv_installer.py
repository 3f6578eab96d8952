"""Which builds uv installs the wheels of (reprobuild.imaging.image.uv_installer), and which keep
pip: uv only stands in for pip where the host's pinned binary runs on the base and decides
nothing pip would decide otherwise."""

from __future__ import annotations

import platform
from pathlib import Path
from typing import Any

import pytest

from reprobuild.bases.refs import parse_pinned
from reprobuild.imaging.image import uv_installer
from reprobuild.imaging.render import RenderSpec
from reprobuild.locks.lockfile import load_lock

LOCK = Path(__file__).parent.parent / "data" / "projects" / "tiny" / "requirements.lock"


def spec(**over: Any) -> RenderSpec:
    values: dict[str, Any] = dict(
        name="example/uv",
        variant="cpu",
        base=parse_pinned("python:3.11-slim-bookworm@sha256:" + "ab" * 32),
        lock=load_lock(LOCK),
        seed=1,
        determinism="strict",
        builder_version="0",
        mount_install=True,
    )
    values.update(over)
    return RenderSpec(**values)


def probe(
    machine: str | None = None,
    libc: str = "glibc",
    version: str = "2.36",
    dists: tuple[str, ...] = (),
    constraint: dict[str, Any] | None = None,
) -> dict[str, Any]:
    return {
        "python": {"version": "3.11.2"},
        "distributions": [{"name": n, "version": "1.0", "in_venv": False} for n in dists],
        "pip_constraint": constraint,
        "platform": {
            "machine": machine or platform.machine(),
            "libc": libc,
            "libc_version": version,
        },
    }


def test_a_hermetic_cpu_mount_install_on_the_hosts_machine_gets_the_pinned_uv() -> None:
    from uv import find_uv_bin

    assert uv_installer(spec(), probe()) == Path(find_uv_bin())
    assert uv_installer(spec(), probe(version="2.17")) is not None
    # a CPU venv sees none of the base's packages, whatever the base has
    assert uv_installer(spec(), probe(dists=("torch", "numpy"))) is not None


@pytest.mark.parametrize("dists", [(), ("pip", "setuptools", "wheel")])
def test_a_gpu_image_on_a_plain_base_gets_the_pinned_uv(dists: tuple[str, ...]) -> None:
    """The CUDA from the lock's wheels, on a plain Python base: the venv sees nothing of the
    base's but the installer's tools, so uv installs it (and it is layered) as a CPU image's."""
    assert uv_installer(spec(variant="gpu"), probe(dists=dists)) is not None


@pytest.mark.parametrize(
    ("why", "over", "probed"),
    [
        ("no RUN --mount: the classic builder's stage", {"mount_install": False}, probe()),
        ("--online: pip's index options and CA", {"online": True}, probe()),
        (
            "a GPU venv sees the base's packages (NGC's torch)",
            {"variant": "gpu"},
            probe(dists=("pip", "torch")),
        ),
        (
            "NGC's PIP_CONSTRAINT is pip's",
            {"variant": "gpu"},
            probe(constraint={"path": "/etc/pip/constraint.txt", "pins": {}}),
        ),
        ("another machine", {}, probe(machine="riscv64")),
        ("musl", {}, probe(libc="musl", version="1.2.4")),
        ("a glibc older than uv's manylinux 2.17", {}, probe(version="2.12")),
        ("no glibc version", {}, probe(version="")),
        ("no platform at all", {}, {"python": {"version": "3.11.2"}}),
    ],
)
def test_pip_stays_where_uv_cannot_stand_in(why: str, over: dict[str, Any], probed: Any) -> None:
    assert uv_installer(spec(**over), probed) is None, why
