"""W&B runs as ``reprobuild diff`` inputs: an offline run's directory (``wandb/offline-run-*``,
or any run directory W&B wrote). A run started in a reprobuild image keeps the run record and
the manifest among its files, under ``files/reprobuild/``
(:mod:`reprobuild_entrypoint.wandbrun`); they are read like the files themselves. Nothing of
wandb is imported: the directory is read as it lies on disk."""

from __future__ import annotations

from pathlib import Path

from reprobuild.errors import DiffInputError

FILES_DIR = "files/reprobuild"  # reprobuild_entrypoint.wandbrun.FILES_DIR under files/: a test
MANIFEST_NAME = "manifest.json"  # reprobuild_entrypoint.wandbrun.MANIFEST_NAME, checked likewise


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
