"""The host's NVIDIA GPUs and driver, as a GPU image sees them at start. Used by GPU images
only (CPU images keep :func:`reprobuild_entrypoint.hostinfo.gpu_info` in their record).

Three probes, in order; the first that answers wins (``tried`` in the result says why the
others did not):

1. **NVML** through ctypes (``libnvidia-ml.so.1``, mounted by the NVIDIA container toolkit
   with the ``utility`` capability): driver version, CUDA driver API version, and per GPU the
   name, UUID and compute capability. Every call is guarded; a failure of ``nvmlInit_v2``, of
   the driver version or of the device count falls through to the next probe, a failure for one
   device leaves that device's field None. Without the library this costs one failed
   ``dlopen``: well under a millisecond.
2. **nvidia-smi** ``--query-gpu=name,driver_version,compute_cap,uuid --format=csv,noheader``
   (10 s timeout), parsed by :mod:`~reprobuild_entrypoint.hostinfo`.
3. **procfs**: the driver version from ``/proc/driver/nvidia/version``, the GPU count from the
   ``/dev/nvidia<N>`` device nodes. /proc/driver/nvidia is readable in a container started
   without ``--gpus`` too, so the device nodes, not the driver, say whether a GPU is there.

``REPROBUILD_GPU_PROBES`` (comma-separated, default ``nvml,nvidia-smi,procfs``) narrows the
probes: tests use ``nvidia-smi`` alone, and a host where NVML misbehaves can skip it.

``CUDA_VISIBLE_DEVICES`` is reported, not applied: the devices list every GPU the container
has, each with ``visible`` (whether CUDA will show it to the program: index or UUID-prefix
entries, in CUDA's order) when the variable is set and parses.
"""

from __future__ import annotations

import contextlib
import ctypes
import os
import re
import shutil
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

from reprobuild_entrypoint import hostinfo

NVML_LIBRARY = "libnvidia-ml.so.1"
PROBES = ("nvml", "nvidia-smi", "procfs")
DEV_DIR = Path("/dev")
NVML_SUCCESS = 0
_BUFFER = 96  # NVML_DEVICE_NAME_V2_BUFFER_SIZE, NVML_DEVICE_UUID_V2_BUFFER_SIZE (both 96)
_DEVICE_NODE = re.compile(r"nvidia([0-9]+)")

NvmlLoader = Callable[[], Any]
"""Returns the NVML library object (a ``ctypes.CDLL``, or a fake in tests); raises OSError
when there is none."""


def load_nvml() -> Any:
    return ctypes.CDLL(NVML_LIBRARY)


class NvmlError(Exception):
    pass


def _call(lib: Any, name: str, *args: Any) -> None:
    try:
        status = getattr(lib, name)(*args)
    except (AttributeError, OSError, TypeError, ValueError, ctypes.ArgumentError) as exc:
        raise NvmlError(f"{name}: {type(exc).__name__}: {exc}") from None
    if status != NVML_SUCCESS:
        raise NvmlError(f"{name} returned {status}")


def _text(buffer: Any) -> str | None:
    raw = bytes(buffer.value).decode("utf-8", errors="replace").strip()
    return raw or None


def cuda_version_text(value: int) -> str | None:
    """NVML's CUDA driver version integer (``12040``) as ``12.4``."""
    if value <= 0:
        return None
    return f"{value // 1000}.{value % 1000 // 10}"


def query_nvml(lib: Any) -> dict[str, Any]:
    """Driver, CUDA driver version and devices from an NVML library object; raises
    :class:`NvmlError` when NVML cannot give the driver version or the device count."""
    _call(lib, "nvmlInit_v2")
    try:
        version = ctypes.create_string_buffer(_BUFFER)
        _call(lib, "nvmlSystemGetDriverVersion", version, ctypes.c_uint(_BUFFER))
        driver = _text(version)
        cuda: str | None = None
        cuda_int = ctypes.c_int(0)
        with contextlib.suppress(NvmlError):
            _call(lib, "nvmlSystemGetCudaDriverVersion_v2", ctypes.byref(cuda_int))
            cuda = cuda_version_text(cuda_int.value)
        count = ctypes.c_uint(0)
        _call(lib, "nvmlDeviceGetCount_v2", ctypes.byref(count))
        devices = [_nvml_device(lib, index) for index in range(count.value)]
    finally:
        with contextlib.suppress(NvmlError):
            _call(lib, "nvmlShutdown")
    return {"driver_version": driver, "cuda_driver_version": cuda, "devices": devices}


def _nvml_device(lib: Any, index: int) -> dict[str, Any]:
    device: dict[str, Any] = {"index": index, "name": None, "uuid": None, "compute_cap": None}
    handle = ctypes.c_void_p()
    try:
        _call(lib, "nvmlDeviceGetHandleByIndex_v2", ctypes.c_uint(index), ctypes.byref(handle))
    except NvmlError:
        return device
    for key, function in (("name", "nvmlDeviceGetName"), ("uuid", "nvmlDeviceGetUUID")):
        buffer = ctypes.create_string_buffer(_BUFFER)
        with contextlib.suppress(NvmlError):
            _call(lib, function, handle, buffer, ctypes.c_uint(_BUFFER))
            device[key] = _text(buffer)
    major, minor = ctypes.c_int(0), ctypes.c_int(0)
    with contextlib.suppress(NvmlError):
        cc = "nvmlDeviceGetCudaComputeCapability"
        _call(lib, cc, handle, ctypes.byref(major), ctypes.byref(minor))
        device["compute_cap"] = f"{major.value}.{minor.value}"
    return device


def count_device_nodes(dev_dir: Path = DEV_DIR) -> int:
    """The number of ``/dev/nvidia<N>`` nodes: the GPUs passed into this container."""
    try:
        return sum(1 for entry in os.listdir(dev_dir) if _DEVICE_NODE.fullmatch(entry))
    except OSError:
        return 0


def visible_indices(value: str | None, devices: Sequence[Mapping[str, Any]]) -> list[int] | None:
    """The indices CUDA will use under ``CUDA_VISIBLE_DEVICES=value``, in its order; None when
    unset or when an entry cannot be matched here (MIG instances, a UUID prefix that is not
    unique). CUDA stops at the first entry that names no device, and so does this."""
    if value is None:
        return None
    chosen: list[int] = []
    for raw in value.split(","):
        entry = raw.strip()
        if entry.isdigit() and entry.isascii():
            index = int(entry)
            if index >= len(devices):
                break
        elif entry.startswith("GPU-"):
            matches = [d["index"] for d in devices if str(d.get("uuid") or "").startswith(entry)]
            if len(matches) != 1:
                return None
            index = matches[0]
        elif entry.startswith("MIG-"):
            return None
        else:
            break  # "", "-1", "none": nothing from here on
        if index in chosen:
            break
        chosen.append(index)
    return chosen


def _probes(environ: Mapping[str, str]) -> tuple[str, ...]:
    text = environ.get("REPROBUILD_GPU_PROBES", "").strip()
    if not text:
        return PROBES
    return tuple(p.strip() for p in text.split(",") if p.strip() in PROBES)


def _nvml(load: NvmlLoader) -> dict[str, Any] | str:
    try:
        lib = load()
    except OSError as exc:
        return str(exc)
    try:
        found = query_nvml(lib)
    except NvmlError as exc:
        return str(exc)
    except Exception as exc:  # a broken library must not stop the run
        return f"{type(exc).__name__}: {exc}"
    return {**found, "method": "nvml", "source": NVML_LIBRARY, "count": len(found["devices"])}


def _nvidia_smi(smi: str | None, run: hostinfo.Runner) -> dict[str, Any] | str:
    if not smi:
        return "not on PATH"
    gpus, reason = hostinfo.query_nvidia_smi(smi, run)
    if not gpus:
        return reason or "no GPU listed"
    drivers = {gpu["driver_version"] for gpu in gpus} - {None}
    return {
        "method": "nvidia-smi",
        "source": smi,
        "driver_version": drivers.pop() if len(drivers) == 1 else None,
        "count": len(gpus),
        "devices": [
            {"index": i, "name": g["name"], "uuid": g["uuid"], "compute_cap": g["compute_cap"]}
            for i, g in enumerate(gpus)
        ],
    }


def _procfs(proc_version: Path, dev_dir: Path) -> dict[str, Any] | str:
    version = hostinfo.read_proc_driver_version(proc_version)
    if version is None:
        return f"no driver version in {proc_version}"
    return {
        "method": "procfs",
        "source": str(proc_version),
        "driver_version": version,
        "count": count_device_nodes(dev_dir),
        "devices": None,
    }


def discover(
    environ: Mapping[str, str] | None = None,
    *,
    load: NvmlLoader = load_nvml,
    nvidia_smi: str | None = None,
    run: hostinfo.Runner = hostinfo._run,
    proc_version: Path = hostinfo.NVIDIA_PROC_VERSION,
    dev_dir: Path = DEV_DIR,
) -> dict[str, Any]:
    """The ``host.gpu`` section of a GPU image's run record. Never raises.

    ``method``: ``nvml``, ``nvidia-smi``, ``procfs``, or None when no probe found a driver;
    ``source``: the library, program or file read; ``driver_version``; ``cuda_driver_version``
    (NVML only: the newest CUDA the driver supports, ``12.4``); ``count``: GPUs in the
    container (0 when none); ``devices``: index, name, uuid, compute_cap (None from procfs);
    ``cuda_visible_devices`` and ``visible``: see :func:`visible_indices`; ``tried``: why the
    probes before ``method`` did not answer.
    """
    environ = os.environ if environ is None else environ
    result: dict[str, Any] = {
        "method": None,
        "source": None,
        "driver_version": None,
        "cuda_driver_version": None,
        "count": 0,
        "devices": [],
        "cuda_visible_devices": environ.get("CUDA_VISIBLE_DEVICES"),
        "visible": None,
        "tried": [],
    }
    for probe in _probes(environ):
        if probe == "nvml":
            found = _nvml(load)
        elif probe == "nvidia-smi":
            smi = nvidia_smi if nvidia_smi is not None else shutil.which("nvidia-smi")
            found = _nvidia_smi(smi, run)
        else:
            found = _procfs(proc_version, dev_dir)
        if isinstance(found, str):
            result["tried"].append(f"{probe}: {found}")
            continue
        result.update(found)
        break
    if result["devices"]:
        result["visible"] = visible_indices(result["cuda_visible_devices"], result["devices"])
    return result
