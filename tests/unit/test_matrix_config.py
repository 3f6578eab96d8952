"""The `matrix:` key of reprobuild.yaml: each variant field, its defaults, and every refusal,
checked by its whole message (the file, the variant and the bad value, and what is allowed)."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import pytest
import yaml

from reprobuild.errors import ConfigError, ReprobuildError
from reprobuild.project.config import (
    DEFAULT_RUNNER_CPU,
    DEFAULT_RUNNER_GPU,
    ProjectConfig,
    Variant,
    load_config,
    select_variant,
)

LOCK_TEXT = "six==1.17.0 --hash=sha256:" + "0" * 64 + "\n"
PINNED_GPU = "registry.example.com:5000/nvidia/pytorch:25.01-py3@sha256:" + "cd" * 32
PINNED_OTHER = "registry.example.com:5000/nvidia/pytorch:25.03-py3@sha256:" + "ef" * 32


def write_project(tmp_path: Path, data: dict[str, Any]) -> Path:
    root = tmp_path / "proj"
    root.mkdir(parents=True)
    for name in ("requirements.lock", "gpu.lock", "tf.lock"):
        (root / name).write_text(LOCK_TEXT)
    (root / "reprobuild.yaml").write_text(yaml.safe_dump(data, sort_keys=False))
    return root


def base_data(**over: Any) -> dict[str, Any]:
    data: dict[str, Any] = {
        "name": "team/demo",
        "lock": "requirements.lock",
        "base": {"cpu": "python-3.11-slim-bookworm"},
    }
    data.update(over)
    return data


def load(tmp_path: Path, matrix: object, **over: Any) -> ProjectConfig:
    return load_config(write_project(tmp_path, base_data(matrix=matrix, **over)))


def refused(tmp_path: Path, matrix: object, **over: Any) -> str:
    with pytest.raises(ConfigError) as info:
        load(tmp_path, matrix, **over)
    # Every message names the file and the line of the value it refuses.
    path = re.escape(str(tmp_path.resolve() / "proj" / "reprobuild.yaml"))
    where = re.match(path + r":[0-9]+: ", info.value.message)
    assert where is not None, info.value.message
    return info.value.message[where.end() :]


# --------------------------------------------------------------------------- valid matrices


def test_variant_defaults_come_from_the_top_level_keys(tmp_path: Path) -> None:
    config = load(
        tmp_path,
        [{"name": "cpu"}, {"name": "gpu", "gpu": True}],
        gpu_lock="gpu.lock",
        base={"cpu": "python-3.11-slim-bookworm", "gpu": PINNED_GPU},
    )
    root = config.root
    assert config.matrix == (
        Variant(
            "cpu", False, root / "requirements.lock", "python-3.11-slim-bookworm", ("ubuntu-24.04",)
        ),
        Variant("gpu", True, root / "gpu.lock", PINNED_GPU, ("self-hosted", "linux", "x64", "gpu")),
    )
    assert config.variants == config.matrix
    assert DEFAULT_RUNNER_CPU == ("ubuntu-24.04",)
    assert DEFAULT_RUNNER_GPU == ("self-hosted", "linux", "x64", "gpu")


def test_every_variant_field_given(tmp_path: Path) -> None:
    config = load(
        tmp_path,
        [
            {"name": "cpu-tf", "lock": "tf.lock", "runner": "ubuntu-22.04"},
            {
                "name": "gpu-25.03",
                "gpu": True,
                "lock": "gpu.lock",
                "base": PINNED_OTHER,
                "runner": ["self-hosted", "gpu", "h100"],
            },
        ],
    )
    cpu, gpu = config.matrix
    assert cpu == Variant(
        "cpu-tf", False, config.root / "tf.lock", "python-3.11-slim-bookworm", ("ubuntu-22.04",)
    )
    assert gpu == Variant(
        "gpu-25.03", True, config.root / "gpu.lock", PINNED_OTHER, ("self-hosted", "gpu", "h100")
    )
    assert gpu.kind == "gpu" and cpu.kind == "cpu"


def test_no_matrix_means_implicit_cpu_and_gpu_variants(tmp_path: Path) -> None:
    plain = load_config(write_project(tmp_path / "a", base_data()))
    assert plain.matrix == ()
    assert [v.name for v in plain.variants] == ["cpu"]
    both = load_config(
        write_project(
            tmp_path / "b",
            base_data(
                gpu_lock="gpu.lock", base={"cpu": "python-3.11-slim-bookworm", "gpu": PINNED_GPU}
            ),
        )
    )
    cpu, gpu = both.variants
    assert (cpu.name, cpu.lock, cpu.base, cpu.runner) == (
        "cpu",
        both.lock,
        both.base_cpu,
        DEFAULT_RUNNER_CPU,
    )
    assert (gpu.name, gpu.gpu, gpu.lock, gpu.base, gpu.runner) == (
        "gpu",
        True,
        both.gpu_lock,
        PINNED_GPU,
        DEFAULT_RUNNER_GPU,
    )
    # a gpu_lock without base.gpu (built with --gpu --base ...) is no implicit variant
    half = load_config(write_project(tmp_path / "c", base_data(gpu_lock="gpu.lock")))
    assert [v.name for v in half.variants] == ["cpu"]


def test_variant_lookup_and_the_config_it_selects(tmp_path: Path) -> None:
    config = load(
        tmp_path,
        [{"name": "cpu-tf", "lock": "tf.lock"}, {"name": "gpu", "gpu": True, "lock": "gpu.lock"}],
        base={"cpu": "python-3.11-slim-bookworm", "gpu": PINNED_GPU},
    )
    selected, gpu = select_variant(config, "cpu-tf")
    assert not gpu
    assert (selected.lock, selected.base_cpu) == (
        config.root / "tf.lock",
        "python-3.11-slim-bookworm",
    )
    selected, gpu = select_variant(config, "gpu", gpu=True)  # --gpu that agrees is fine
    assert gpu
    assert (selected.gpu_lock, selected.base_gpu) == (config.root / "gpu.lock", PINNED_GPU)

    with pytest.raises(ConfigError) as info:
        config.variant("tf")
    assert info.value.message == (
        f"{config.config_path}: no variant 'tf'; known variants: cpu-tf, gpu"
    )
    with pytest.raises(ReprobuildError) as conflict:
        select_variant(config, "cpu-tf", gpu=True)
    assert conflict.value.message == "--gpu conflicts with --variant cpu-tf, a CPU variant"


# --------------------------------------------------------------------------- refusals

NAME_RULE = (
    "is not a valid variant name: lowercase letters and digits, then also . _ - "
    "(at most 32 characters; it becomes part of a tag)"
)


@pytest.mark.parametrize(
    ("matrix", "message"),
    [
        (
            {"name": "cpu"},
            "matrix must be a non-empty list of variants, each a mapping with a name, "
            "got a mapping",
        ),
        (
            [],
            "matrix must be a non-empty list of variants, each a mapping with a name, "
            "got an empty list",
        ),
        (["cpu"], "matrix[0] must be a mapping with a name (got a string, 'cpu')"),
        ([{"gpu": True}], f"matrix[0]: name None {NAME_RULE}, got nothing"),
        ([{"name": "cpu"}, {"name": "CPU"}], f"matrix[1]: name 'CPU' {NAME_RULE}"),
        ([{"name": "-cpu"}], f"matrix[0]: name '-cpu' {NAME_RULE}"),
        ([{"name": "cpu/tf"}], f"matrix[0]: name 'cpu/tf' {NAME_RULE}"),
        ([{"name": "cpu tf"}], f"matrix[0]: name 'cpu tf' {NAME_RULE}"),
        ([{"name": 7}], f"matrix[0]: name 7 {NAME_RULE}, got an integer"),
        ([{"name": "x" * 33}], f"matrix[0]: name {'x' * 33!r} {NAME_RULE}"),
        (
            [{"name": "cpu", "tag": "latest"}],
            "matrix variant 'cpu': unknown key 'tag'; allowed keys: name, gpu, lock, base, runner",
        ),
        ([{"name": "cpu"}, {"name": "cpu"}], "matrix variant 'cpu' is listed twice"),
        (
            [{"name": "g", "gpu": "yes"}],
            "matrix variant 'g': gpu 'yes' must be true or false, got a string",
        ),
        (
            [{"name": "cpu", "lock": "nope.lock"}],
            "matrix variant 'cpu': lock 'nope.lock' does not exist",
        ),
        (
            [{"name": "cpu", "lock": "../requirements.lock"}],
            "matrix variant 'cpu': lock '../requirements.lock' must be a relative path inside "
            "the project (letters, digits, . _ - / only; no '..')",
        ),
        (
            [{"name": "cpu", "lock": 3}],
            "matrix variant 'cpu': lock must be a path to a lockfile, got an integer",
        ),
        (
            [{"name": "g", "gpu": True, "base": PINNED_GPU}],
            "matrix variant 'g': no lock: give the variant a lock, or set the top-level gpu_lock",
        ),
        (
            [{"name": "g", "gpu": True, "lock": "gpu.lock"}],
            "matrix variant 'g': no base: give the variant a base, or set base.gpu",
        ),
        (
            [{"name": "cpu", "base": ["python"]}],
            "matrix variant 'cpu': base ['python'] must be a catalog name or NAME@sha256:<64 hex>"
            ", got a list",
        ),
        (
            [{"name": "cpu", "base": " "}],
            "matrix variant 'cpu': base ' ' must be a catalog name or NAME@sha256:<64 hex>",
        ),
        (
            [{"name": "cpu", "runner": []}],
            "matrix variant 'cpu': runner must be a runner label or a non-empty list of labels"
            ", got an empty list",
        ),
        (
            [{"name": "cpu", "runner": {"group": "gpus"}}],
            "matrix variant 'cpu': runner must be a runner label or a non-empty list of labels"
            ", got a mapping",
        ),
        (
            [{"name": "cpu", "runner": ["self-hosted", "gpu; rm -rf /"]}],
            "matrix variant 'cpu': runner label 'gpu; rm -rf /' must be letters, digits and "
            ". _ - (e.g. ubuntu-24.04, or [self-hosted, linux, x64, gpu])",
        ),
        (
            [{"name": "cpu", "runner": ["gpu", "gpu"]}],
            "matrix variant 'cpu': runner lists a label twice: ['gpu', 'gpu']",
        ),
    ],
)
def test_bad_matrix_is_refused_naming_the_variant_and_value(
    tmp_path: Path, matrix: object, message: str
) -> None:
    assert refused(tmp_path, matrix) == message


def test_gpu_variant_without_base_gpu_when_only_cpu_base_is_set(tmp_path: Path) -> None:
    # base.cpu is never a GPU variant's default: a GPU build needs a GPU base
    assert refused(tmp_path, [{"name": "gpu", "gpu": True}], gpu_lock="gpu.lock") == (
        "matrix variant 'gpu': no base: give the variant a base, or set base.gpu"
    )


def test_cpu_variant_without_any_cpu_base(tmp_path: Path) -> None:
    assert refused(tmp_path, [{"name": "cpu"}], base={"gpu": PINNED_GPU}) == (
        "matrix variant 'cpu': no base: give the variant a base, or set base.cpu"
    )
