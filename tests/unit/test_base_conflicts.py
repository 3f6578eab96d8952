"""What a GPU image's lock may not change in its base (reprobuild.imaging.image.
check_base_conflicts): the stack the base was built and tested with (NGC's torch, its CUDA
libraries), and what its pip constraint pins; not the installer's own tools, which every
Python base carries (Debian's python3-pip brings pip, setuptools and wheel) and which a venv
shadows without touching the base (issue 51: a uv or Poetry lock whose torch brings CUDA as
wheels pins setuptools, and was refused on a plain Debian base)."""

from __future__ import annotations

from pathlib import Path
from typing import Any, Literal

import pytest

from reprobuild.bases.refs import parse_pinned
from reprobuild.errors import LockfileError
from reprobuild.imaging.image import INSTALLER_TOOLS, check_base_conflicts
from reprobuild.imaging.render import RenderSpec
from reprobuild.locks.lockfile import load_lock

HASH = "--hash=sha256:" + "ab" * 32


def spec(
    tmp_path: Path, pins: dict[str, str], variant: Literal["cpu", "gpu"] = "gpu"
) -> RenderSpec:
    lock = tmp_path / "requirements.lock"
    lock.write_text("".join(f"{name}=={version} {HASH}\n" for name, version in pins.items()))
    return RenderSpec(
        name="example/guard",
        variant=variant,
        base=parse_pinned("debian-python:3.11@sha256:" + "cd" * 32),
        lock=load_lock(lock),
        seed=0,
        determinism="strict",
        builder_version="0",
    )


def probe(dists: dict[str, str], constraint: dict[str, str] | None = None) -> dict[str, Any]:
    out: dict[str, Any] = {
        "distributions": [{"name": n, "version": v} for n, v in dists.items()],
    }
    if constraint is not None:
        out["pip_constraint"] = {"path": "/etc/pip/constraint.txt", "pins": constraint}
    return out


DEBIAN_BASE = {"pip": "23.0.1", "setuptools": "66.1.1", "wheel": "0.38.4"}


def test_a_lock_may_pin_its_own_installer_tools_over_a_plain_bases(tmp_path: Path) -> None:
    pins = {"setuptools": "80.9.0", "pip": "25.1", "wheel": "0.45.1", "torch": "2.9.1"}
    check_base_conflicts(spec(tmp_path, pins), probe(DEBIAN_BASE))  # no error
    assert {"pip", "setuptools", "wheel"} == INSTALLER_TOOLS


def test_the_bases_own_stack_is_still_guarded(tmp_path: Path) -> None:
    pins = {"setuptools": "80.9.0", "torch": "2.9.1"}
    with pytest.raises(LockfileError) as info:
        check_base_conflicts(spec(tmp_path, pins), probe({**DEBIAN_BASE, "torch": "2.6.0a0"}))
    assert "torch==2.9.1 would replace the base's torch 2.6.0a0" in info.value.message
    assert info.value.line == 2  # the lock's line is named


def test_a_bases_pip_constraint_on_an_installer_tool_still_holds(tmp_path: Path) -> None:
    pins = {"setuptools": "80.9.0"}
    with pytest.raises(LockfileError) as info:
        check_base_conflicts(spec(tmp_path, pins), probe(DEBIAN_BASE, {"setuptools": "70.0.0"}))
    assert "conflicts with the base's pip constraint setuptools==70.0.0" in info.value.message


def test_a_cpu_image_is_not_guarded(tmp_path: Path) -> None:
    pins = {"torch": "2.9.1"}
    check_base_conflicts(spec(tmp_path, pins, variant="cpu"), probe({"torch": "2.6.0"}))
