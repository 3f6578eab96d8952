"""What host a run ran on: CPU model and counts, GPUs and the NVIDIA driver.

Only knowable at run time (docs/determinism.md, "Hardware limits"): cuBLAS and cuDNN results are
tied to one architecture and SM count, CPU results to one instruction set and thread count.
Parsers are pure and take the text; the readers around them tolerate anything missing or
malformed and answer None rather than fail a run.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

CPUINFO = Path("/proc/cpuinfo")
NVIDIA_PROC_VERSION = Path("/proc/driver/nvidia/version")
GPU_FIELDS = ("name", "driver_version", "compute_cap", "uuid")
NVIDIA_SMI_TIMEOUT_S = 10.0
_CPU_MODEL_KEYS = ("model name", "hardware", "cpu model", "processor")
_DRIVER_VERSION = re.compile(r"(?<![\w.])(\d+\.\d+(?:\.\d+)*)(?![\w.])")
_UNKNOWN = {"", "[n/a]", "n/a", "[not supported]", "[unknown error]", "[insufficient permissions]"}

Runner = Callable[[Sequence[str]], "subprocess.CompletedProcess[str]"]


def parse_cpu_model(cpuinfo: str) -> str | None:
    """The first ``model name`` in /proc/cpuinfo text (``Hardware`` and friends on some ARM)."""
    found: dict[str, str] = {}
    for line in cpuinfo.splitlines():
        key, sep, value = line.partition(":")
        key, value = key.strip().lower(), value.strip()
        if sep and key in _CPU_MODEL_KEYS and value and key not in found:
            found[key] = value
    for key in _CPU_MODEL_KEYS:
        # "processor" is the CPU index on x86; only a non-number there names a model.
        if key in found and not (key == "processor" and found[key].isdigit()):
            return found[key]
    return None


def cpu_info(cpuinfo_path: Path = CPUINFO) -> dict[str, Any]:
    try:
        model = parse_cpu_model(cpuinfo_path.read_text(errors="replace"))
    except OSError:
        model = None
    try:
        allowed: int | None = len(os.sched_getaffinity(0))
    except (AttributeError, OSError):
        allowed = None
    return {"model": model, "count": os.cpu_count(), "allowed": allowed}


def _field(value: str) -> str | None:
    value = value.strip()
    return None if value.lower() in _UNKNOWN else value


def _split_row(line: str, fields: Sequence[str]) -> list[str] | None:
    """Split one CSV row into ``len(fields)`` values. The name is the only field that could hold
    a comma, so the fields before it split from the left and those after it from the right."""
    if "name" not in fields:
        parts = line.split(",")
        return parts if len(parts) == len(fields) else None
    before = list(fields).index("name")
    after = len(fields) - before - 1
    head = line.split(",", before) if before else [line]
    if len(head) != before + 1:
        return None
    rest = head.pop()
    tail = rest.rsplit(",", after) if after else [rest]
    if len(tail) != after + 1:
        return None
    return head + tail


def parse_nvidia_smi(output: str, fields: Sequence[str] = GPU_FIELDS) -> list[dict[str, Any]]:
    """Rows of ``nvidia-smi --query-gpu=<fields> --format=csv,noheader``.

    The name may hold commas (see :func:`_split_row`). Lines that do not have the right number
    of fields (warnings, error text) or whose driver version is not one are skipped.
    """
    gpus: list[dict[str, Any]] = []
    for line in output.splitlines():
        if not line.strip():
            continue
        parts = _split_row(line, fields)
        if parts is None:
            continue
        row = {name: _field(value) for name, value in zip(fields, parts)}  # noqa: B905 (3.8)
        driver = row.get("driver_version")
        if driver is not None and not _DRIVER_VERSION.fullmatch(driver):
            continue
        gpus.append(row)
    return gpus


def parse_proc_driver_version(text: str) -> str | None:
    """The driver version in the first line of /proc/driver/nvidia/version, e.g.
    ``NVRM version: NVIDIA UNIX x86_64 Kernel Module  535.129.03  Thu Oct 19 ...``."""
    first = text.splitlines()[0] if text else ""
    if "NVRM" not in first:
        return None
    _, _, rest = first.partition("Kernel Module")
    match = _DRIVER_VERSION.search(rest or first)
    return match.group(1) if match else None


def _run(argv: Sequence[str]) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        list(argv),
        capture_output=True,
        text=True,
        timeout=NVIDIA_SMI_TIMEOUT_S,
        check=False,
        stdin=subprocess.DEVNULL,
    )


def query_nvidia_smi(smi: str, run: Runner = _run) -> tuple[list[dict[str, Any]], str | None]:
    """The GPUs nvidia-smi lists, with :data:`GPU_FIELDS` (``compute_cap`` None from a driver
    too old to know it), and why there are none when there are none: ``([], reason)``."""
    reason = "no GPU listed"
    # compute_cap needs driver >= 510; an older nvidia-smi refuses the whole query.
    for fields in (GPU_FIELDS, tuple(f for f in GPU_FIELDS if f != "compute_cap")):
        try:
            result = run([smi, f"--query-gpu={','.join(fields)}", "--format=csv,noheader"])
        except (OSError, subprocess.SubprocessError) as exc:
            return [], f"{type(exc).__name__}: {exc}"
        if result.returncode != 0:
            said = (result.stdout or result.stderr or "").strip().splitlines()
            reason = f"exit status {result.returncode}" + (f": {said[0][:200]}" if said else "")
            continue
        gpus = parse_nvidia_smi(result.stdout, fields)
        for gpu in gpus:
            gpu.setdefault("compute_cap", None)
        return gpus, None if gpus else "no GPU in its output"
    return [], reason


def read_proc_driver_version(proc_version: Path = NVIDIA_PROC_VERSION) -> str | None:
    try:
        return parse_proc_driver_version(proc_version.read_text(errors="replace"))
    except OSError:
        return None


def gpu_info(
    nvidia_smi: str | None = None,
    run: Runner = _run,
    proc_version: Path = NVIDIA_PROC_VERSION,
) -> dict[str, Any] | None:
    """GPUs and driver from nvidia-smi when it is on PATH and answers, else the driver version
    from /proc; None when neither is there (no GPU, or none passed into the container).

    What the run record of a CPU image holds; GPU images record
    :func:`reprobuild_entrypoint.gpuinfo.discover` instead (NVML first, GPU count, CUDA
    driver version)."""
    smi = nvidia_smi if nvidia_smi is not None else shutil.which("nvidia-smi")
    if smi:
        gpus, _ = query_nvidia_smi(smi, run)
        if gpus:
            drivers = {gpu["driver_version"] for gpu in gpus} - {None}
            return {
                "source": "nvidia-smi",
                "driver_version": drivers.pop() if len(drivers) == 1 else None,
                "devices": gpus,
            }
    version = read_proc_driver_version(proc_version)
    if version is None:
        return None
    return {"source": str(proc_version), "driver_version": version, "devices": None}
