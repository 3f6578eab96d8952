"""``cpu:`` in reprobuild.yaml (issue 31): the image's default CPU mode, validated, and baked
into the image's environment with its pins (native images render exactly as before)."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from helpers import DATA
from reprobuild.bases.refs import parse_pinned
from reprobuild.errors import ConfigError
from reprobuild.imaging.render import RenderSpec, render_dockerfile
from reprobuild.locks.lockfile import load_lock
from reprobuild.project.config import ProjectConfig, load_config

MINIMAL = {
    "name": "demo",
    "lock": "requirements.lock",
    "base": {"cpu": "python-3.11-slim-bookworm"},
}


def config_with(tmp_path: Path, **values: object) -> ProjectConfig:
    root = tmp_path / "proj"
    root.mkdir()
    (root / "requirements.lock").write_text("six==1.17.0 --hash=sha256:" + "0" * 64 + "\n")
    (root / "reprobuild.yaml").write_text(yaml.safe_dump({**MINIMAL, **values}))
    return load_config(root)


def refused(tmp_path: Path, **values: object) -> ConfigError:
    with pytest.raises(ConfigError) as info:
        config_with(tmp_path, **values)
    return info.value


def spec(**over: object) -> RenderSpec:
    values: dict[str, object] = {
        "name": "tiny",
        "variant": "cpu",
        "base": parse_pinned("python:3.11-slim-bookworm@sha256:" + "ab" * 32),
        "lock": load_lock(DATA / "projects" / "tiny" / "requirements.lock"),
        "seed": 0,
        "determinism": "strict",
        "builder_version": "0.1.0",
        "epoch": 1700000000,
    }
    values.update(over)
    return RenderSpec(**values)  # type: ignore[arg-type]


@pytest.mark.parametrize("cpu", ["native", "portable", "x86-64-v2", "x86-64-v3"])
def test_valid_cpu(tmp_path: Path, cpu: str) -> None:
    assert config_with(tmp_path, cpu=cpu).cpu == cpu


def test_cpu_defaults_to_native(tmp_path: Path) -> None:
    assert config_with(tmp_path).cpu == "native"


@pytest.mark.parametrize("cpu", ["Portable", "avx512", True, 3, ["portable"]])
def test_invalid_cpu_is_one_message_naming_the_allowed(tmp_path: Path, cpu: object) -> None:
    err = refused(tmp_path, cpu=cpu)
    assert "cpu " in err.message
    # the allowed values, then (issue 30) the type given when it is not a string
    assert "must be one of: native, portable, x86-64-v2, x86-64-v3" in err.message
    assert "\n" not in err.message


def test_a_portable_image_bakes_its_mode_and_pins() -> None:
    text = render_dockerfile(spec(cpu="portable"))
    assert 'REPROBUILD_IMAGE_CPU="portable"' in text
    assert 'ATEN_CPU_CAPABILITY="default"' in text
    assert 'NPY_DISABLE_CPU_FEATURES="X86_V3 X86_V4 AVX512_ICL AVX512_SPR"' in text
    assert 'MKL_CBWR="COMPATIBLE"' in text and "AUTO,STRICT" not in text
    native = render_dockerfile(spec())
    assert "REPROBUILD_IMAGE_CPU" not in native and "ATEN_CPU_CAPABILITY" not in native
    assert render_dockerfile(spec(cpu="native")) == native
