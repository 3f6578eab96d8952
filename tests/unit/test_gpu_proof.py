"""scripts/gpu-proof without a GPU (issue 15): the CPU half of every program runs, every GPU
check is reported "not run" (never "pass"), the message says so, and the exit status is 3.

Runs the script as a GPU host would (from the tree, ``PYTHONPATH=builder:entrypoint``), with
this interpreter (torch comes with the ``frameworks`` extra)."""

from __future__ import annotations

import importlib.util
import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from helpers import REPO

SCRIPT = REPO / "scripts" / "gpu-proof"
NO_GPU = "no GPU: the GPU checks did not run"
PROGRAMS = ["scatter_atomics", "conv_backward", "matmul_tf32", "cnn_train"]
CHECKS = [*PROGRAMS, "strict_refusal", "cost", "driver"]
PASS = "pass"


def _run(tmp_path: Path, *args: str, **env: str) -> tuple[subprocess.CompletedProcess[str], Any]:
    out = tmp_path / "report.json"
    proc = subprocess.run(
        [str(SCRIPT), *args, "--out", str(out)],
        env={**os.environ, "GPU_PROOF_PYTHON": sys.executable, **env},
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=840,
        check=False,
    )
    assert out.is_file(), proc.stderr[-2000:]
    return proc, json.loads(out.read_text())


def _statuses(node: Any) -> list[str]:
    """Every ``status`` value anywhere in the report."""
    if isinstance(node, dict):
        found = [node["status"]] if isinstance(node.get("status"), str) else []
        return found + [s for value in node.values() for s in _statuses(value)]
    if isinstance(node, list):
        return [s for item in node for s in _statuses(item)]
    return []


def _assert_no_gpu(proc: subprocess.CompletedProcess[str], report: Any, names: list[str]) -> None:
    assert proc.returncode == 3, proc.stdout[-2000:] + proc.stderr[-2000:]
    assert NO_GPU in proc.stdout
    assert report["schema"] == "reprobuild.gpu-proof/1"
    assert report["gpu"] is False
    assert report["message"] == NO_GPU
    assert report["kit_errors"] == []
    assert [c["name"] for c in report["checks"]] == names
    assert {c["status"] for c in report["checks"]} == {"not run"}
    assert "pass" not in _statuses(report)
    assert report["summary"]["pass"] == 0
    assert report["summary"]["not run"] == len(names)
    table = [line.split() for line in proc.stdout.splitlines() if line.split()[:1] == ["check"]]
    assert table, proc.stdout
    assert all(" pass " not in line for line in proc.stdout.splitlines())


@pytest.mark.heavy  # ~20 torch processes: minutes on a 2-core host; CI runs it
@pytest.mark.timeout(900)
def test_dry_run_runs_the_cpu_half_and_passes_nothing(tmp_path: Path) -> None:
    proc, report = _run(tmp_path, "--dry-run")
    _assert_no_gpu(proc, report, CHECKS)
    assert report["mode"] == "dry-run"
    assert report["scale"] == "cpu"
    half = {h["name"]: h for h in report["cpu_half"]}
    assert sorted(half) == sorted([*PROGRAMS, "strict_refusal", "cost"])  # driver: GPU only
    assert {h["outcome"] for h in half.values()} == {"ran"}
    for name in PROGRAMS:  # the CPU half went through verify --local, bit for bit
        assert half[name]["runtime_runs_identical"] is True, half[name]
        assert [b["exit_code"] for b in half[name]["bare"]] == [0, 0]
    assert half["cnn_train"]["bare_runs_differ"] is True  # unseeded: bare runs differ
    refusal = half["strict_refusal"]
    assert refusal["bare_completed"] is True
    assert refusal["refused"] is True
    assert "REPRO_DETERMINISM=warn" in refusal["hint"]
    assert half["cost"]["strict_s"] > 0
    assert half["cost"]["off_s"] > 0


@pytest.mark.timeout(600)
def test_without_cuda_the_same_code_reports_not_run(tmp_path: Path) -> None:
    proc, report = _run(
        tmp_path, "--quick", "--only", "strict_refusal", "--only", "driver", CUDA_VISIBLE_DEVICES=""
    )
    _assert_no_gpu(proc, report, ["strict_refusal", "driver"])
    assert report["mode"] == "quick"
    assert all("CUDA is not available" in c["detail"] for c in report["checks"])
    assert [h["name"] for h in report["cpu_half"]] == ["strict_refusal"]


# ---- the GPU half's verdicts, on what a GPU host would give (no GPU here: fakes in, verdict out)


def _kit_module() -> Any:
    path = REPO / "benchmarks" / "gpu_proof" / "run.py"
    spec = importlib.util.spec_from_file_location("gpu_proof_run", path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # its dataclasses look their module up there
    spec.loader.exec_module(module)
    return module


H100 = {"name": "NVIDIA H100 80GB HBM3", "uuid": "GPU-5b1f0e2a-1c2d", "compute_cap": "9.0"}
DRIVER = "550.54.15"


def _readings() -> dict[str, Any]:
    device = {"index": 0, **H100}
    return {
        "runtime_probes": {
            "nvml": {
                "driver_version": DRIVER,
                "cuda_driver_version": "12.4",
                "count": 1,
                "devices": [device],
            },
            "nvidia-smi": {"driver_version": DRIVER, "count": 1, "devices": [device]},
            "procfs": {"driver_version": DRIVER, "count": 1, "devices": None},
        },
        "nvidia_smi": {"gpus": [{"driver_version": DRIVER, **H100}]},
        "procfs": {"driver_version": DRIVER},
        "libcuda": {"raw": 12040, "version": "12.4"},
    }


FACTS = {
    "torch": "2.5.1",
    "cuda_built": "12.4",
    "cudnn": 90100,
    "nccl": "2.21.5",
    "devices": [{**H100, "uuid": "5b1f0e2a-1c2d"}],  # torch's UUID has no GPU- prefix
}
DONE = [
    {
        "runtime": {
            "torch_settings": {"cuda": "12.4", "cudnn_version": 90100, "nccl_version": "2.21.5"},
            "run_record_gpu": {"host_gpu": {"driver_version": DRIVER}, "gpu_check": {}},
        }
    }
]


@pytest.mark.parametrize(
    ("change", "problem"),
    [
        ({}, None),
        ({"probe_cudnn": 90000}, "stack cudnn"),
        ({"smi_uuid": "GPU-ffff"}, "GPU UUID (GPU 0)"),
        ({"libcuda": "12.2"}, "CUDA driver API version"),
        ({"record_driver": "535.104.05"}, "driver version"),
    ],
)
def test_driver_check_verdict(
    monkeypatch: pytest.MonkeyPatch, change: dict[str, Any], problem: str | None
) -> None:
    kit = _kit_module()
    readings = _readings()
    probe = {"version": "2.5.1", "cuda": "12.4", "cudnn": 90100, "nccl": "2.21.5"}
    done = json.loads(json.dumps(DONE))
    if "probe_cudnn" in change:
        probe["cudnn"] = change["probe_cudnn"]
    if "smi_uuid" in change:
        readings["nvidia_smi"]["gpus"][0]["uuid"] = change["smi_uuid"]
    if "libcuda" in change:
        readings["libcuda"]["version"] = change["libcuda"]
    if "record_driver" in change:
        done[0]["runtime"]["run_record_gpu"]["host_gpu"]["driver_version"] = change["record_driver"]
    monkeypatch.setattr(kit, "driver_readings", lambda: readings)
    monkeypatch.setattr(kit, "stack_probe", lambda _kit: probe)
    entry = kit.driver_check(object(), FACTS, done)
    json.dumps(entry)  # the report is JSON
    if problem is None:
        assert entry["status"] == "pass", entry["problems"]
        assert entry["verdict"]["status"] == "ok"
        assert DRIVER in entry["detail"]
    else:
        assert entry["status"] == "fail"
        assert [p for p in entry["problems"] if p.startswith(problem)], entry["problems"]


class _FakeKit:
    """Gives the runs a GPU host would give: bare stdouts and a verify report."""

    def __init__(self, module: Any, bare: list[tuple[bytes, str]], report: dict[str, Any]) -> None:
        self._module = module
        self._bare = bare
        self._report = report

    def bare(self, name: str, runs: int = 2) -> list[Any]:
        return [self._module.Proc([name], 0, out, err, 1.0) for out, err in self._bare[:runs]]

    def verify(self, name: str, mode: str | None = None) -> tuple[dict[str, Any], Any]:
        return self._report, self._module.Proc([name], 0, b"", "", 2.0)


def _verify_report(result: str, tails: list[str], shas: tuple[str, str] = ("a", "a")) -> Any:
    runs = [
        {"run": i + 1, "exit_code": 0, "stdout_sha256": sha, "stderr_tail": tails}
        for i, sha in enumerate(shas)
    ]
    return {"result": result, "summary": result, "runs": runs}


@pytest.mark.parametrize(
    ("program", "bare", "report", "status", "control"),
    [
        (
            "scatter_atomics",
            [(b"1", ""), (b"2", "")],
            _verify_report("identical", []),
            "pass",
            True,
        ),
        (
            "scatter_atomics",
            [(b"1", ""), (b"1", "")],
            _verify_report("identical", []),
            "pass",
            False,
        ),
        ("conv_backward", [(b"1", ""), (b"2", "")], _verify_report("diverged", []), "fail", True),
        (
            "matmul_tf32",
            [(b"1", "gpu-proof rel_err=3.1e-04"), (b"1", "gpu-proof rel_err=3.1e-04")],
            _verify_report("identical", ["gpu-proof rel_err=1.2e-07"]),
            "pass",
            True,
        ),
        (  # the runtime's runs agree, but TF32 stayed on: the knob did not take
            "matmul_tf32",
            [(b"1", "gpu-proof rel_err=3.1e-04"), (b"1", "gpu-proof rel_err=3.1e-04")],
            _verify_report("identical", ["gpu-proof rel_err=3.1e-04"]),
            "fail",
            True,
        ),
    ],
)
def test_determinism_verdict(
    program: str, bare: list[tuple[bytes, str]], report: Any, status: str, control: bool
) -> None:
    kit = _kit_module()
    spec = next(p for p in kit.PROGRAMS if p.name == program)
    entry = kit.determinism_check(_FakeKit(kit, bare, report), spec)
    json.dumps(entry)
    assert entry["status"] == status, entry
    assert entry["control_shown"] is control
    assert entry["runtime_runs_identical"] is (report["result"] == "identical")


def test_refusal_verdict() -> None:
    kit = _kit_module()
    hint = (
        "reprobuild: put_ has no deterministic implementation; "
        "run with REPRO_DETERMINISM=warn to allow it with a warning"
    )
    report = _verify_report("failed", ["RuntimeError: put_ does not have ...", hint])
    for run in report["runs"]:
        run["exit_code"] = 1
    entry = kit.refusal_check(_FakeKit(kit, [(b"completed\n", "")], report))
    assert entry["status"] == "pass", entry
    assert entry["hint"] == hint
    report["runs"][0]["stderr_tail"] = ["RuntimeError: put_ does not have ..."]
    report["runs"][1]["stderr_tail"] = []
    assert kit.refusal_check(_FakeKit(kit, [(b"completed\n", "")], report))["status"] == "fail"
