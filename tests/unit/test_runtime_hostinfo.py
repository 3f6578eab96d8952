"""Host facts for the run record, from recorded sample outputs: no GPU needed."""

from __future__ import annotations

import subprocess
from collections.abc import Sequence
from pathlib import Path

import pytest

from reprobuild_entrypoint import hostinfo

H100 = "NVIDIA H100 80GB HBM3, 550.54.15, 9.0, GPU-5e4b5b4a-1c2d-3e4f-5a6b-7c8d9e0f1a2b\n"
TWO_A100 = (
    "NVIDIA A100-SXM4-40GB, 535.129.03, 8.0, GPU-0f1e2d3c-4b5a-6978-8796-a5b4c3d2e1f0\n"
    "NVIDIA A100-SXM4-40GB, 535.129.03, 8.0, GPU-1a2b3c4d-5e6f-7081-92a3-b4c5d6e7f809\n"
)
NO_DRIVER = (
    "NVIDIA-SMI has failed because it couldn't communicate with the NVIDIA driver. Make sure "
    "that the latest NVIDIA driver is installed and running.\n"
)
PROC_PROPRIETARY = (
    "NVRM version: NVIDIA UNIX x86_64 Kernel Module  535.129.03  Thu Oct 19 18:56:32 UTC 2023\n"
    "GCC version:  gcc version 11.4.0 (Ubuntu 11.4.0-1ubuntu1~22.04)\n"
)
PROC_OPEN = (
    "NVRM version: NVIDIA UNIX Open Kernel Module for x86_64  550.54.14  Release Build  "
    "(dvs-builder@U16-I3-B03-4-3)  Thu Feb 22 01:25:25 UTC 2024\n"
    "GCC version:  gcc version 12.3.0 (Ubuntu 12.3.0-1ubuntu1~22.04)\n"
)
PROC_ARM = (
    "NVRM version: NVIDIA UNIX aarch64 Kernel Module  535.104.05  Sat Aug 19 01:13:57 UTC 2023\n"
)

CPUINFO_X86 = """processor	: 0
vendor_id	: GenuineIntel
model name	: Intel(R) Xeon(R) Platinum 8480+
flags		: fpu vme

processor	: 1
model name	: Intel(R) Xeon(R) Platinum 8480+
"""
CPUINFO_ARM = """processor	: 0
BogoMIPS	: 50.00
CPU implementer	: 0x41

Hardware	: NVIDIA Grace
"""


def test_parse_one_gpu() -> None:
    assert hostinfo.parse_nvidia_smi(H100) == [
        {
            "name": "NVIDIA H100 80GB HBM3",
            "driver_version": "550.54.15",
            "compute_cap": "9.0",
            "uuid": "GPU-5e4b5b4a-1c2d-3e4f-5a6b-7c8d9e0f1a2b",
        }
    ]


def test_parse_two_gpus_and_blank_lines() -> None:
    gpus = hostinfo.parse_nvidia_smi("\n" + TWO_A100 + "\n")
    assert [g["uuid"][:8] for g in gpus] == ["GPU-0f1e", "GPU-1a2b"]


def test_parse_name_with_a_comma_and_not_available_fields() -> None:
    gpus = hostinfo.parse_nvidia_smi("Odd, Board Name, 470.82.01, [N/A], [Not Supported]\n")
    assert gpus == [
        {
            "name": "Odd, Board Name",
            "driver_version": "470.82.01",
            "compute_cap": None,
            "uuid": None,
        }
    ]


@pytest.mark.parametrize(
    "output",
    [NO_DRIVER, "", "garbage\n", "a, b\n", "NVIDIA X, not-a-version, 9.0, GPU-1\n"],
)
def test_parse_malformed_output_gives_no_rows(output: str) -> None:
    assert hostinfo.parse_nvidia_smi(output) == []


@pytest.mark.parametrize(
    ("text", "version"),
    [
        (PROC_PROPRIETARY, "535.129.03"),
        (PROC_OPEN, "550.54.14"),
        (PROC_ARM, "535.104.05"),
        ("", None),
        ("GCC version: 11.4.0\n", None),
        ("NVRM version: something else entirely\n", None),
    ],
)
def test_parse_proc_driver_version(text: str, version: str | None) -> None:
    assert hostinfo.parse_proc_driver_version(text) == version


def test_parse_cpu_model() -> None:
    assert hostinfo.parse_cpu_model(CPUINFO_X86) == "Intel(R) Xeon(R) Platinum 8480+"
    assert hostinfo.parse_cpu_model(CPUINFO_ARM) == "NVIDIA Grace"
    assert hostinfo.parse_cpu_model("processor\t: 0\n") is None
    assert hostinfo.parse_cpu_model("") is None


def test_cpu_info_reads_this_host(tmp_path: Path) -> None:
    info = hostinfo.cpu_info()
    assert info["count"] and info["allowed"]
    assert hostinfo.cpu_info(tmp_path / "missing")["model"] is None


class FakeSmi:
    """Stands in for ``subprocess.run`` of nvidia-smi; answers by query."""

    def __init__(self, answers: dict[str, tuple[int, str]]) -> None:
        self.answers = answers
        self.calls: list[list[str]] = []

    def __call__(self, argv: Sequence[str]) -> subprocess.CompletedProcess[str]:
        self.calls.append(list(argv))
        query = argv[1].removeprefix("--query-gpu=")
        code, out = self.answers.get(query, (2, ""))
        return subprocess.CompletedProcess(list(argv), code, out, "")


FULL = "name,driver_version,compute_cap,uuid"
NO_CAP = "name,driver_version,uuid"


def test_gpu_info_from_nvidia_smi(tmp_path: Path) -> None:
    run = FakeSmi({FULL: (0, TWO_A100)})
    info = hostinfo.gpu_info("nvidia-smi", run, tmp_path / "none")
    assert info is not None
    assert info["source"] == "nvidia-smi" and info["driver_version"] == "535.129.03"
    assert len(info["devices"]) == 2
    assert run.calls == [["nvidia-smi", f"--query-gpu={FULL}", "--format=csv,noheader"]]


def test_gpu_info_old_driver_without_compute_cap(tmp_path: Path) -> None:
    run = FakeSmi({NO_CAP: (0, "Tesla V100-SXM2-16GB, 470.82.01, GPU-abc\n")})
    info = hostinfo.gpu_info("nvidia-smi", run, tmp_path / "none")
    assert info is not None
    assert info["devices"] == [
        {
            "name": "Tesla V100-SXM2-16GB",
            "driver_version": "470.82.01",
            "uuid": "GPU-abc",
            "compute_cap": None,
        }
    ]


def test_gpu_info_falls_back_to_proc_when_nvidia_smi_fails(tmp_path: Path) -> None:
    proc = tmp_path / "version"
    proc.write_text(PROC_OPEN)
    info = hostinfo.gpu_info("nvidia-smi", FakeSmi({FULL: (9, NO_DRIVER)}), proc)
    assert info == {"source": str(proc), "driver_version": "550.54.14", "devices": None}


def test_gpu_info_when_nvidia_smi_cannot_run(tmp_path: Path) -> None:
    def broken(argv: Sequence[str]) -> subprocess.CompletedProcess[str]:
        raise subprocess.TimeoutExpired(list(argv), 15)

    proc = tmp_path / "version"
    proc.write_text(PROC_PROPRIETARY)
    info = hostinfo.gpu_info("nvidia-smi", broken, proc)
    assert info is not None and info["driver_version"] == "535.129.03"


def test_gpu_info_without_any_gpu(tmp_path: Path) -> None:
    assert hostinfo.gpu_info("", FakeSmi({}), tmp_path / "none") is None
    garbage = tmp_path / "version"
    garbage.write_text("not a driver\n")
    assert hostinfo.gpu_info("", FakeSmi({}), garbage) is None


def test_gpu_info_output_that_parses_to_nothing(tmp_path: Path) -> None:
    assert hostinfo.gpu_info("nvidia-smi", FakeSmi({FULL: (0, "junk\n")}), tmp_path / "x") is None
