"""W&B runs as ``reprobuild diff`` inputs, and ``verify --wandb``'s verdict in them.

A run started in a reprobuild image keeps the run record and the manifest among its files,
under ``reprobuild/`` (:mod:`reprobuild_entrypoint.wandbrun`); they are read like the files
themselves. Two kinds of input:

- an offline run's directory (``wandb/offline-run-*``, or any run directory W&B wrote): read as
  it lies on disk, nothing of wandb imported;
- ``ENTITY/PROJECT/RUN_ID`` of a run on a W&B server (``WANDB_API_KEY`` set; ``WANDB_BASE_URL``
  for a server of one's own): its two files downloaded through wandb's public API
  (``wandb.Api().run(path).files()``) into a temporary directory. wandb is imported only then:
  it is not one of reprobuild's dependencies (``pip install wandb``).
"""

from __future__ import annotations

import os
import re
import tempfile
from pathlib import Path
from typing import Any

from reprobuild.errors import DiffInputError

FILES_DIR = "files/reprobuild"  # reprobuild_entrypoint.wandbrun.FILES_DIR under files/: a test
FILES_DIR_ONLINE = "reprobuild"  # the same folder as a run's file names on the server
MANIFEST_NAME = "manifest.json"  # reprobuild_entrypoint.wandbrun.MANIFEST_NAME, checked likewise


KEY_VAR = "WANDB_API_KEY"
# ENTITY/PROJECT/RUN_ID: W&B's names are letters, digits, '-', '_' and '.'. An image reference
# of three parts names its registry first (a '.', a ':' or localhost) or carries a tag: never
# this form, which Docker Hub (no registry part) does not serve.
RUN_PATH = re.compile(
    r"(?P<entity>[A-Za-z0-9_-][A-Za-z0-9._-]*)/(?P<project>[A-Za-z0-9._-]+)/"
    r"(?P<run>[A-Za-z0-9_-]+)"
)
STACK_FILES = ("run-", MANIFEST_NAME)


def run_path_of(value: str) -> str | None:
    """``ENTITY/PROJECT/RUN_ID`` when ``value`` is one (a W&B run online), else None."""
    match = RUN_PATH.fullmatch(value)
    if match is None or match.group("entity").lower() == "localhost":
        return None
    if "." in match.group("entity"):  # a registry host: an image reference
        return None
    return value


def _wandb() -> Any:
    try:
        import wandb
    except ImportError:
        raise DiffInputError(
            "reading W&B runs online needs the wandb package, which is not installed here",
            hint="pip install wandb",
        ) from None
    return wandb


def download(path: str, into: Path) -> Path:
    """The run record (else the manifest) of the W&B run ``path``, downloaded under ``into``
    through wandb's public API. One error line without ``WANDB_API_KEY``, for a run the server
    does not have, or for a run with neither file."""
    key = os.environ.get(KEY_VAR, "").strip()
    if not key:
        raise DiffInputError(
            f"{path} is no file here; read as a W&B run (ENTITY/PROJECT/RUN_ID) it needs "
            f"{KEY_VAR}: set it to your API key (https://wandb.ai/authorize), and "
            "WANDB_BASE_URL for a server of your own",
        )
    wandb = _wandb()
    try:
        run = wandb.Api(api_key=key, timeout=30).run(path)
        names = sorted(
            f.name
            for f in run.files()
            if f.name.startswith(f"{FILES_DIR_ONLINE}/")
            and f.name.rsplit("/", 1)[-1].startswith(STACK_FILES)
        )
        chosen = _stack_name(names)
        if chosen is None:
            raise DiffInputError(
                f"{path} is a W&B run with no run record or manifest under {FILES_DIR_ONLINE}/",
                hint="only W&B runs started in a reprobuild image carry them",
            )
        run.file(chosen).download(root=str(into), replace=True)
    except DiffInputError:
        raise
    except Exception as exc:  # wandb raises its own, and requests' and protobuf's, errors
        first = (str(exc).strip().splitlines() or [type(exc).__name__])[0][:200]
        raise DiffInputError(
            f"{path}: cannot read this W&B run: {first}",
            hint="check ENTITY/PROJECT/RUN_ID and WANDB_API_KEY (WANDB_BASE_URL for your own "
            "server)",
        ) from None
    return into / chosen


def _stack_name(names: list[str]) -> str | None:
    """The run record among a run's ``reprobuild/`` files, else its manifest."""
    records = [
        n
        for n in names
        if n.endswith(".json")
        and not n.endswith("-exit.json")
        and "-frameworks-" not in n
        and n.rsplit("/", 1)[-1].startswith("run-")
    ]
    if records:
        return records[0]
    manifest = f"{FILES_DIR_ONLINE}/{MANIFEST_NAME}"
    return manifest if manifest in names else None


def temporary_dir() -> tempfile.TemporaryDirectory[str]:
    return tempfile.TemporaryDirectory(prefix="reprobuild-wandb-")


def is_run_dir(path: Path) -> bool:
    """A W&B run directory: its ``run-<id>.wandb`` file is in it."""
    return path.is_dir() and any(path.glob("run-*.wandb"))


def stack_file(run_dir: Path, source: str) -> Path:
    """The run record the run carries (else its manifest), to read in its place."""
    folder = run_dir / FILES_DIR
    records = [
        p
        for p in sorted(folder.glob("run-*.json"))
        if not p.name.endswith("-exit.json") and "-frameworks-" not in p.name
    ]
    if records:
        return records[0]
    if (folder / MANIFEST_NAME).is_file():
        return folder / MANIFEST_NAME
    raise DiffInputError(
        f"{source} is a W&B run with no run record or manifest under {FILES_DIR}/",
        hint="only W&B runs started in a reprobuild image carry them",
    )


# ------------------------------------------------------------------ verify --wandb

MODE_VAR = "WANDB_MODE"
DIR_VAR = "WANDB_DIR"
VERDICT_NAME = "verify.json"  # files/reprobuild/verify.json in each verified run


def run_env(env: list[str], *, local: bool, keep: Path | None) -> list[str]:
    """``verify --wandb``: the ``NAME=VALUE`` entries to add to the runs' ``env``: W&B in
    offline mode, its directory on the run's record mount (``/reprobuild-run/wandb``), so that
    each run's W&B run directory is kept on this host under ``--keep DIR``. One error line
    where that cannot be: ``--local`` (the runs share this host's paths), no ``--keep``, or a
    ``WANDB_MODE``/``WANDB_DIR`` of the user's own."""
    from reprobuild.errors import VerifyUsageError
    from reprobuild_entrypoint.contract import RECORD_DIR

    if local:
        raise VerifyUsageError(
            "--wandb marks the W&B runs of an image's containers: drop --local",
            hint="verify IMAGE --wandb --keep DIR -- CMD",
        )
    if keep is None:
        raise VerifyUsageError(
            "--wandb needs --keep DIR: the runs' offline W&B directories are kept there, with "
            "the verdict, for `wandb sync`",
            hint="verify IMAGE --wandb --keep DIR -- CMD",
        )
    given = {entry.split("=", 1)[0]: entry.split("=", 1)[-1] for entry in env}
    for name, value in ((MODE_VAR, "offline"), (DIR_VAR, RECORD_DIR)):
        if name in given and given[name] != value:
            raise VerifyUsageError(
                f"--wandb sets {name}={value} in every run: drop -e {name}={given[name]}",
                hint="the runs are recorded offline and kept under --keep DIR for `wandb sync`",
            )
    wanted = {MODE_VAR: "offline", DIR_VAR: RECORD_DIR}
    return [f"{name}={value}" for name, value in wanted.items() if name not in given]


def offline_runs(keep: Path) -> list[Path]:
    """The offline W&B run directories of ``verify --keep DIR``'s runs, run 1's first."""
    found = [
        path
        for record_dir in sorted(keep.glob("run-*/records"))
        for path in sorted((record_dir / "wandb").glob("offline-run-*"))
        if not path.is_symlink() and is_run_dir(path)
    ]
    return sorted(found, key=lambda p: (int(p.parents[2].name.split("-")[1]), p.name))


def _record_id(run_dir: Path) -> str | None:
    """The run id of the run record the W&B run carries (its ``files/reprobuild/run-*.json``)."""
    import json

    try:
        path = stack_file(run_dir, str(run_dir))
        data = json.loads(path.read_bytes())
    except (DiffInputError, OSError, ValueError):
        return None
    run_id = data.get("run_id") if isinstance(data, dict) else None
    return run_id if isinstance(run_id, str) else None


def log_verdict(keep: Path, run_ids: list[str], result: str, summary: str, report: str) -> str:
    """Write the verdict into each kept W&B run whose run record is one of ``run_ids`` (the
    verified runs'): ``files/reprobuild/verify.json``, a file of the run that ``wandb sync``
    uploads with the others; the line to print. Never raises: the verdict stands whatever
    happens to the copy."""
    import json

    try:
        marked: list[str] = []
        for run_dir in offline_runs(keep):
            if _record_id(run_dir) not in run_ids:
                continue
            verdict = {
                "kind": "reprobuild.verify.verdict",
                "result": result,
                "summary": summary,
                "report": report,
                "runs": len(run_ids),
                "run_ids": run_ids,
            }
            target = run_dir / FILES_DIR / VERDICT_NAME
            target.write_text(json.dumps(verdict, indent=2, sort_keys=True) + "\n")
            marked.append(run_dir.name.rsplit("-", 1)[-1])
    except OSError as exc:
        return f"wandb: the verdict was not written ({exc.strerror or exc})"
    if not marked:
        return (
            f"wandb: no offline W&B run under {keep} carries the verified runs' records: "
            "nothing marked"
        )
    return (
        f"wandb: verdict '{result}' written to {len(marked)} offline run(s): "
        f"{', '.join(marked)} ({FILES_DIR}/{VERDICT_NAME}; upload with `wandb sync "
        f"{keep}/run-*/records/wandb/offline-run-*`)"
    )
