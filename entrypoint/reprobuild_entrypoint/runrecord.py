"""Run records: what a run was started with (written by the entrypoint) and what each Python
process configured (written by ``_startup`` at exit), as schema-versioned JSON documents.

Files in ``$REPRO_RUN_DIR``, one run id per entrypoint start:

- ``run-<run id>.json``: this module's :func:`run_record`;
- ``run-<run id>-exit.json``: :func:`exit_record`, how the command ended (written only when
  the entrypoint runs as init, PID 1: otherwise it ``exec``s the command and is gone);
- ``run-<run id>-frameworks-<host>-<pid>.json``: :func:`framework_record`, one per Python
  process that configured a framework (frameworks are only known inside the program).

Separate files rather than one merged document: processes never write the same file, so
nothing needs a lock and nothing can be clobbered, and every file is written atomically.
A run record may hold wall-clock time (images may not): ``started`` and ``written``.
"""

from __future__ import annotations

import datetime as _dt
import hashlib
import json
import os
import platform
import re
import sys
from collections.abc import Mapping, Sequence
from pathlib import Path
from types import ModuleType
from typing import Any

from reprobuild_entrypoint import MANIFEST_PATH, distinfo, envplan, hostinfo, jsonfile
from reprobuild_entrypoint.contract import FRAMEWORKS_KIND, RUN_EXIT_KIND, RUN_KIND
from reprobuild_entrypoint.envplan import THREAD_VARIABLES, EnvPlan
from reprobuild_entrypoint.settings import RANK_SEED_SCHEME, Settings, SettingsError

SCHEMA_VERSION = 1
_UTC = _dt.timezone.utc  # noqa: UP017  (datetime.UTC is 3.11+; images may run Python 3.10)
RUN_ID_PATTERN = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,127}")
STACK_VARIABLES = (
    "CUDA_VERSION",
    "CUDA_DRIVER_VERSION",
    "CUDNN_VERSION",
    "CUBLAS_VERSION",
    "NCCL_VERSION",
    "NVIDIA_PYTORCH_VERSION",
    "NVIDIA_TENSORFLOW_VERSION",
    "PYTORCH_VERSION",
    "NVIDIA_BUILD_ID",
    "CUDA_VISIBLE_DEVICES",
    "NVIDIA_VISIBLE_DEVICES",
)
"""Variables that base images (NGC, nvidia/cuda) and the runtime set to describe the stack."""
_MANIFEST_FIELDS = (
    "schema_version",
    "builder_version",
    "name",
    "variant",
    "base_ref",
    "base_digest",
    "lock_file",
    "lock_sha256",
    "seed",
    "determinism",
    "gpu",
)


def utc_now() -> _dt.datetime:
    return _dt.datetime.now(_UTC)


def timestamp(moment: _dt.datetime) -> str:
    return moment.astimezone(_UTC).isoformat(timespec="milliseconds").replace("+00:00", "Z")


def new_run_id(moment: _dt.datetime, token: str) -> str:
    """``<UTC time>-<token>``: sortable, and unique across nodes that start in the same second
    (every container's entrypoint is pid 1, so the pid would not do)."""
    return f"{moment.astimezone(_UTC):%Y%m%dT%H%M%SZ}-{token}"


def check_run_id(run_id: str) -> str:
    if not RUN_ID_PATTERN.fullmatch(run_id):
        raise SettingsError(
            f"REPRO_RUN_ID={run_id!r} is not a run id: use 1 to 128 letters, digits, '.', '_' "
            "or '-', starting with a letter or digit"
        )
    return run_id


def run_record_path(run_dir: str | os.PathLike[str], run_id: str) -> Path:
    return Path(run_dir) / f"run-{run_id}.json"


def _host_label(name: str) -> str:
    return re.sub(r"[^A-Za-z0-9._-]", "_", name)[:64] or "host"


def framework_record_path(
    run_dir: str | os.PathLike[str], run_id: str, host: str, pid: int
) -> Path:
    return Path(run_dir) / f"run-{run_id}-frameworks-{_host_label(host)}-{pid}.json"


def manifest_info(path: Path) -> dict[str, Any]:
    """The image manifest's sha256 (of its bytes) and the fields that identify the build.
    Absent outside an image: every value is then None."""
    info: dict[str, Any] = {"path": str(path), "sha256": None}
    try:
        raw = path.read_bytes()
    except FileNotFoundError:
        return info
    except OSError as exc:
        info["error"] = f"{type(exc).__name__}: {exc}"
        return info
    info["sha256"] = hashlib.sha256(raw).hexdigest()
    try:
        data = json.loads(raw)
    except (UnicodeDecodeError, json.JSONDecodeError) as exc:
        info["error"] = f"not valid JSON: {exc}"
        return info
    if not isinstance(data, dict):
        info["error"] = "not a JSON object"
        return info
    info.update({key: data.get(key) for key in _MANIFEST_FIELDS})
    return info


def python_info() -> dict[str, Any]:
    return {
        "version": platform.python_version(),
        "implementation": sys.implementation.name,
        "executable": sys.executable,
    }


def host_info(gpu: dict[str, Any] | None) -> dict[str, Any]:
    return {
        "hostname": platform.node() or None,
        "machine": platform.machine() or None,
        "kernel": platform.release() or None,
        "cpu": hostinfo.cpu_info(),
        "gpu": gpu,
    }


def run_record(
    *,
    run_id: str,
    started: _dt.datetime,
    settings: Settings,
    env_plan: EnvPlan,
    argv: Sequence[str],
    command: Sequence[str],
    base_entrypoint: Sequence[str] | None,
    init: bool,
    environ: Mapping[str, str],
    manifest: dict[str, Any],
    host: dict[str, Any],
    gpu_check: dict[str, Any] | None = None,
    cpu_check: dict[str, Any] | None = None,
) -> dict[str, Any]:
    """The run record: pure, from what the entrypoint resolved and measured. ``gpu_check`` is
    the host driver check of a GPU image (None for a CPU image)."""
    effective = {**env_plan.set, **env_plan.user_set}
    return {
        "schema_version": SCHEMA_VERSION,
        "kind": RUN_KIND,
        "run_id": run_id,
        "started": timestamp(started),
        "argv": list(argv),
        "command": list(command),
        "base_entrypoint": None if base_entrypoint is None else list(base_entrypoint),
        "init": init,
        "determinism": {
            "mode": settings.mode,
            "mode_source": settings.mode_source,
            "seed": settings.seed,
            "seed_source": settings.seed_source,
            "experiment_seed": settings.experiment_seed,
            "trial": settings.trial,
            "image_seed": settings.image_seed,
            "image_mode": settings.image_mode,
            "variant": settings.variant,
        },
        "distributed": {
            "rank": settings.rank,
            "local_rank": settings.local_rank,
            "world_size": settings.world_size,
            "rank_seed": settings.rank_seed,
            "rank_seed_scheme": RANK_SEED_SCHEME,
            "note": "each process seeds with its own RANK at start: see the framework records",
        },
        "cpu": cpu_section(settings, cpu_check),
        "threads": {
            "requested": settings.threads,
            "source": settings.threads_source,
            "variables": {name: effective.get(name) for name in THREAD_VARIABLES},
        },
        "environment": {
            "set": dict(env_plan.set),
            "user_set": dict(env_plan.user_set),
            "removed": list(env_plan.remove),
        },
        "stack_env": {name: environ[name] for name in STACK_VARIABLES if name in environ},
        "python": python_info(),
        "host": host,
        "image": manifest,
        "gpu_check": gpu_check,
        "framework_records": f"run-{run_id}-frameworks-*.json",
    }


def cpu_section(settings: Settings, check: Mapping[str, Any] | None = None) -> dict[str, Any]:
    """``cpu`` of the run record: native or portable, the level pinned and its variables
    (issue 31); ``refused`` is the line when the CPU is below that level; ``emulator`` the
    emulator's argv when ``reprobuild verify --cpu`` ran the command on an emulated CPU."""
    off = settings.mode == "off"
    level = None if off else envplan.level_name(settings.cpu, envplan.this_machine())
    return {
        "mode": "native" if level is None else "portable",
        "setting": settings.cpu,
        "source": settings.cpu_source,
        "image_cpu": settings.image_cpu,
        "requested": (check or {}).get("requested", settings.cpu),
        "level": level,
        "pins": dict(envplan.PINS[level]) if level is not None else {},
        "refused": (check or {}).get("refused"),
        "emulator": (check or {}).get("emulator"),
    }


def exit_record_path(run_dir: str | os.PathLike[str], run_id: str) -> Path:
    return Path(run_dir) / f"run-{run_id}-exit.json"


def exit_record(run_id: str, status: int, signals: Sequence[int]) -> dict[str, Any]:
    """How the run ended, written by the entrypoint as init when the command exits: its exit
    status, the signals it was sent (``docker stop``: SIGTERM), and ``ended_by``: ``"signal"``
    when a signal came (the program may have handled it and exited 0: a preempted run that
    saved its checkpoint), else ``"exit"``."""
    import signal as _signal

    names = [_signal.Signals(n).name for n in signals]
    killed_by = _signal.Signals(status - 128).name if 128 < status < 160 else None
    return {
        "schema_version": SCHEMA_VERSION,
        "kind": RUN_EXIT_KIND,
        "run_id": run_id,
        "ended": timestamp(utc_now()),
        "exit_status": status,
        "ended_by": "signal" if names or killed_by else "exit",
        "signals_received": names,
        "killed_by": killed_by,
    }


def _at_exit(frameworks: dict[str, dict[str, Any]]) -> None:
    """What is worth asking only at exit (never at import time): library versions, and
    whether the program switched determinism off again after we switched it on."""
    torch = sys.modules.get("torch")
    if torch is not None and "torch" in frameworks:
        entry = frameworks["torch"]
        try:
            entry["deterministic_algorithms_at_exit"] = bool(
                torch.are_deterministic_algorithms_enabled()
            )
        except Exception as exc:
            entry["deterministic_algorithms_at_exit"] = f"unknown ({type(exc).__name__})"
        try:
            entry["cudnn_benchmark_at_exit"] = bool(torch.backends.cudnn.benchmark)
        except Exception as exc:
            entry["cudnn_benchmark_at_exit"] = f"unknown ({type(exc).__name__})"
        try:
            cudnn = torch.backends.cudnn
            entry["cudnn_version"] = cudnn.version() if cudnn.is_available() else None
        except Exception as exc:
            entry["cudnn_version"] = f"unknown ({type(exc).__name__})"
        try:
            cuda = torch.cuda
            entry["nccl_version"] = (
                ".".join(map(str, cuda.nccl.version())) if cuda.is_available() else None
            )
        except Exception as exc:
            entry["nccl_version"] = f"unknown ({type(exc).__name__})"
    tf = sys.modules.get("tensorflow")
    if tf is not None and "tensorflow" in frameworks:
        try:
            build = dict(tf.sysconfig.get_build_info())
            frameworks["tensorflow"]["build_info"] = {
                key: build.get(key) for key in ("cuda_version", "cudnn_version", "is_cuda_build")
            }
        except Exception as exc:
            frameworks["tensorflow"]["build_info"] = f"unknown ({type(exc).__name__})"


def _openblas_core() -> str | None:
    """The core OpenBLAS dispatched to, from the OpenBLAS this process loaded (NumPy's)."""
    try:
        with open("/proc/self/maps", "rb") as fh:
            maps = fh.read().decode("utf-8", "replace")
    except OSError:
        return None
    paths = {line.split()[-1] for line in maps.splitlines() if "openblas" in line.lower()}
    import ctypes

    for path in sorted(p for p in paths if p.startswith("/")):
        try:
            lib = ctypes.CDLL(path)
        except OSError:
            continue
        for name in (
            "scipy_openblas_get_corename64_",
            "scipy_openblas_get_corename",
            "openblas_get_corename64_",
            "openblas_get_corename",
        ):
            function = getattr(lib, name, None)
            if function is not None:
                function.restype = ctypes.c_char_p
                value = function()
                return value.decode("ascii", "replace") if value else None
    return None


def cpu_dispatch() -> dict[str, Any]:
    """What each loaded CPU library dispatched to in this process (issue 31): torch's ATen
    capability, oneDNN and NNPACK on or off, oneMKL's CNR branch (``MKL_CBWR``), the float32
    sqrt path (oneMKL VML or exact), NumPy's dispatch targets, OpenBLAS's core."""
    out: dict[str, Any] = {
        "MKL_CBWR": os.environ.get("MKL_CBWR"),
        "ONEDNN_MAX_CPU_ISA": os.environ.get("ONEDNN_MAX_CPU_ISA"),
    }
    torch = sys.modules.get("torch")
    if torch is not None:
        try:
            backends = torch.backends
            out["aten_capability"] = str(backends.cpu.get_cpu_capability())
            out["mkldnn_enabled"] = bool(backends.mkldnn.is_available() and backends.mkldnn.enabled)
            nnpack = getattr(backends, "nnpack", None)
            out["nnpack_enabled"] = (
                bool(nnpack.is_available() and torch._C._get_nnpack_enabled())
                if nnpack is not None
                else None
            )
            exact = getattr(torch.sqrt, "__reprobuild__", False)
            out["float32_sqrt"] = "exact (correctly rounded)" if exact else "oneMKL VML"
        except Exception as exc:
            out["torch_error"] = f"{type(exc).__name__}: {exc}"
    np = sys.modules.get("numpy")
    if np is not None:
        try:
            umath = np._core._multiarray_umath
            features = umath.__cpu_features__
            out["numpy_baseline"] = list(umath.__cpu_baseline__)
            out["numpy_dispatch"] = [t for t in umath.__cpu_dispatch__ if features.get(t)]
        except Exception as exc:
            out["numpy_error"] = f"{type(exc).__name__}: {exc}"
        try:
            out["openblas_core"] = _openblas_core()
        except Exception as exc:
            out["openblas_core"] = f"unknown ({type(exc).__name__})"
    return out


def framework_record(
    run_id: str, state: Mapping[str, object], frameworks: ModuleType
) -> dict[str, Any]:
    record: dict[str, dict[str, Any]] = {
        name: dict(entry) for name, entry in frameworks.RECORD.items()
    }
    _at_exit(record)
    out: dict[str, Any] = {
        "schema_version": SCHEMA_VERSION,
        "kind": FRAMEWORKS_KIND,
        "run_id": run_id,
        "pid": os.getpid(),
        "hostname": platform.node() or None,
        "argv": list(sys.argv),
        "written": timestamp(utc_now()),
        "startup": dict(state),
        "framework_settings": record,
        "cpu_dispatch": cpu_dispatch(),
        "errors": list(frameworks.ERRORS),
    }
    if distinfo.under_launcher(os.environ):
        out["distributed"] = _distributed(state)
    return out


def _distributed(state: Mapping[str, object]) -> dict[str, Any]:
    """This rank's identity, seed, backend and NCCL/gloo settings (:mod:`distinfo`)."""
    seed = state.get("rank_seed")
    info = distinfo.distributed_info(
        os.environ, seed if isinstance(seed, int) else None, platform.node() or None
    )
    info["backend"] = distinfo.BACKEND.get("backend")
    info["timeout_s"] = distinfo.BACKEND.get("timeout_s")
    info["timeout_source"] = distinfo.BACKEND.get("timeout_source")
    dist = getattr(sys.modules.get("torch"), "distributed", None)
    try:
        info["initialized_at_exit"] = bool(dist is not None and dist.is_initialized())
        if info["backend"] is None and info["initialized_at_exit"]:
            info["backend"] = str(dist.get_backend())  # type: ignore[union-attr]
    except Exception as exc:
        info["initialized_at_exit"] = f"unknown ({type(exc).__name__})"
    return info


def write_framework_record(
    run_dir: str, run_id: str, state: Mapping[str, object], frameworks: ModuleType
) -> Path:
    path = framework_record_path(run_dir, run_id, platform.node(), os.getpid())
    return jsonfile.write_atomic(path, framework_record(run_id, state, frameworks))


def default_manifest_path(environ: Mapping[str, str]) -> Path:
    """``REPROBUILD_MANIFEST_PATH`` (tests, or a non-standard layout) or the image's path."""
    return Path(environ.get("REPROBUILD_MANIFEST_PATH") or MANIFEST_PATH)
