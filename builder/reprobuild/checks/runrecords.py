"""Run records compared: the one answer ``reprobuild diff`` and ``reprobuild verify`` both
give to "do these two runs' records agree, and where do they first differ".

A run record (``reprobuild.run``, written by the in-image runtime) and the framework records
of its run are reduced to a *stack view*: everything that describes the image, host, stack
and settings, less what differs between any two runs (run id, start time, the container's
hostname, the framework records' file pattern). Two views are compared as JSON
(:func:`reprobuild.checks.streams.diff_json`); the framework part only when both runs wrote it.

Also the bounded reading both commands use for records a program may have written: at most
:data:`MAX_RECORD_BYTES`, nested at most :data:`MAX_DEPTH` deep, never through a symbolic
link. Standard library only (``verify --local`` runs where the Docker SDK is not installed).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from reprobuild._util import jsonload
from reprobuild.checks.streams import JsonDifference, diff_json
from reprobuild.errors import ReprobuildError

VOLATILE = ("run_id", "started", "framework_records")
"""Run-record fields that differ between any two runs and say nothing about the stack."""
MAX_RECORD_BYTES = 16 * 1024 * 1024
MAX_DEPTH = jsonload.MAX_DEPTH
MAX_RECORD_FILES = 256
"""Framework records read per run at most (one per process that imported a framework)."""


class RecordReadError(ReprobuildError):
    """A record file that cannot be read as a bounded JSON object; the message says why."""


@dataclass(frozen=True)
class RunRecords:
    """One run's records: its run record (None: the runtime wrote none) and framework
    records."""

    record: Mapping[str, Any] | None
    frameworks: tuple[Mapping[str, Any], ...] = ()


@dataclass(frozen=True)
class RecordAgreement:
    """The answer: the differences in order, the first one first; none when they agree."""

    differences: tuple[JsonDifference, ...]

    @property
    def agree(self) -> bool:
        return not self.differences

    @property
    def first(self) -> str | None:
        """Where they first differ (``host.cpu.model``); None when they agree."""
        return self.differences[0].where if self.differences else None

    def to_dict(self) -> dict[str, Any]:
        return {
            "agree": self.agree,
            "first_difference": self.first,
            "differences": [d.to_dict() for d in self.differences],
        }


def stack_view(records: RunRecords, with_frameworks: bool) -> dict[str, Any]:
    """What of a run's records describes its stack (see the module docstring)."""
    view = {k: v for k, v in (records.record or {}).items() if k not in VOLATILE}
    if isinstance(view.get("host"), dict):
        view["host"] = {k: v for k, v in view["host"].items() if k != "hostname"}
    if with_frameworks:
        merged: dict[str, Any] = {}
        for record in records.frameworks:
            settings = record.get("framework_settings")
            if isinstance(settings, dict):
                merged.update(settings)
        view["frameworks"] = merged
    return view


def compare_run_records(a: RunRecords, b: RunRecords) -> RecordAgreement:
    """Do two runs' records agree, and where do they differ (first difference first)."""
    both = bool(a.frameworks) and bool(b.frameworks)
    return RecordAgreement(tuple(diff_json(stack_view(a, both), stack_view(b, both))))


# ---------------------------------------------------------------------------------- reading


def parse_bounded_json(raw: bytes, *, max_bytes: int = MAX_RECORD_BYTES) -> Any:
    """``raw`` parsed by the one bounded JSON loader (size, depth, number length, duplicate
    keys); :class:`RecordReadError` when it is refused."""
    return jsonload.loads(raw, "the document", error=RecordReadError, max_bytes=max_bytes)


def read_bounded(path: Path, *, max_bytes: int = MAX_RECORD_BYTES) -> bytes:
    """A regular file's bytes, at most ``max_bytes``, never through a symbolic link."""
    try:
        return jsonload.read_file(
            path, path.name, error=RecordReadError, max_bytes=max_bytes, nofollow=True
        )
    except OSError as exc:
        raise RecordReadError(f"cannot read {path.name}: {exc.strerror or exc}") from None


def load_record(path: Path) -> dict[str, Any]:
    """One record file as a JSON object; what went wrong, as ``{"error": ...}``, when it
    cannot be read (a run's records are evidence, not input verify must trust)."""
    try:
        data = jsonload.loads(read_bounded(path), path.name, error=RecordReadError)
    except RecordReadError as exc:
        return {"error": str(exc)}
    return data if isinstance(data, dict) else {"error": f"{path.name} is not a JSON object"}


def read_run_dir(record_dir: Path) -> RunRecords:
    """The run record and framework records a run's runtime wrote into ``record_dir`` (see
    ``reprobuild_entrypoint.runrecord``)."""
    run_record: dict[str, Any] | None = None
    frameworks: list[dict[str, Any]] = []
    names = sorted(p.name for p in record_dir.iterdir() if p.name.startswith("run-"))
    for name in names:
        if not name.endswith(".json"):
            continue
        if "-frameworks-" in name:
            if len(frameworks) < MAX_RECORD_FILES:
                frameworks.append(load_record(record_dir / name))
        elif name.endswith("-exit.json"):  # how the run ended (init only); sorts first
            continue
        elif run_record is None:
            run_record = load_record(record_dir / name)
    return RunRecords(run_record, tuple(frameworks))
