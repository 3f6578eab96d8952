"""Tags for every MLflow run a program in the image starts, with no change to the program.

MLflow asks each *run context provider* registered under the entry point group
``mlflow.run_context_provider`` for tags when a run is created (``mlflow.start_run``, and the
runs ``mlflow.autolog`` starts). The image carries a small distribution record beside the
runtime (``reprobuild_mlflow-<version>.dist-info``, written by :func:`dist_info`) whose entry
point names :class:`RunContext`; only MLflow loads this module. It imports nothing of MLflow's
at module level and never raises into MLflow: a failure is one warning line on stderr.

The tags (:func:`run_tags`) come from what the runtime already knows: the image's manifest
(its sha256 and the build's identity), this process's settings (seed, rank seed, mode, threads,
trial: each torchrun rank reads its own ``RANK``) and, under the entrypoint with
``REPRO_RUN_DIR`` set, the run record (host CPU and GPU facts, the runtime's run id).

At the first run it tags, it arranges (``atexit``) to log the manifest and the run record as
artifacts (under ``reprobuild/``) of the runs this process left active or ended last, if MLflow
is still loaded then. That upload is bounded by :data:`UPLOAD_TIMEOUT_S` in a daemon thread:
a tracking server that went away never holds the program's exit longer than that.
"""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path

from reprobuild_entrypoint import __version__, runrecord
from reprobuild_entrypoint.contract import IMAGE_VAR, RUN_DIR_VAR
from reprobuild_entrypoint.settings import from_environ

TYPE_CHECKING = False
if TYPE_CHECKING:
    from collections.abc import Mapping
    from typing import Any

ENTRY_POINT_GROUP = "mlflow.run_context_provider"
DIST_NAME = "reprobuild_mlflow"
TAG_PREFIX = "reprobuild."
ARTIFACT_DIR = "reprobuild"
UPLOAD_TIMEOUT_S = 15.0
MAX_TAG = 5000  # MLflow's limit for a tag value is 8000 characters (5000 in older servers)

_WARNED: list[str] = []
_ARMED: list[bool] = []


def warn(message: str) -> None:
    """One line on stderr, once per process."""
    if not _WARNED:
        _WARNED.append(message)
        sys.stderr.write(f"reprobuild: MLflow tags: {message}\n")
        sys.stderr.flush()


def dist_info() -> dict[str, bytes]:
    """``<dir>.dist-info/<file>`` -> content: what makes MLflow find :class:`RunContext`."""
    base = f"{DIST_NAME}-{__version__}.dist-info"
    metadata = (
        f"Metadata-Version: 2.1\nName: {DIST_NAME}\nVersion: {__version__}\n"
        "Summary: reprobuild's MLflow run context provider (part of the in-image runtime)\n"
    )
    entry_points = f"[{ENTRY_POINT_GROUP}]\nreprobuild = {__name__}:RunContext\n"
    return {
        f"{base}/METADATA": metadata.encode(),
        f"{base}/entry_points.txt": entry_points.encode(),
    }


def run_record_path(environ: Mapping[str, str]) -> Path | None:
    run_dir, run_id = environ.get(RUN_DIR_VAR, ""), environ.get("REPRO_RUN_ID", "")
    if not run_dir or not run_id:
        return None
    return runrecord.run_record_path(run_dir, run_id)


def _read_record(path: Path | None) -> dict[str, Any]:
    if path is None:
        return {}
    try:
        data = json.loads(path.read_bytes())
    except (OSError, ValueError):
        return {}
    return data if isinstance(data, dict) else {}


def _section(data: Mapping[str, Any], *keys: str) -> dict[str, Any]:
    for key in keys:
        value = data.get(key) if isinstance(data, dict) else None
        data = value if isinstance(value, dict) else {}
    return dict(data)


def run_tags(environ: Mapping[str, str], manifest_path: Path) -> dict[str, str]:
    """The tags, from the manifest, the settings in ``environ`` and the run record (pure but
    for reading those two files). Values that are unknown are left out, never ``"None"``."""
    settings = from_environ(environ)
    manifest = runrecord.manifest_info(manifest_path)
    record = _read_record(run_record_path(environ))
    cpu_host = _section(record, "host", "cpu")
    cpu_run = _section(record, "cpu") or runrecord.cpu_section(settings)
    gpu = _section(record, "host", "gpu")
    devices = [d for d in gpu.get("devices") or [] if isinstance(d, dict)]
    names = sorted({str(d["name"]) for d in devices if d.get("name")})
    values: dict[str, object] = {
        "image": manifest.get("name"),
        "image.ref": environ.get(IMAGE_VAR, "").strip() or None,
        "manifest_sha256": manifest.get("sha256"),
        "lock_sha256": manifest.get("lock_sha256"),
        "lock_file": manifest.get("lock_file"),
        "base": manifest.get("base_ref"),
        "builder_version": manifest.get("builder_version"),
        "variant": settings.variant,
        "seed": settings.seed,
        "seed_source": settings.seed_source,
        "rank": settings.rank,
        "world_size": settings.world_size,
        "rank_seed": settings.rank_seed,
        "determinism": settings.mode,
        "threads": settings.threads,
        "trial": settings.trial,
        "experiment_seed": settings.experiment_seed,
        "cpu.mode": cpu_run.get("mode"),
        "cpu.level": cpu_run.get("level"),
        "cpu.model": cpu_host.get("model"),
        "cpu.isa_level": cpu_host.get("level"),
        "gpu.driver": gpu.get("driver_version"),
        "gpu.count": len(devices) if devices else None,
        "gpu.names": ", ".join(names) or None,
        "gpu.cuda": _section(manifest, "gpu").get("cuda"),
        "run_id": record.get("run_id"),
    }
    return {
        TAG_PREFIX + key: str(value)[:MAX_TAG]
        for key, value in values.items()
        if value is not None and value != ""
    }


def artifact_files(environ: Mapping[str, str], manifest_path: Path) -> list[Path]:
    """The manifest and this run's record, those that exist."""
    return [p for p in (manifest_path, run_record_path(environ)) if p is not None and p.is_file()]


def _runs_to_upload(mlflow: Any) -> list[str]:
    """The run this process still has active, else the one it ended last (read from MLflow's
    fluent state without a request: the server may be gone by now)."""
    active = mlflow.active_run()
    if active is not None:
        return [active.info.run_id]
    fluent = getattr(getattr(mlflow, "tracking", None), "fluent", None)
    last = getattr(fluent, "_last_active_run_id", None)
    run_id = last.get() if last is not None and hasattr(last, "get") else None
    return [run_id] if isinstance(run_id, str) and run_id else []


def upload_artifacts(timeout: float = UPLOAD_TIMEOUT_S) -> None:
    """At exit: log the manifest and run record to this process's runs, bounded by ``timeout``."""
    mlflow = sys.modules.get("mlflow")
    files = artifact_files(os.environ, runrecord.default_manifest_path(os.environ))
    if mlflow is None or not files:
        return
    import threading

    failed: list[str] = []
    try:
        runs = _runs_to_upload(mlflow)  # here: MLflow keeps the active runs per thread
    except Exception as exc:  # best effort: never fail the program over its tags
        warn(f"the run record was not logged as an artifact ({type(exc).__name__})")
        return

    def upload() -> None:
        try:
            client = mlflow.MlflowClient()
            for run_id in runs:
                for path in files:
                    client.log_artifact(run_id, str(path), ARTIFACT_DIR)
        except Exception as exc:  # best effort: never fail the program over its tags
            first = (str(exc).splitlines() or [""])[0][:200]
            failed.append(f"{type(exc).__name__}: {first}")

    worker = threading.Thread(target=upload, name="reprobuild-mlflow", daemon=True)
    worker.start()
    worker.join(timeout)
    if worker.is_alive():
        warn(f"the run record was not logged as an artifact within {timeout:g} s; left out")
    elif failed:
        warn(f"the run record was not logged as an artifact ({failed[0]})")


class RunContext:
    """MLflow's run context provider interface (``in_context``, ``tags``), by duck typing:
    MLflow calls the two methods and checks no base class."""

    def in_context(self) -> bool:
        """In an image (its manifest is there) or under the entrypoint (a run id is set)."""
        try:
            return runrecord.default_manifest_path(os.environ).is_file() or bool(
                os.environ.get("REPRO_RUN_ID")
            )
        except Exception:
            return False

    def tags(self) -> dict[str, str]:
        try:
            tags = run_tags(os.environ, runrecord.default_manifest_path(os.environ))
        except Exception as exc:  # best effort: never fail the program over its tags
            warn(f"left out ({type(exc).__name__}: {exc})")
            return {}
        if not _ARMED:
            import atexit

            _ARMED.append(True)
            atexit.register(upload_artifacts)
        return tags
