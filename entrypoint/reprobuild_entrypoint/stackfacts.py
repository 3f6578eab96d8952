"""The facts of the stack a tracker's run records: what the MLflow tags
(:mod:`~reprobuild_entrypoint.mlflowtags`) and the W&B run config
(:mod:`~reprobuild_entrypoint.wandbrun`) both carry, computed once here.

They come from what the runtime already knows: the image's manifest (its sha256 and the build's
identity), this process's settings (seed, rank seed, mode, threads, trial: each torchrun rank
reads its own ``RANK``) and, under the entrypoint, the run record (host CPU and GPU facts, the
runtime's run id): in ``REPRO_RUN_DIR``, or where the entrypoint put it without one.
Standard library only.
"""

from __future__ import annotations

import json
from pathlib import Path

from reprobuild_entrypoint import runrecord
from reprobuild_entrypoint.contract import IMAGE_VAR, RUN_DIR_VAR, RUN_RECORD_VAR
from reprobuild_entrypoint.settings import from_environ

TYPE_CHECKING = False
if TYPE_CHECKING:
    from collections.abc import Mapping
    from typing import Any


def run_record_path(environ: Mapping[str, str]) -> Path | None:
    """``$REPRO_RUN_DIR/run-<id>.json``, else the record the entrypoint wrote to its default
    place (``REPRO_RUN_RECORD``), else None."""
    run_dir, run_id = environ.get(RUN_DIR_VAR, ""), environ.get("REPRO_RUN_ID", "")
    if run_dir and run_id:
        return runrecord.run_record_path(run_dir, run_id)
    record = environ.get(RUN_RECORD_VAR, "")
    return Path(record) if record and run_id else None


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


def run_facts(environ: Mapping[str, str], manifest_path: Path) -> dict[str, Any]:
    """Name -> value (``seed`` -> 11, ``cpu.mode`` -> ``"native"``), from the manifest, the
    settings in ``environ`` and the run record (pure but for reading those two files). Values
    that are unknown are left out, never None. A bad setting raises ``SettingsError``."""
    settings = from_environ(environ)
    manifest = runrecord.manifest_info(manifest_path)
    record = _read_record(run_record_path(environ))
    cpu_host = _section(record, "host", "cpu")
    cpu_run = _section(record, "cpu") or runrecord.cpu_section(settings)
    gpu = _section(record, "host", "gpu")
    devices = [d for d in gpu.get("devices") or [] if isinstance(d, dict)]
    names = sorted({str(d["name"]) for d in devices if d.get("name")})
    values: dict[str, Any] = {
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
    return {key: value for key, value in values.items() if value is not None and value != ""}


def artifact_files(environ: Mapping[str, str], manifest_path: Path) -> list[Path]:
    """The manifest and this run's record, those that exist."""
    return [p for p in (manifest_path, run_record_path(environ)) if p is not None and p.is_file()]


def in_context(environ: Mapping[str, str]) -> bool:
    """In an image (its manifest is there) or under the entrypoint (a run id is set)."""
    try:
        return runrecord.default_manifest_path(environ).is_file() or bool(
            environ.get("REPRO_RUN_ID")
        )
    except Exception:
        return False
