"""MLflow runs as ``reprobuild diff`` inputs: ``runs:/<id>``, or a bare run ID (32 hex digits)
with ``MLFLOW_TRACKING_URI`` set. A run started in a reprobuild image carries the run record and
the manifest as artifacts under ``reprobuild/`` (:mod:`reprobuild_entrypoint.mlflowtags`); they
are downloaded into a temporary directory and read like the files themselves. MLflow is
imported only here, and only when such an input is given: it is not one of reprobuild's
dependencies (``pip install mlflow-skinny``)."""

from __future__ import annotations

import os
import re
import tempfile
from pathlib import Path
from typing import Any

from reprobuild.errors import DiffInputError

RUN_URI = re.compile(r"runs:/([0-9a-f]{32})/?")
BARE_RUN_ID = re.compile(r"[0-9a-f]{32}")
TRACKING_VAR = "MLFLOW_TRACKING_URI"
ARTIFACT_DIR = "reprobuild"  # reprobuild_entrypoint.mlflowtags.ARTIFACT_DIR, checked by a test


def run_id_of(value: str) -> str | None:
    """The MLflow run ID ``value`` names, or None when it names none."""
    match = RUN_URI.fullmatch(value)
    if match is not None:
        return match.group(1)
    if BARE_RUN_ID.fullmatch(value) and os.environ.get(TRACKING_VAR):
        return value
    return None


def _mlflow() -> Any:
    try:
        import mlflow
    except ImportError:
        raise DiffInputError(
            "reading MLflow runs needs the mlflow package, which is not installed here",
            hint="pip install mlflow-skinny (the client is enough)",
        ) from None
    return mlflow


def download(run_id: str, into: Path) -> Path:
    """The run's run record (else its manifest), downloaded under ``into``."""
    mlflow = _mlflow()
    try:
        local = mlflow.artifacts.download_artifacts(
            run_id=run_id, artifact_path=ARTIFACT_DIR, dst_path=str(into)
        )
    except Exception as exc:  # MLflow raises its own and requests' errors alike
        first = (str(exc).splitlines() or [""])[0][:200]
        raise DiffInputError(
            f"runs:/{run_id}: cannot read its {ARTIFACT_DIR}/ artifacts from "
            f"{os.environ.get(TRACKING_VAR) or 'the default tracking store'}: {first}",
            hint="check MLFLOW_TRACKING_URI and the run ID; runs started in a reprobuild "
            "image carry them",
        ) from None
    folder = Path(local)
    records = sorted(folder.glob("run-*.json"))
    records = [
        p for p in records if not p.name.endswith("-exit.json") and "-frameworks-" not in p.name
    ]
    if records:
        return records[0]
    if (folder / "manifest.json").is_file():
        return folder / "manifest.json"
    raise DiffInputError(
        f"runs:/{run_id} has no run record or manifest under {ARTIFACT_DIR}/",
        hint="only runs started in a reprobuild image carry them",
    )


def temporary_dir() -> tempfile.TemporaryDirectory[str]:
    return tempfile.TemporaryDirectory(prefix="reprobuild-mlflow-")


RUN_ID_TAG = "reprobuild.run_id"  # reprobuild_entrypoint.mlflowtags: the run record's run_id
VERDICT_TAGS = ("reprobuild.verify.result", "reprobuild.verify.summary")
MAX_TAG = 5000


def tracking_uri() -> str:
    """``MLFLOW_TRACKING_URI``, which ``verify --mlflow`` needs (one error line without it)."""
    from reprobuild.errors import VerifyUsageError

    uri = os.environ.get(TRACKING_VAR, "").strip()
    if not uri:
        raise VerifyUsageError(
            f"--mlflow needs {TRACKING_VAR}: set it to the tracking server the runs log to"
        )
    return uri


QUIET_URL_VAR = "MLFLOW_SUPPRESS_PRINTING_URL_TO_STDOUT"


def run_env(env: list[str], *, local: bool, network: bool, nodes: int | None) -> list[str]:
    """``verify --mlflow``: the ``NAME=VALUE`` entries to add to the runs' ``env`` (those it
    does not set already): the tracking URI, and MLflow's "View run <name> at <url>" line off
    (it names each run, so every verify against a server would diverge on it)."""
    uri = tracking_uri()
    if not local:
        check_reachable(uri, network=network, nodes=nodes is not None)
    given = {entry.split("=", 1)[0] for entry in env}
    wanted = {TRACKING_VAR: uri, QUIET_URL_VAR: "true"}
    return [f"{name}={value}" for name, value in wanted.items() if name not in given]


def check_reachable(uri: str, *, network: bool, nodes: bool) -> None:
    """``verify IMAGE --mlflow``: the runs' containers must reach a tracking server at ``uri``.
    One error line where they cannot: no network, a multi-node run's internal networks, or
    this host's loopback (a container's loopback is its own). Other schemes are left alone."""
    from urllib.parse import urlsplit

    from reprobuild.errors import VerifyUsageError

    parts = urlsplit(uri)
    if parts.scheme not in ("http", "https"):
        return
    hint = (
        "serve MLflow on an address the containers reach, such as the Docker bridge's "
        "(`ip -4 addr show docker0`: http://172.17.0.1:PORT), and pass --network"
    )
    if nodes:
        raise VerifyUsageError(
            f"--mlflow with --nodes: each run's containers are on an internal network with no "
            f"route to {uri}",
            hint="verify the tagging with one container per run (drop --nodes)",
        )
    if not network:
        raise VerifyUsageError(
            f"--mlflow: the runs' containers have no network to reach {uri}: add --network",
            hint=hint,
        )
    host = (parts.hostname or "").lower()
    if host == "localhost" or host.startswith("127.") or host == "::1":
        raise VerifyUsageError(
            f"--mlflow: {uri} is this host's loopback, which the runs' containers cannot reach "
            "(a container's loopback is its own)",
            hint=hint,
        )


def log_verdict(run_ids: list[str], result: str, summary: str, report: str) -> str:
    """Tag the MLflow runs whose ``reprobuild.run_id`` is one of ``run_ids`` (the verified
    runs' records) with the verdict; the line to print. Never raises: the verdict stands
    whatever the tracking server does."""
    try:
        client = _mlflow().MlflowClient()
        experiments = [e.experiment_id for e in client.search_experiments()]
        found = [
            run
            for run_id in run_ids
            if experiments and re.fullmatch(r"[A-Za-z0-9._-]+", run_id)  # the record's pattern
            for run in client.search_runs(experiments, f"tags.`{RUN_ID_TAG}` = '{run_id}'")
        ]
        for run in found:
            for key, value in (
                (VERDICT_TAGS[0], result),
                (VERDICT_TAGS[1], summary[:MAX_TAG]),
                ("reprobuild.verify.report", report[:MAX_TAG]),
                ("reprobuild.verify.runs", str(len(run_ids))),
            ):
                client.set_tag(run.info.run_id, key, value)
    except Exception as exc:  # the verdict is the report's; MLflow only repeats it
        first = (str(exc).splitlines() or [""])[0][:200]
        return f"mlflow: the verdict was not logged ({type(exc).__name__}: {first})"
    if not found:
        return f"mlflow: no MLflow run carries the verified runs' {RUN_ID_TAG}: nothing tagged"
    ids = ", ".join(run.info.run_id for run in found)
    return f"mlflow: verdict '{result}' logged to {len(found)} run(s): {ids}"
