"""Tags for every MLflow run a program in the image starts, with no change to the program.

MLflow asks each *run context provider* registered under the entry point group
``mlflow.run_context_provider`` for tags when a run is created (``mlflow.start_run``, and the
runs ``mlflow.autolog`` starts). The image carries a small distribution record beside the
runtime (``reprobuild_mlflow-<version>.dist-info``, written by :func:`dist_info`) whose entry
point names :class:`RunContext`; only MLflow loads this module. It imports nothing of MLflow's
at module level and never raises into MLflow: a failure is one warning line on stderr.

The tags (:func:`run_tags`) are the stack's facts (:mod:`~reprobuild_entrypoint.stackfacts`,
the same the W&B run config carries) under ``reprobuild.``.

At the first run it tags, it arranges (``atexit``) to log the manifest and the run record as
artifacts (under ``reprobuild/``) of the runs this process left active or ended last, if MLflow
is still loaded then. That upload is bounded by :data:`UPLOAD_TIMEOUT_S` in a daemon thread:
a tracking server that went away never holds the program's exit longer than that.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

from reprobuild_entrypoint import __version__, runrecord
from reprobuild_entrypoint.stackfacts import artifact_files, in_context, run_facts

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


def run_tags(environ: Mapping[str, str], manifest_path: Path) -> dict[str, str]:
    """The tags: :func:`~reprobuild_entrypoint.stackfacts.run_facts` under ``reprobuild.``,
    as strings (pure but for reading the manifest and run record). Values that are unknown are
    left out, never ``"None"``."""
    facts = run_facts(environ, manifest_path)
    return {TAG_PREFIX + key: str(value)[:MAX_TAG] for key, value in facts.items()}


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
        return in_context(os.environ)

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
