"""The saved result of ``reprobuild verify``: a typed, schema-versioned record
(:class:`VerifyReport`), where it goes by default, and how it is written (atomically, to a
place checked writable before any run starts)."""

from __future__ import annotations

import datetime as _dt
import json
import os
import stat
import tempfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from reprobuild import __version__
from reprobuild._util import jsonload
from reprobuild._util.fsutil import write_atomic
from reprobuild.checks.streams import (
    Divergence,
    JsonDifference,
    MetricSeries,
    Number,
    is_json_number,
)
from reprobuild.checks.verify.spec import DataMount
from reprobuild.checks.volatile import Ignored
from reprobuild.errors import OutputError, ReprobuildError

SCHEMA_VERSION = 1
REPORT_KIND = "reprobuild.verify"
REPORT_PREFIX = "reprobuild-verify"
REPORT_DIR = Path(".reprobuild") / "verify"
"""Where reports go by default, under the current directory (git-ignored with the rest of
``.reprobuild/``): never loose files in the project root."""
RESULTS = ("identical", "diverged", "failed")


@dataclass(frozen=True)
class FileDigest:
    sha256: str
    size: int

    def to_dict(self) -> dict[str, Any]:
        return {"sha256": self.sha256, "size": self.size}

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> FileDigest:
        return cls(str(data["sha256"]), int(data["size"]))


@dataclass(frozen=True)
class Failure:
    """Why the verification could not conclude: a run's exit, or a declared output that no run
    wrote (``run`` and ``exit_code`` None)."""

    message: str
    run: int | None = None
    exit_code: int | None = None
    stderr_tail: tuple[str, ...] = ()
    hint: str | None = None

    def to_dict(self) -> dict[str, Any]:
        return {
            "message": self.message,
            "run": self.run,
            "exit_code": self.exit_code,
            "stderr_tail": list(self.stderr_tail),
            "hint": self.hint,
        }

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> Failure:
        return cls(
            message=str(data["message"]),
            run=data.get("run"),
            exit_code=data.get("exit_code"),
            stderr_tail=tuple(data.get("stderr_tail") or ()),
            hint=data.get("hint"),
        )


@dataclass(frozen=True)
class RunReport:
    """One run: how it ended, what it printed and wrote, and the records its runtime wrote."""

    run: int
    exit_code: int | None
    """None when the run's exit status could not be read."""
    killed: bool
    """Stopped by verify because another run already diverged or failed."""
    elapsed_s: float
    stdout_lines: int
    stdout_sha256: str
    """Of the stdout bytes received (all of them unless the run was killed)."""
    stderr_tail: tuple[str, ...] = ()
    outputs: dict[str, FileDigest] = field(default_factory=dict)
    run_record: dict[str, Any] | None = None
    """The runtime's run record (``run-<id>.json``); None when the image has no runtime."""
    framework_records: tuple[dict[str, Any], ...] = ()
    record_differences: tuple[JsonDifference, ...] = ()
    """How this run's records differ from run 1's, leaving out what differs in every run
    (run id, start time, container hostname): host, CPU, GPU, driver, stack, settings."""
    ignored: Ignored = field(default_factory=Ignored)
    """What of this run's stdout was not compared: redraws folded, wall-clock fields."""
    series: dict[str, MetricSeries] = field(default_factory=dict)
    """The named numbers of its stdout (``loss 0.41``), per name, as the comparison read them:
    what ``reprobuild report`` plots."""
    series_truncated: bool = False
    """Some named numbers were left out of ``series`` (its bounds)."""

    def to_dict(self) -> dict[str, Any]:
        return {
            "run": self.run,
            "exit_code": self.exit_code,
            "killed": self.killed,
            "elapsed_s": self.elapsed_s,
            "stdout_lines": self.stdout_lines,
            "stdout_sha256": self.stdout_sha256,
            "stderr_tail": list(self.stderr_tail),
            "outputs": {name: d.to_dict() for name, d in self.outputs.items()},
            "run_record": self.run_record,
            "framework_records": list(self.framework_records),
            "record_differences": [d.to_dict() for d in self.record_differences],
            "ignored": self.ignored.to_dict(),
            "series": {name: s.to_dict() for name, s in self.series.items()},
            "series_truncated": self.series_truncated,
        }

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> RunReport:
        return cls(
            run=int(data["run"]),
            exit_code=data.get("exit_code"),
            killed=bool(data["killed"]),
            elapsed_s=float(data["elapsed_s"]),
            stdout_lines=int(data["stdout_lines"]),
            stdout_sha256=str(data["stdout_sha256"]),
            stderr_tail=tuple(data.get("stderr_tail") or ()),
            outputs={k: FileDigest.from_dict(v) for k, v in (data.get("outputs") or {}).items()},
            run_record=data.get("run_record"),
            framework_records=tuple(data.get("framework_records") or ()),
            record_differences=tuple(
                JsonDifference.from_dict(d) for d in data.get("record_differences") or ()
            ),
            ignored=Ignored.from_dict(data.get("ignored") or {}),
            series={
                str(name): MetricSeries.from_dict(s)
                for name, s in (data.get("series") or {}).items()
            },
            series_truncated=bool(data.get("series_truncated")),
        )


@dataclass(frozen=True)
class StdoutCompare:
    """How stdout was compared (``--ignore``, ``--no-default-ignore``)."""

    fold_redraws: bool = True
    """Lines compared as a terminal shows them: progress-bar redraws folded."""
    builtin_rules: bool = True
    """The built-in wall-clock rules (:data:`reprobuild.checks.volatile.DEFAULT_RULES`) applied."""
    patterns: tuple[str, ...] = ()
    """The user's ``--ignore`` patterns."""

    def to_dict(self) -> dict[str, Any]:
        return {
            "fold_redraws": self.fold_redraws,
            "builtin_rules": self.builtin_rules,
            "patterns": list(self.patterns),
        }

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> StdoutCompare:
        return cls(
            fold_redraws=bool(data.get("fold_redraws", False)),
            builtin_rules=bool(data.get("builtin_rules", False)),
            patterns=tuple(str(p) for p in data.get("patterns") or ()),
        )


@dataclass(frozen=True)
class VerifyReport:
    """The saved result of ``reprobuild verify`` (schema version 1, kind ``reprobuild.verify``)."""

    result: str
    """``identical``, ``diverged`` or ``failed``."""
    summary: str
    command: tuple[str, ...]
    image: str | None
    """The image as given; None with ``--local``."""
    image_id: str | None
    runs_requested: int
    seed: int | None
    """``--seed`` (None: the image's own seed, in the run records)."""
    mode: str | None
    outputs: tuple[str, ...]
    data: tuple[DataMount, ...]
    env: dict[str, str]
    gpus: str | None
    network: bool
    started: str
    elapsed_s: float
    stopped_early: bool
    """Runs were killed before their end because the result was already certain."""
    lines_compared: int
    """Stdout lines equal in every run (before the divergence, if any)."""
    runs: tuple[RunReport, ...]
    stdout_compare: StdoutCompare = field(default_factory=StdoutCompare)
    divergence: Divergence | None = None
    """The first divergence: stdout (as it happened) or, when stdout matched, an output file."""
    output_differences: tuple[Divergence, ...] = ()
    """Every differing output file, for every run against run 1."""
    failure: Failure | None = None
    builder_version: str = __version__
    trial: int | None = None
    """``--trial`` (the run seed is derived from it and the seed: see the run records)."""
    cpus: tuple[str, ...] = ()
    """``--cpu``: the CPU each run ran on, in run order (``native`` or a qemu model)."""
    cpu_cause: str | None = None
    """With ``--cpu``, when the runs diverged: why their bits could differ, from their run
    records (:func:`reprobuild.checks.runrecords.cpu_cause`, the line ``reprobuild diff``
    gives)."""
    nodes: int | None = None
    """``--nodes``: every run was a torchrun job of this many containers (rank 0 compared)."""
    nproc_per_node: int | None = None
    divergence_steps: dict[str, Number] = field(default_factory=dict)
    """At a stdout divergence: per series of the reference run, the step of its first point on
    the divergent line or after it (where the divergence shows in each plot)."""
    schema_version: int = SCHEMA_VERSION
    kind: str = REPORT_KIND

    @property
    def local(self) -> bool:
        return self.image is None

    @property
    def identical(self) -> bool:
        return self.result == "identical"

    def to_dict(self) -> dict[str, Any]:
        return {
            "schema_version": self.schema_version,
            "kind": self.kind,
            "builder_version": self.builder_version,
            "result": self.result,
            "summary": self.summary,
            "command": list(self.command),
            "image": self.image,
            "image_id": self.image_id,
            "local": self.local,
            "runs_requested": self.runs_requested,
            "seed": self.seed,
            "trial": self.trial,
            "mode": self.mode,
            "outputs": list(self.outputs),
            "data": [m.to_dict() for m in self.data],
            "env": dict(self.env),
            "gpus": self.gpus,
            "network": self.network,
            "started": self.started,
            "elapsed_s": self.elapsed_s,
            "stopped_early": self.stopped_early,
            "lines_compared": self.lines_compared,
            "stdout_compare": self.stdout_compare.to_dict(),
            "runs": [r.to_dict() for r in self.runs],
            "divergence": None if self.divergence is None else self.divergence.to_dict(),
            "output_differences": [d.to_dict() for d in self.output_differences],
            "failure": None if self.failure is None else self.failure.to_dict(),
            "cpus": list(self.cpus),
            "cpu_cause": self.cpu_cause,
            "nodes": self.nodes,
            "nproc_per_node": self.nproc_per_node,
            "divergence_steps": dict(self.divergence_steps),
        }

    def to_json(self) -> str:
        return json.dumps(self.to_dict(), indent=2, sort_keys=True) + "\n"

    @classmethod
    def from_dict(cls, data: Any) -> VerifyReport:
        if not isinstance(data, dict) or data.get("kind") != REPORT_KIND:
            raise ReprobuildError(f"not a {REPORT_KIND} report")
        if data.get("schema_version") != SCHEMA_VERSION:
            raise ReprobuildError(
                f"verify report schema_version {data.get('schema_version')!r} is not supported "
                f"(this reprobuild reads {SCHEMA_VERSION})"
            )
        try:
            divergence = data.get("divergence")
            failure = data.get("failure")
            return cls(
                result=str(data["result"]),
                summary=str(data["summary"]),
                command=tuple(data["command"]),
                image=data.get("image"),
                image_id=data.get("image_id"),
                runs_requested=int(data["runs_requested"]),
                seed=data.get("seed"),
                trial=data.get("trial"),
                mode=data.get("mode"),
                outputs=tuple(data.get("outputs") or ()),
                data=tuple(DataMount.from_dict(m) for m in data.get("data") or ()),
                env=dict(data.get("env") or {}),
                gpus=data.get("gpus"),
                network=bool(data.get("network")),
                started=str(data["started"]),
                elapsed_s=float(data["elapsed_s"]),
                stopped_early=bool(data["stopped_early"]),
                lines_compared=int(data["lines_compared"]),
                runs=tuple(RunReport.from_dict(r) for r in data["runs"]),
                stdout_compare=StdoutCompare.from_dict(
                    data.get("stdout_compare") or {"fold_redraws": False}
                ),
                divergence=None if divergence is None else Divergence.from_dict(divergence),
                output_differences=tuple(
                    Divergence.from_dict(d) for d in data.get("output_differences") or ()
                ),
                failure=None if failure is None else Failure.from_dict(failure),
                builder_version=str(data.get("builder_version", "")),
                cpus=tuple(str(c) for c in data.get("cpus") or ()),
                cpu_cause=data.get("cpu_cause"),
                nodes=data.get("nodes"),
                nproc_per_node=data.get("nproc_per_node"),
                divergence_steps=steps_map(data.get("divergence_steps")),
            )
        except (KeyError, TypeError, ValueError, AttributeError) as exc:
            raise ReprobuildError(f"verify report is missing or has a bad field: {exc}") from None

    @classmethod
    def from_json(cls, raw: str | bytes) -> VerifyReport:
        return cls.from_dict(jsonload.loads(raw, "verify report"))

    def describe(self) -> list[str]:
        """The result for people: one headline, then the details of a divergence."""
        lines = [f"{self.result}: {self.summary}"]
        if self.divergence is not None:
            lines += self._divergence_lines(self.divergence)
        if self.stopped_early:
            lines.append(f"  stopped early: runs killed after {self.elapsed_s:.1f} s")
        ignored = self.runs[0].ignored.describe() if self.runs else None
        if ignored:
            lines.append(f"  not compared (run 1): {ignored}")
            lines.append(
                "  (--no-default-ignore compares stdout as written; --ignore REGEX leaves out more)"
            )
        return lines

    def _divergence_lines(self, div: Divergence) -> list[str]:
        """Where the two runs part: their CPUs, the differing values, the run records."""
        first, other = div.runs
        lines: list[str] = []
        if self.cpus:
            lines.append(
                f"  CPUs: run {first} {self.cpus[first - 1]}, run {other} {self.cpus[other - 1]}"
            )
        if self.cpu_cause:
            lines.append(f"  cause: {self.cpu_cause}")
        lines += _value_lines(div)
        more = len(self.output_differences) - 1
        if div.where == "output" and more > 0:
            lines.append(f"  {more} more output difference(s) in the report")
        diffs = self.runs[other - 1].record_differences if other <= len(self.runs) else ()
        if diffs:
            shown = ", ".join(d.where for d in diffs[:6])
            extra = f" and {len(diffs) - 6} more" if len(diffs) > 6 else ""
            lines.append(f"  run records differ at: {shown}{extra}")
        elif all(r.run_record is not None for r in self.runs):
            lines.append(f"  run records of run {first} and run {other} match (same stack)")
        return lines


def _value_lines(div: Divergence) -> list[str]:
    """The two runs' differing values, as written and as compared, their numbers, and the
    first differing byte of a binary output."""
    first, other = div.runs
    lines: list[str] = []
    if div.a is not None or div.b is not None:
        lines.append(f"  run {first}: {_shown(div.a)}")
        lines.append(f"  run {other}: {_shown(div.b)}")
    if div.a_compared is not None or div.b_compared is not None:
        lines.append(f"  compared as, run {first}: {_shown(div.a_compared)}")
        lines.append(f"  compared as, run {other}: {_shown(div.b_compared)}")
    if div.numeric is not None:
        name = f"{div.value} " if div.value else ""
        lines.append(f"  numbers: {name}{div.numeric.describe()}")
    if div.offset is not None and div.line is None and div.key is None:
        lines.append(f"  first differing byte at offset {div.offset}")
    return lines


def steps_map(data: Any) -> dict[str, Number]:
    """``divergence_steps`` as read: names to numbers (ValueError otherwise)."""
    if data is None:
        return {}
    if not isinstance(data, dict) or not all(is_json_number(v) for v in data.values()):
        raise ValueError("divergence_steps maps names to numbers")
    return {str(name): value for name, value in data.items()}


SHOWN_CHARS = 200
"""A differing line or value is printed cut to this many characters (the report holds it
whole)."""


def _shown(value: str | None) -> str:
    if value is None:
        return "(nothing: no such line or value)"
    if len(value) > SHOWN_CHARS:
        return repr(value[:SHOWN_CHARS]) + f" ... ({len(value)} characters)"
    return repr(value)


def default_report_path(image_id: str | None, started: _dt.datetime) -> Path:
    """``.reprobuild/verify/reprobuild-verify-<first 12 hex of the image ID, or "local">-<UTC
    time>.json``, relative to the current directory."""
    short = "local" if image_id is None else image_id.split(":")[-1][:12]
    stamp = started.astimezone(_dt.UTC).strftime("%Y%m%dT%H%M%SZ")
    return REPORT_DIR / f"{REPORT_PREFIX}-{short}-{stamp}.json"


def check_writable(path: Path, *, create_parent: bool = False) -> None:
    """Fail now, before hours of runs, when the report could not be written at ``path``: a
    scratch file is created beside it and removed. ``create_parent``: make the (default)
    report directory first."""
    shown = _shorten(str(path))
    if "\0" in str(path):
        raise OutputError(f"--report {shown}: the path holds a NUL character")
    parent = path.parent
    try:
        if path.is_dir():
            raise OutputError(f"--report {shown} is a directory: give a file path")
        _refuse_foreign_report(path, shown)
        if create_parent:
            parent.mkdir(parents=True, exist_ok=True)
        fd, scratch = tempfile.mkstemp(prefix=".reprobuild-verify-check-", dir=parent)
    except OSError as exc:
        raise OutputError(
            f"cannot write the report to {shown}: {exc.strerror or exc}",
            hint="give --report a path in a writable directory",
        ) from None
    os.close(fd)
    os.unlink(scratch)


def _refuse_foreign_report(path: Path, shown: str) -> None:
    """An existing file at ``path`` is replaced only when it is a verify report (its ``kind``
    is ``reprobuild.verify...``) or empty: ``--report`` onto the program's own results, or onto
    /etc/passwd as root, must not replace them after the runs. Symlinks, FIFOs and devices are
    refused (the rename would replace the link or the device itself)."""
    hint = "give --report a new file name, or remove the file first"
    try:
        mode = path.lstat().st_mode
    except FileNotFoundError:
        return
    if stat.S_ISLNK(mode):
        raise OutputError(f"--report {shown} is a symlink; it replaces only a report", hint=hint)
    if not stat.S_ISREG(mode):
        raise OutputError(f"--report {shown} is not a regular file", hint=hint)
    try:
        raw = jsonload.read_file(path, f"--report {shown}", error=OutputError, nofollow=True)
    except OutputError:  # over the limit (or swapped for a FIFO since the lstat)
        raise OutputError(
            f"--report {shown} exists and is not a reprobuild verify report (over "
            f"{jsonload.MAX_DOCUMENT_BYTES >> 20} MiB, or not a regular file)",
            hint=hint,
        ) from None
    if not raw:
        return
    try:
        data = jsonload.loads(raw, f"--report {shown}")
    except ReprobuildError:
        data = None
    kind = data.get("kind") if isinstance(data, dict) else None
    if not (isinstance(kind, str) and kind.startswith(REPORT_KIND)):
        raise OutputError(
            f'--report {shown} exists and is not a reprobuild verify report (no "kind": '
            f'"{REPORT_KIND}..."); it replaces only a report',
            hint=hint,
        )


def write_report(path: Path, report: VerifyReport) -> None:
    """Atomically: a reader never sees half a report."""
    try:
        write_atomic(path, report.to_json())
    except OSError as exc:
        raise OutputError(
            f"cannot write the report to {_shorten(str(path))}: {exc.strerror or exc}"
        ) from None


def _shorten(text: str, limit: int = 80) -> str:
    return repr(text) if len(text) <= limit else repr(text[: limit - 3] + "...")


def _unused(path: Path) -> Path:
    """``path`` made absolute, or with ``-2``, ``-3``... before its suffix when it exists (two
    verifications in the same second keep both reports)."""
    path = path.absolute()
    candidate, number = path, 1
    while candidate.exists():
        number += 1
        candidate = path.with_name(f"{path.stem}-{number}{path.suffix}")
    return candidate


@dataclass(frozen=True)
class VerifyResult:
    report: VerifyReport
    path: Path

    def lines(self) -> list[str]:
        return [*self.report.describe(), f"report: {self.path}"]
