"""The GPU host check in the ENTRYPOINT, run as a child process the way a GPU image runs it:
a fake image manifest, and a fake ``nvidia-smi`` on PATH that prints a recorded sample
(tests/data/gpu). ``REPROBUILD_GPU_PROBES=nvidia-smi`` keeps a real NVML or /proc driver of
the machine out of it: no GPU needed, and a GPU would change nothing."""

from __future__ import annotations

import json
import os
import shlex
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

import reprobuild_entrypoint
from helpers import runtime_tmp
from reprobuild_entrypoint.envplan import image_env

RUNTIME_ROOT = str(Path(reprobuild_entrypoint.__file__).resolve().parent.parent)
SAMPLES = Path(__file__).resolve().parent.parent / "data" / "gpu"
PY = sys.executable
HOST_REFUSED = 3
GPU_SECTION = {"cuda": "12.6", "driver_min": "560.28.03", "driver_min_compat": "525.60.13"}
TOO_OLD = (
    "reprobuild: the host driver 535.104.05 is older than 560.28.03, which CUDA 12.6 in this "
    "image needs: upgrade the driver, or use an image built on an older NGC release (reprobuild "
    "image --gpu with base.gpu set to one); REPRO_DETERMINISM=warn runs anyway"
)
NO_GPU = (
    "reprobuild: no NVIDIA GPU is visible in this GPU image (was the container started with "
    "--gpus all?)"
)
PROGRAM = ["sh", "-c", "echo program ran"]


def gpu_image(
    tmp_path: Path,
    smi_sample: str | None,
    *,
    smi_status: int = 0,
    manifest: dict[str, Any] | None = None,
    variant: str = "gpu",
    **extra: str,
) -> dict[str, str]:
    """A GPU container's environment: the baked image ENV, a manifest, and a fake nvidia-smi
    printing ``smi_sample`` first on PATH (it also leaves a mark that it ran)."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir(exist_ok=True)
    smi = bin_dir / "nvidia-smi"
    if smi_sample is not None:
        sample = shlex.quote(str(SAMPLES / smi_sample))
        mark = shlex.quote(str(tmp_path / "smi-ran"))
        smi.write_text(f"#!/bin/sh\ntouch {mark}\ncat {sample}\nexit {smi_status}\n")
        smi.chmod(0o755)
    manifest_path = tmp_path / "manifest.json"
    document = (
        manifest
        if manifest is not None
        else {"schema_version": 1, "variant": variant, "gpu": GPU_SECTION}
    )
    manifest_path.write_text(json.dumps(document))
    return {
        "PATH": f"{bin_dir}{os.pathsep}{os.environ.get('PATH', '/usr/bin:/bin')}",
        "PYTHONPATH": RUNTIME_ROOT,
        "REPROBUILD_MANIFEST_PATH": str(manifest_path),
        "REPROBUILD_GPU_PROBES": "nvidia-smi",
        "REPROBUILD_IMAGE_SEED": "0",
        "REPROBUILD_IMAGE_DETERMINISM": "strict",
        "REPROBUILD_VARIANT": variant,
        **image_env(0, "strict", variant),
        **runtime_tmp(),
        **extra,
    }


def run(env: dict[str, str], *command: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [PY, "-m", "reprobuild_entrypoint", *(command or PROGRAM)],
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )


def record_of(run_dir: Path) -> dict[str, Any]:
    (path,) = run_dir.glob("run-*.json")
    record: dict[str, Any] = json.loads(path.read_text())
    return record


# ------------------------------------------------------------------------- driver too old


def test_strict_refuses_an_old_driver_before_the_program_runs(tmp_path: Path) -> None:
    result = run(gpu_image(tmp_path, "nvidia-smi-a100-535.csv"))
    assert result.returncode == HOST_REFUSED
    assert result.stdout == ""  # the program never started
    assert result.stderr.splitlines() == [TOO_OLD]


def test_refused_even_when_quiet(tmp_path: Path) -> None:
    result = run(gpu_image(tmp_path, "nvidia-smi-a100-535.csv", REPRO_QUIET="1"))
    assert result.returncode == HOST_REFUSED and result.stderr.splitlines() == [TOO_OLD]


def test_warn_mode_warns_and_runs(tmp_path: Path) -> None:
    env = gpu_image(tmp_path, "nvidia-smi-a100-535.csv", REPRO_DETERMINISM="warn")
    result = run(env)
    assert result.returncode == 0 and result.stdout == "program ran\n"
    warning, summary = result.stderr.splitlines()
    assert warning.startswith(
        "reprobuild: the host driver 535.104.05 is older than 560.28.03, which CUDA 12.6 in this "
        "image needs; running anyway (mode warn): upgrade the driver"
    )
    assert summary.startswith("reprobuild: seed 0, mode warn, threads 4, 2 x NVIDIA A100-SXM4")


def test_off_mode_only_records(tmp_path: Path) -> None:
    runs = tmp_path / "runs"
    env = gpu_image(
        tmp_path, "nvidia-smi-a100-535.csv", REPRO_DETERMINISM="off", REPRO_RUN_DIR=str(runs)
    )
    result = run(env)
    assert result.returncode == 0 and result.stdout == "program ran\n"
    assert "older than" not in result.stderr
    check = record_of(runs)["gpu_check"]
    assert (check["status"], check["finding"], check["mode"]) == ("ok", "driver_too_old", "off")


def test_off_mode_without_a_record_does_not_probe(tmp_path: Path) -> None:
    result = run(gpu_image(tmp_path, "nvidia-smi-a100-535.csv", REPRO_DETERMINISM="off"))
    assert result.returncode == 0 and not (tmp_path / "smi-ran").exists()


# ---------------------------------------------------------------------- driver new enough


def test_a_new_enough_driver_runs_and_says_so_in_the_summary(tmp_path: Path) -> None:
    result = run(gpu_image(tmp_path, "nvidia-smi-h100x1.csv", manifest=manifest_for("12.4")))
    assert result.returncode == 0 and result.stdout == "program ran\n"
    (summary,) = result.stderr.splitlines()
    assert summary.startswith(
        "reprobuild: seed 0, mode strict, threads 4, 1 x NVIDIA H100 80GB HBM3 (driver 550.54.15), "
    )


def manifest_for(cuda: str, **gpu: str) -> dict[str, Any]:
    return {"schema_version": 1, "variant": "gpu", "gpu": {"cuda": cuda, **gpu}}


def test_requirement_from_the_table_when_the_manifest_names_only_cuda(tmp_path: Path) -> None:
    ok = run(gpu_image(tmp_path, "nvidia-smi-h100x8.csv", manifest=manifest_for("12.4.1")))
    assert ok.returncode == 0, ok.stderr  # 12.4 Update 1 needs 550.54.15: equal
    refused = run(gpu_image(tmp_path, "nvidia-smi-h100x8.csv", manifest=manifest_for("12.6.3")))
    assert refused.returncode == HOST_REFUSED
    assert "older than 560.35.05, which CUDA 12.6.3 in this image needs" in refused.stderr


def test_an_older_builder_manifest_uses_the_images_cuda_version(tmp_path: Path) -> None:
    """A GPU image whose manifest has no gpu section yet: variant gpu and NGC's CUDA_VERSION."""
    env = gpu_image(
        tmp_path,
        "nvidia-smi-h100x8.csv",
        manifest={"schema_version": 1, "variant": "gpu"},
        CUDA_VERSION="12.8.0.038",
    )
    result = run(env)
    assert result.returncode == HOST_REFUSED
    assert "older than 570.26, which CUDA 12.8.0.038 in this image needs" in result.stderr


# ------------------------------------------------------------------------------- no GPU


def test_no_gpu_refuses_in_strict(tmp_path: Path) -> None:
    result = run(gpu_image(tmp_path, "nvidia-smi-no-driver.txt", smi_status=9))
    assert result.returncode == HOST_REFUSED and result.stdout == ""
    assert result.stderr.splitlines() == [f"{NO_GPU}; REPRO_ALLOW_CPU=1 runs it without one"]


def test_no_nvidia_smi_at_all_is_no_gpu(tmp_path: Path) -> None:
    env = gpu_image(tmp_path, None)
    env["PATH"] = str(tmp_path / "bin")  # nothing there: no nvidia-smi
    result = run(env, PY, "-c", "print('ran')")
    assert result.returncode == HOST_REFUSED and NO_GPU in result.stderr


def test_no_gpu_runs_with_repro_allow_cpu(tmp_path: Path) -> None:
    env = gpu_image(tmp_path, "nvidia-smi-no-driver.txt", smi_status=9, REPRO_ALLOW_CPU="1")
    result = run(env)
    assert result.returncode == 0 and result.stdout == "program ran\n"
    (summary,) = result.stderr.splitlines()
    assert "mode strict, threads 4, no GPU, " in summary


def test_no_gpu_runs_an_image_whose_cuda_comes_from_its_wheels(tmp_path: Path) -> None:
    """An image built on a plain Python base with CUDA from the lock's wheels runs on CPU too:
    strict mode records no GPU and runs; an NGC image (stack "base") still refuses."""
    runs = tmp_path / "runs"
    section = {**GPU_SECTION, "stack": "wheels"}
    manifest = {"schema_version": 1, "variant": "gpu", "gpu": section}
    env = gpu_image(
        tmp_path, "nvidia-smi-no-driver.txt", smi_status=9, manifest=manifest,
        REPRO_RUN_DIR=str(runs),
    )  # fmt: skip
    result = run(env)
    assert result.returncode == 0 and result.stdout == "program ran\n", result.stderr
    assert "no GPU" in result.stderr.splitlines()[-1]
    check = record_of(runs)["gpu_check"]
    assert check["cuda_from_wheels"] is True and check["allow_cpu"] is True
    assert "its CUDA comes from the lock's wheels" in check["message"]
    ngc = {"schema_version": 1, "variant": "gpu", "gpu": {**GPU_SECTION, "stack": "base"}}
    refused = run(gpu_image(tmp_path, "nvidia-smi-no-driver.txt", smi_status=9, manifest=ngc))
    assert refused.returncode == HOST_REFUSED


def test_no_gpu_warns_in_warn_mode(tmp_path: Path) -> None:
    env = gpu_image(tmp_path, "nvidia-smi-no-driver.txt", smi_status=9, REPRO_DETERMINISM="warn")
    result = run(env)
    assert result.returncode == 0 and result.stdout == "program ran\n"
    assert result.stderr.splitlines()[0] == f"{NO_GPU}; running without one (mode warn)"


# ----------------------------------------------------------------------------- the record


def test_run_record_host_gpu_section(tmp_path: Path) -> None:
    runs = tmp_path / "runs"
    env = gpu_image(
        tmp_path,
        "nvidia-smi-h100x8.csv",
        manifest=manifest_for("12.4", driver_min="550.54.14", driver_min_compat="525.60.13"),
        REPRO_RUN_DIR=str(runs),
        CUDA_VISIBLE_DEVICES="0,1",
    )
    result = run(env)
    assert result.returncode == 0, result.stderr
    record = record_of(runs)
    gpu = record["host"]["gpu"]
    assert (gpu["method"], gpu["source"]) == ("nvidia-smi", str(tmp_path / "bin" / "nvidia-smi"))
    assert (gpu["driver_version"], gpu["cuda_driver_version"], gpu["count"]) == (
        "550.54.15",
        None,
        8,
    )
    assert gpu["devices"][7] == {
        "index": 7,
        "name": "NVIDIA H100 80GB HBM3",
        "uuid": "GPU-7f9b1d3e-5a6c-4e8f-9a0b-3c5e7a9b1d72",
        "compute_cap": "9.0",
    }
    assert (gpu["cuda_visible_devices"], gpu["visible"]) == ("0,1", [0, 1])
    assert gpu["tried"] == []
    assert record["gpu_check"] == {
        "enforced": True,
        "mode": "strict",
        "allow_cpu": False,
        "cuda_from_wheels": False,
        "requirement": {
            "cuda": "12.4",
            "driver_min": "550.54.14",
            "driver_min_compat": "525.60.13",
            "source": "manifest",
        },
        "host_driver": "550.54.15",
        "gpu_count": 8,
        "status": "ok",
        "finding": "ok",
        "message": None,
    }
    assert record["image"]["gpu"]["driver_min"] == "550.54.14"


def test_a_refused_run_leaves_a_record_that_says_why(tmp_path: Path) -> None:
    runs = tmp_path / "runs"
    result = run(gpu_image(tmp_path, "nvidia-smi-a100-535.csv", REPRO_RUN_DIR=str(runs)))
    assert result.returncode == HOST_REFUSED
    check = record_of(runs)["gpu_check"]
    assert (check["status"], check["finding"]) == ("refuse", "driver_too_old")
    assert f"reprobuild: {check['message']}" == TOO_OLD


# ------------------------------------------------------------- where the check does not apply


def test_cpu_images_never_probe_or_check(tmp_path: Path) -> None:
    env = gpu_image(tmp_path, "nvidia-smi-a100-535.csv", variant="cpu")
    result = run(env)
    assert result.returncode == 0 and result.stdout == "program ran\n"
    assert not (tmp_path / "smi-ran").exists()
    (summary,) = result.stderr.splitlines()
    assert "GPU" not in summary and "driver" not in summary


def test_cpu_image_record_keeps_its_host_gpu_shape(tmp_path: Path) -> None:
    runs = tmp_path / "runs"
    env = gpu_image(tmp_path, "nvidia-smi-h100x1.csv", variant="cpu", REPRO_RUN_DIR=str(runs))
    assert run(env).returncode == 0
    record = record_of(runs)
    assert record["gpu_check"] is None
    assert record["host"]["gpu"]["source"] == "nvidia-smi"  # hostinfo.gpu_info, as before
    assert "method" not in record["host"]["gpu"]


@pytest.mark.parametrize(
    "manifest", [None, {"schema_version": 1}, {"schema_version": 1, "variant": "cpu"}]
)
def test_gpu_environment_without_a_gpu_manifest_only_records(
    tmp_path: Path, manifest: dict[str, Any] | None
) -> None:
    """``reprobuild verify --local --gpus`` and the other runtime tests: REPROBUILD_VARIANT=gpu
    but no manifest that declares a GPU image."""
    runs = tmp_path / "runs"
    env = gpu_image(
        tmp_path,
        "nvidia-smi-no-driver.txt",
        smi_status=9,
        manifest=manifest or {},
        REPRO_RUN_DIR=str(runs),
    )
    if manifest is None:
        env["REPROBUILD_MANIFEST_PATH"] = str(tmp_path / "absent.json")
    result = run(env)
    assert result.returncode == 0 and result.stdout == "program ran\n"
    assert len(result.stderr.splitlines()) == 1  # the summary only
    record = record_of(runs)
    assert record["gpu_check"]["enforced"] is False
    assert record["host"]["gpu"]["count"] == 0 and record["host"]["gpu"]["method"] is None
