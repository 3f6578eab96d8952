"""Run records compared: the one answer ``reprobuild diff`` and ``reprobuild verify`` both
give to "do these two runs' records agree, and where do they first differ".

A run record (``reprobuild.run``, written by the in-image runtime) and the framework records
of its run are reduced to a *stack view*: everything that describes the image, host, stack
and settings, less what differs between any two runs (run id, start time, the container's
hostname, the framework records' file pattern). Two views are compared as JSON
(:func:`reprobuild.checks.streams.diff_json`); the framework part only when both runs wrote it,
the processes' records taken in rank order (never in file-name order, which is process-id
order) and, where one run had several ranks, each rank's settings compared with its own.

Also the bounded reading both commands use for records a program may have written: at most
:data:`MAX_RECORD_BYTES`, nested at most :data:`MAX_DEPTH` deep, never through a symbolic
link. Standard library only (``verify --local`` runs where the Docker SDK is not installed).
"""

from __future__ import annotations

import json
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
        by_rank: dict[str, Any] = {}
        for record in sorted(records.frameworks, key=_process_order):
            settings = record.get("framework_settings")
            if isinstance(settings, dict):
                merged.update(settings)
                rank = _rank_of(record)
                if rank is not None:
                    by_rank[f"rank {rank}"] = settings
        view["frameworks"] = merged
        if len(by_rank) > 1:  # several ranks on one node: each compared with its own
            view["framework_ranks"] = by_rank
    return view


def _rank_of(record: Mapping[str, Any]) -> int | None:
    dist = record.get("distributed")
    rank = dist.get("rank") if isinstance(dist, Mapping) else None
    return rank if isinstance(rank, int) and not isinstance(rank, bool) else None


def _process_order(record: Mapping[str, Any]) -> tuple[int, str, str]:
    """Framework records in an order two runs of one job share: by rank, then by what the
    process ran and configured. Never by file name: it holds the process id, which the
    kernel hands out in whatever order the processes start (torchrun's ranks race)."""
    rank = _rank_of(record)
    return (
        -1 if rank is None else rank,
        json.dumps(record.get("argv"), sort_keys=True, default=str),
        json.dumps(record.get("framework_settings"), sort_keys=True, default=str),
    )


def compare_run_records(a: RunRecords, b: RunRecords) -> RecordAgreement:
    """Do two runs' records agree, and where do they differ (first difference first)."""
    both = bool(a.frameworks) and bool(b.frameworks)
    return RecordAgreement(tuple(diff_json(stack_view(a, both), stack_view(b, both))))


# ------------------------------------------------------------------------- CPU differences

LEVEL_NAMES = {
    "x86-64": "x86-64 (SSE2)",
    "x86-64-v2": "SSE4.2",
    "x86-64-v3": "AVX2",
    "x86-64-v4": "AVX-512",
    "armv8-a": "Armv8-A",
}
"""How a cause line names a level: an x86-64 one by the widest vector instructions it has;
aarch64's one baseline by its name, then what the CPU adds that kernels dispatch on."""

AARCH64_NOTABLE = ("asimdhp", "asimddp", "asimdfhm", "i8mm", "bf16", "sve", "sve2", "sme")
"""The aarch64 features a cause line names: NumPy, ATen, oneDNN and OpenBLAS dispatch on them."""


def _get(data: Any, *path: str) -> Any:
    for name in path:
        if not isinstance(data, Mapping):
            return None
        data = data.get(name)
    return data


def _cpu_of(records: RunRecords) -> dict[str, Any]:
    record = records.record or {}
    host_cpu = _get(record, "host", "cpu") or {}
    dispatch: dict[str, Any] = {}
    unportable: set[str] = set()
    for framework_record in records.frameworks:
        found = framework_record.get("cpu_dispatch")
        if isinstance(found, Mapping):
            dispatch.update(found)
        settings = framework_record.get("framework_settings")
        if isinstance(settings, Mapping):  # the runtime's verdict per framework (TensorFlow)
            unportable.update(
                str(name)
                for name, entry in settings.items()
                if isinstance(entry, Mapping) and entry.get("portable") is False
            )
    mode = _get(record, "cpu", "mode") or "native"  # records before issue 31: native only
    model = host_cpu.get("model") if isinstance(host_cpu, Mapping) else None
    emulator = _get(record, "cpu", "emulator")
    emulated = None
    if isinstance(emulator, list) and emulator:
        # verify --cpu: /proc/cpuinfo is the host's under qemu-user; the model is qemu's -cpu
        emulated = str(emulator[-1])
        model = f"{emulated} (emulated by qemu)"
    features = host_cpu.get("features") if isinstance(host_cpu, Mapping) else None
    return {
        "mode": mode,
        "level": _get(record, "cpu", "level"),
        "host_level": host_cpu.get("level") if isinstance(host_cpu, Mapping) else None,
        # aarch64's one level says little: the features and SVE's width tell its CPUs apart
        "features": tuple(sorted(str(f) for f in features)) if isinstance(features, list) else (),
        "sve_bits": host_cpu.get("sve_vector_bits") if isinstance(host_cpu, Mapping) else None,
        "model": model,
        "emulated": emulated,
        "vendor": host_cpu.get("vendor") if isinstance(host_cpu, Mapping) else None,
        "dispatch": dispatch,
        "unportable": unportable,
    }


def _describe(cpu: Mapping[str, Any]) -> str:
    """The CPU's level by name (``AVX2``), and the CPU qemu emulated where it was one (``AVX2
    (Haswell, emulated by qemu)``): a line that names only levels would hide which leg of
    ``verify --cpu`` ran where, and only on hosts whose level differs from the emulated one."""
    level = cpu.get("host_level")
    if not level:
        return str(cpu.get("model") or "unknown")
    name = LEVEL_NAMES.get(level, str(level))
    if level == "armv8-a":
        has = [f for f in AARCH64_NOTABLE if f in cpu.get("features", ())]
        if cpu.get("sve_bits"):
            has = [f"{f} {cpu['sve_bits']}-bit" if f == "sve" else f for f in has]
        name += f" ({', '.join(has)})" if has else " (NEON only)"
    return f"{name} ({cpu['emulated']}, emulated by qemu)" if cpu.get("emulated") else name


def cpu_cause(a: RunRecords, b: RunRecords) -> str | None:
    """Why two runs on different CPUs may have other bits, in one line (issue 31); None when
    both ran on the same CPU (same model and level) or the records do not say.

    - both native on CPUs of other levels or models: expected to differ, use portable;
    - one native, one portable: expected to differ, the modes pin other kernels;
    - both portable at one level: the same bits are expected; what each library dispatched
      is compared, and a library that dispatched differently is named;
    - portable at two levels: expected to differ;
    - portable, with a framework the runtime found not portable (TensorFlow, named at start-up):
      expected to differ on other CPUs.
    """
    ca, cb = _cpu_of(a), _cpu_of(b)
    facts = ("host_level", "model", "vendor", "features", "sve_bits")
    same_cpu = all(ca[fact] == cb[fact] for fact in facts)
    if ca["mode"] == cb["mode"] == "native":
        return None if same_cpu else _native_cause(ca, cb)
    if ca["mode"] != cb["mode"] or ca["level"] != cb["level"]:
        return (
            f"CPU mode {ca['mode']}{_at(ca)} vs {cb['mode']}{_at(cb)}: expected to differ "
            "(they pin other kernels); run both in the same mode"
        )
    unportable = sorted(ca["unportable"] | cb["unportable"])
    if unportable and not same_cpu:
        verb = "is" if len(unportable) == 1 else "are"
        return (
            f"portable mode{_at(ca)} on {_describe(ca)} vs {_describe(cb)}, but "
            f"{', '.join(unportable)} {verb} not portable across CPUs (the run's start-up "
            "notice says why): expected to differ; the same CPU model gives the same bits"
        )
    keys = sorted(set(ca["dispatch"]) & set(cb["dispatch"]))
    apart = [k for k in keys if ca["dispatch"][k] != cb["dispatch"][k]]
    if apart:
        shown = ", ".join(f"{k} {ca['dispatch'][k]!r} vs {cb['dispatch'][k]!r}" for k in apart)
        return f"portable mode{_at(ca)}, but the libraries dispatched differently: {shown}"
    if same_cpu:
        return None
    return (
        f"portable mode{_at(ca)} on {_describe(ca)} vs {_describe(cb)}: the same bits are "
        "expected; outputs that differ are a reprobuild bug worth reporting"
    )


def _native_cause(ca: Mapping[str, Any], cb: Mapping[str, Any]) -> str:
    """Two native runs on CPUs that differ: which, by level (and features on aarch64), or by
    model where those are the same or unknown."""
    where = f"{_describe(ca)} vs {_describe(cb)}"
    if ca["host_level"] is None or cb["host_level"] is None:
        where = f"{ca['model'] or 'unknown'} vs {cb['model'] or 'unknown'}"
    elif all(ca[fact] == cb[fact] for fact in ("host_level", "features", "sve_bits")):
        where = f"{ca['model'] or 'unknown'} vs {cb['model'] or 'unknown'} (both {_describe(ca)})"
    machine = "aarch64" if ca["host_level"] == "armv8-a" else "x86-64"
    return (
        f"native mode on {where}: expected to differ (each library dispatches by CPU); "
        f"use portable (REPRO_CPU=portable) for the same bits on every {machine} CPU"
    )


def _at(cpu: Mapping[str, Any]) -> str:
    return f" ({cpu['level']})" if cpu.get("level") else ""


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
