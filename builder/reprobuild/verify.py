"""``reprobuild verify``: run one command N times side by side and prove the runs identical,
or name the first place where they diverge.

Every run starts fresh from the same image (or, with ``--local``, the same host interpreter
under the same runtime) with the same seed and settings. The runs go at the same time; their
stdout streams in and is compared line by line as it arrives
(:class:`~reprobuild.compare.StreamComparator`), so the first differing line stops every run at
once (containers are killed) instead of waiting for hours of training to end. When all runs
exit with status 0 and print the same lines, the declared output files are compared by
sha256; a JSON file that differs gets a structured diff (the key path), a text file the first
differing line, anything else the first differing byte.

Each run gets its own host directories, mounted into its container:

- ``/out`` (``$REPRO_OUTPUT_DIR``): the run's output directory; ``--output PATH`` names files
  or directories under it to compare (``metrics.json``, ``ckpt/``);
- ``/reprobuild-run`` (``$REPRO_RUN_DIR``): where the runtime writes the run record and the
  framework records; the report carries them, and how each run's records differ from run 1's
  (host, CPU, GPU, stack), so a divergence can be traced to its cause.

The result is a schema-versioned JSON report (:class:`VerifyReport`) written atomically:
``identical`` (exit 0), ``diverged`` or ``failed`` (exit 1: a run exited non-zero, or no run
wrote a declared output).

Containers are started through :meth:`reprobuild.engine.Engine.start_streaming` (the engine
module is the only one that talks to Docker); local runs are plain processes.
"""

from __future__ import annotations

import contextlib
import datetime as _dt
import hashlib
import json
import os
import posixpath
import queue
import re
import shlex
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
from collections import deque
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path, PurePosixPath
from typing import TYPE_CHECKING, Any, Protocol

from reprobuild import __version__
from reprobuild.compare import (
    Divergence,
    JsonDifference,
    LineSplitter,
    StreamComparator,
    diff_json,
    first_line_difference,
    json_text,
    line_divergence,
)
from reprobuild.errors import (
    OutputError,
    ReprobuildError,
    RunFailedError,
    VerifyError,
    VerifyUsageError,
)
from reprobuild.fsutil import write_atomic
from reprobuild_entrypoint.envplan import image_env
from reprobuild_entrypoint.settings import MODES, SEED_MAX

if TYPE_CHECKING:
    # Imported where containers are run: --local must work without the Docker SDK (GPU hosts
    # that have only a framework's Python, scripts/gpu-proof).
    from reprobuild.engine import Engine

SCHEMA_VERSION = 1
REPORT_KIND = "reprobuild.verify"
OUT_DIR = "/out"
"""Each run's output directory in its container (``$REPRO_OUTPUT_DIR``)."""
RECORD_DIR = "/reprobuild-run"
"""Each run's ``REPRO_RUN_DIR`` in its container: the runtime writes its records there."""
DEFAULT_DATA_DIR = "/data"
DEFAULT_RUNS = 2
MAX_RUNS = 16
STDERR_TAIL = 20
"""Lines of each run's stderr kept for the report and for the error of a failed run."""
TEXT_LIMIT = 32 * 1024 * 1024
"""Output files up to this size are diffed as JSON or text; larger ones byte by byte."""
STOP_GRACE_S = 60.0
"""How long to wait for killed runs to report their exit before giving up on them."""
REPORT_PREFIX = "reprobuild-verify"
VERIFY_LABEL = "io.reprobuild.verify"
RESULTS = ("identical", "diverged", "failed")
_ENV_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
_GPU_ID = re.compile(r"[A-Za-z0-9][A-Za-z0-9:_.-]*")
_RESERVED_ENV = {
    "REPRO_RUN_DIR": "verify gives every run its own (mounted at /reprobuild-run)",
    "REPRO_RUN_ID": "every run gets its own from the runtime",
    "REPRO_OUTPUT_DIR": "verify gives every run its own (mounted at /out)",
}
# Run-record fields that differ between any two runs and say nothing about the stack.
_VOLATILE = ("run_id", "started", "framework_records")

Log = Callable[[str], None]


def _quiet(_: str) -> None:
    return None


# --------------------------------------------------------------------------- what to verify


@dataclass(frozen=True)
class DataMount:
    """A host file or directory mounted read-only into every run's container."""

    host: Path
    container: str

    def to_dict(self) -> dict[str, str]:
        return {"host": str(self.host), "container": self.container}

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> DataMount:
        return cls(Path(data["host"]), str(data["container"]))


@dataclass(frozen=True)
class GpuRequest:
    """``--gpus``, as ``docker run --gpus`` takes it: ``all``, a count, or ``device=ID,...``."""

    spec: str
    count: int
    """-1 for all GPUs; 0 when ``device_ids`` names them."""
    device_ids: tuple[str, ...] = ()

    def cuda_visible_devices(self) -> str | None:
        """The ``CUDA_VISIBLE_DEVICES`` that selects the same GPUs on the host (--local)."""
        if self.device_ids:
            return ",".join(self.device_ids)
        if self.count > 0:
            return ",".join(str(i) for i in range(self.count))
        return None


@dataclass(frozen=True)
class VerifySpec:
    """What to run and how; see :func:`make_spec`."""

    command: tuple[str, ...]
    image: str | None = None
    """None: ``--local``, on this host without an engine."""
    runs: int = DEFAULT_RUNS
    outputs: tuple[str, ...] = ()
    """Paths relative to the run's output directory; ``.`` is the whole directory, a trailing
    ``/`` marks a directory (compared file by file)."""
    data: tuple[DataMount, ...] = ()
    env: tuple[tuple[str, str], ...] = ()
    seed: int | None = None
    mode: str | None = None
    gpus: GpuRequest | None = None
    network: bool = False

    @property
    def local(self) -> bool:
        return self.image is None


def parse_output(text: str) -> str:
    """``--output PATH``: a path under the run's output directory (``/out/x`` is taken as
    ``x``); a trailing ``/`` means a directory, ``.`` the whole output directory."""
    raw = text.strip()
    if raw == OUT_DIR or raw == OUT_DIR + "/":
        return "."
    if raw.startswith(OUT_DIR + "/"):
        raw = raw[len(OUT_DIR) + 1 :]
    if not raw or raw.startswith("/") or "\0" in raw:
        raise VerifyUsageError(
            f"--output {text!r}: give a path relative to the run's output directory {OUT_DIR}",
            hint="e.g. --output metrics.json --output ckpt/",
        )
    norm = posixpath.normpath(raw)
    if norm == ".." or norm.startswith("../"):
        raise VerifyUsageError(f"--output {text!r} points outside the output directory {OUT_DIR}")
    if norm != "." and raw.endswith("/"):
        norm += "/"
    return norm


def parse_data(text: str) -> DataMount:
    """``--data HOST[:CONTAINER]``: mounted read-only at CONTAINER (default /data)."""
    host_text, _, container = text.partition(":")
    container = container or DEFAULT_DATA_DIR
    if not host_text:
        raise VerifyUsageError(
            f"--data {text!r}: no host path", hint="use --data HOST_PATH[:CONTAINER_PATH]"
        )
    target = PurePosixPath(container)
    if not target.is_absolute() or ".." in target.parts or str(target) == "/":
        raise VerifyUsageError(
            f"--data {text!r}: the container path {container!r} must be absolute and not /",
            hint=f"e.g. --data {host_text}:{DEFAULT_DATA_DIR}",
        )
    for reserved in (OUT_DIR, RECORD_DIR):
        if target == PurePosixPath(reserved) or PurePosixPath(reserved) in target.parents:
            raise VerifyUsageError(
                f"--data {text!r}: {reserved} is where verify mounts each run's own directory",
                hint=f"mount the data elsewhere, e.g. {DEFAULT_DATA_DIR}",
            )
    host = Path(host_text).expanduser().absolute()
    if not host.exists():
        raise VerifyError(f"--data {text!r}: {host} does not exist")
    return DataMount(host, str(target))


def parse_env(text: str) -> tuple[str, str]:
    """``-e KEY=VALUE``, or ``-e KEY`` for the host's value (as ``docker run -e`` takes it)."""
    name, sep, value = text.partition("=")
    if not _ENV_NAME.fullmatch(name):
        raise VerifyUsageError(
            f"-e {text!r}: {name!r} is not a variable name", hint="use -e KEY=VALUE"
        )
    if not sep:
        host_value = os.environ.get(name)
        if host_value is None:
            raise VerifyUsageError(
                f"-e {name}: not set on this host", hint=f"give a value: -e {name}=VALUE"
            )
        value = host_value
    if "\0" in value:
        raise VerifyUsageError(f"-e {name}: the value holds a NUL character")
    if name in _RESERVED_ENV:
        raise VerifyUsageError(f"-e {name}: not yours to set here: {_RESERVED_ENV[name]}")
    return name, value


def parse_gpus(text: str) -> GpuRequest:
    """``--gpus all``, ``--gpus 2``, ``--gpus device=0,1`` (quotes around it allowed)."""
    spec = text.strip().strip("'\"").strip()
    if spec == "all":
        return GpuRequest(spec, -1)
    if spec.isascii() and spec.isdigit() and int(spec) > 0:
        return GpuRequest(spec, int(spec))
    if spec.startswith("device="):
        ids = tuple(part.strip() for part in spec[len("device=") :].split(","))
        if ids and all(_GPU_ID.fullmatch(i) for i in ids):
            return GpuRequest(spec, 0, ids)
    raise VerifyUsageError(
        f"--gpus {text!r} is not a GPU request",
        hint="use --gpus all, --gpus N (the first N GPUs) or --gpus device=0,1 (by index or UUID)",
    )


def make_spec(
    image: str | None,
    command: Sequence[str],
    *,
    local: bool = False,
    runs: int = DEFAULT_RUNS,
    outputs: Sequence[str] = (),
    data: Sequence[str] = (),
    env: Sequence[str] = (),
    seed: int | None = None,
    mode: str | None = None,
    gpus: str | None = None,
    network: bool = False,
) -> VerifySpec:
    """Check the arguments of ``reprobuild verify`` and turn them into a :class:`VerifySpec`."""
    if local and image:
        raise VerifyUsageError(
            f"--local runs on this host: it takes no IMAGE (got {image!r})",
            hint="reprobuild verify --local -- python train.py",
        )
    if not local and not image:
        raise VerifyUsageError(
            "no IMAGE to run",
            hint="reprobuild verify IMAGE -- python train.py (or --local to run on this host)",
        )
    if not command:
        shape = "--local" if local else "IMAGE"
        raise VerifyUsageError(
            "no command to run",
            hint=f"give it after `--`: reprobuild verify {shape} -- python train.py",
        )
    if not DEFAULT_RUNS <= runs <= MAX_RUNS:
        raise VerifyUsageError(
            f"--runs {runs}: use {DEFAULT_RUNS} to {MAX_RUNS} runs (they run side by side)"
        )
    if seed is not None and not 0 <= seed <= SEED_MAX:
        raise VerifyUsageError(f"--seed {seed}: use a whole number from 0 to {SEED_MAX}")
    if mode is not None and mode not in MODES:
        raise VerifyUsageError(f"--mode {mode!r}: use one of {', '.join(MODES)}")
    if local and data:
        raise VerifyUsageError(
            "--data mounts host paths into containers; --local runs on the host",
            hint="pass the host path to your command instead",
        )
    if local and network:
        raise VerifyUsageError("--network applies to containers; --local runs on the host")
    parsed_env = tuple(parse_env(item) for item in env)
    names = [name for name, _ in parsed_env]
    for name, flag, given in (
        ("REPRO_SEED", "--seed", seed),
        ("REPRO_DETERMINISM", "--mode", mode),
    ):
        if given is not None and name in names:
            raise VerifyUsageError(f"-e {name} and {flag} both given", hint=f"use {flag} only")
    mounts = tuple(parse_data(item) for item in data)
    targets = [m.container for m in mounts]
    for target in targets:
        if targets.count(target) > 1:
            raise VerifyUsageError(f"--data: two mounts at {target}")
    outs = tuple(dict.fromkeys(parse_output(item) for item in outputs))
    return VerifySpec(
        command=tuple(command),
        image=None if local else image,
        runs=runs,
        outputs=outs,
        data=mounts,
        env=parsed_env,
        seed=seed,
        mode=mode,
        gpus=None if gpus is None else parse_gpus(gpus),
        network=network,
    )


# ------------------------------------------------------------------------------------ report


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
    divergence: Divergence | None = None
    """The first divergence: stdout (as it happened) or, when stdout matched, an output file."""
    output_differences: tuple[Divergence, ...] = ()
    """Every differing output file, for every run against run 1."""
    failure: Failure | None = None
    builder_version: str = __version__
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
            "runs": [r.to_dict() for r in self.runs],
            "divergence": None if self.divergence is None else self.divergence.to_dict(),
            "output_differences": [d.to_dict() for d in self.output_differences],
            "failure": None if self.failure is None else self.failure.to_dict(),
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
                divergence=None if divergence is None else Divergence.from_dict(divergence),
                output_differences=tuple(
                    Divergence.from_dict(d) for d in data.get("output_differences") or ()
                ),
                failure=None if failure is None else Failure.from_dict(failure),
                builder_version=str(data.get("builder_version", "")),
            )
        except (KeyError, TypeError, ValueError) as exc:
            raise ReprobuildError(f"verify report is missing or has a bad field: {exc}") from None

    @classmethod
    def from_json(cls, raw: str | bytes) -> VerifyReport:
        try:
            return cls.from_dict(json.loads(raw))
        except (UnicodeDecodeError, json.JSONDecodeError) as exc:
            raise ReprobuildError(f"verify report is not valid JSON: {exc}") from None

    def describe(self) -> list[str]:
        """The result for people: one headline, then the details of a divergence."""
        lines = [f"{self.result}: {self.summary}"]
        div = self.divergence
        if div is not None:
            first, other = div.runs
            if div.a is not None or div.b is not None:
                lines.append(f"  run {first}: {_shown(div.a)}")
                lines.append(f"  run {other}: {_shown(div.b)}")
            if div.numeric is not None:
                lines.append(f"  numbers: {div.numeric.describe()}")
            if div.offset is not None and div.line is None and div.key is None:
                lines.append(f"  first differing byte at offset {div.offset}")
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
        if self.stopped_early:
            lines.append(f"  stopped early: runs killed after {self.elapsed_s:.1f} s")
        return lines


def _shown(value: str | None) -> str:
    return "(nothing: no such line or value)" if value is None else repr(value)


def default_report_path(image_id: str | None, started: _dt.datetime) -> Path:
    """``./reprobuild-verify-<first 12 hex of the image ID, or "local">-<UTC time>.json``."""
    short = "local" if image_id is None else image_id.split(":")[-1][:12]
    stamp = started.astimezone(_dt.UTC).strftime("%Y%m%dT%H%M%SZ")
    return Path(f"{REPORT_PREFIX}-{short}-{stamp}.json")


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


# ----------------------------------------------------------------------------- running runs


class _Run(Protocol):
    """One started run."""

    def stdout(self) -> Iterator[bytes]: ...

    def stderr(self) -> Iterator[bytes]: ...

    def wait(self) -> int: ...

    def kill(self) -> None: ...

    def close(self) -> None: ...


class _Launcher(Protocol):
    where: str
    out_label: str
    """How a message names a run's output directory (``/out``, ``$REPRO_OUTPUT_DIR``)."""

    def prepare(self, work: Path) -> None: ...

    def start(self, index: int, out_dir: Path, record_dir: Path) -> _Run: ...

    def finish(self) -> None: ...


def _run_env(spec: VerifySpec) -> dict[str, str]:
    """What every run gets on top of its image's (or host's) environment."""
    env = dict(spec.env)
    if spec.seed is not None:
        env["REPRO_SEED"] = str(spec.seed)
    if spec.mode is not None:
        env["REPRO_DETERMINISM"] = spec.mode
    return env


class _DockerLauncher:
    """Runs in fresh containers, through their own connection to the engine (each run holds
    two log streams and a wait open at once)."""

    out_label = OUT_DIR

    def __init__(self, spec: VerifySpec, image_id: str) -> None:
        self._spec = spec
        self._image_id = image_id
        from reprobuild.engine import Engine

        self.where = f"from {spec.image} ({image_id[:19]})"
        self._engine = Engine(connections=3 * spec.runs + 4)

    def prepare(self, work: Path) -> None:
        _ = self._engine.client  # connect now: a missing engine fails before any run starts

    def start(self, index: int, out_dir: Path, record_dir: Path) -> _Run:
        from reprobuild.engine import Bind, Gpus

        spec = self._spec
        for folder in (out_dir, record_dir):
            folder.chmod(0o777)  # the image's user (uid 10001) writes there
        binds = [
            Bind(out_dir, OUT_DIR),
            Bind(record_dir, RECORD_DIR),
            *(Bind(m.host, m.container, read_only=True) for m in spec.data),
        ]
        gpus = None if spec.gpus is None else Gpus(spec.gpus.count, spec.gpus.device_ids)
        return self._engine.start_streaming(
            self._image_id,
            list(spec.command),
            what=f"run {index + 1}'s container",
            environment={
                "REPRO_RUN_DIR": RECORD_DIR,
                "REPRO_OUTPUT_DIR": OUT_DIR,
                **_run_env(spec),
            },
            binds=binds,
            network=spec.network,
            gpus=gpus,
            labels={VERIFY_LABEL: str(index + 1)},
        )

    def finish(self) -> None:
        self._engine.close()


_SITECUSTOMIZE = '''\
"""reprobuild verify --local: what the image venv's .pth line does, for any interpreter
started with this directory on PYTHONPATH: run the runtime's start-up hook."""
import reprobuild_entrypoint._startup  # noqa: F401


def _chain():
    # Run the sitecustomize this one shadows, if any (some distributions ship one).
    import importlib.machinery
    import importlib.util
    import os
    import sys

    here = os.path.dirname(os.path.abspath(__file__))
    path = [p for p in sys.path if os.path.abspath(p or os.curdir) != here]
    spec = importlib.machinery.PathFinder.find_spec("sitecustomize", path)
    if spec is not None and spec.loader is not None:
        module = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(module)


_chain()
del _chain
'''


class _ProcessRun:
    """A local run in its own process group. When the program exits, what it left running in
    its group is killed, as a container's end kills every process in it. The exit is read
    without reaping the program (``WNOWAIT``), so the group id stays this run's until
    :meth:`close`: a kill can never reach a group that reused the number."""

    def __init__(self, argv: list[str], env: dict[str, str]) -> None:
        try:
            self._proc = subprocess.Popen(
                argv,
                env=env,
                stdin=subprocess.DEVNULL,
                stdout=subprocess.PIPE,
                stderr=subprocess.PIPE,
                start_new_session=True,  # its own process group: kill() reaches its children
            )
        except OSError as exc:
            raise VerifyError(f"cannot start {argv[0]}: {exc.strerror or exc}") from None
        self._status: int | None = None
        self._exited = threading.Event()
        threading.Thread(target=self._watch_exit, daemon=True).start()

    def _watch_exit(self) -> None:
        try:
            info = os.waitid(os.P_PID, self._proc.pid, os.WEXITED | os.WNOWAIT)
            if info is not None:
                exited = info.si_code == os.CLD_EXITED
                # killed by signal N: 128 + N, as a shell says
                self._status = info.si_status if exited else 128 + info.si_status
        except ChildProcessError:
            pass
        finally:
            self.kill()  # the rest of its group, as at a container's end
            self._exited.set()

    @staticmethod
    def _read(stream: Any) -> Iterator[bytes]:
        fd = stream.fileno()
        while chunk := os.read(fd, 65536):
            yield chunk

    def stdout(self) -> Iterator[bytes]:
        return self._read(self._proc.stdout)

    def stderr(self) -> Iterator[bytes]:
        return self._read(self._proc.stderr)

    def wait(self) -> int:
        self._exited.wait()
        return -1 if self._status is None else self._status

    def kill(self) -> None:
        if self._proc.returncode is None:  # not reaped: the group is still this run's
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.killpg(self._proc.pid, signal.SIGKILL)

    def close(self) -> None:
        self.kill()
        self._exited.wait(timeout=10)
        with contextlib.suppress(subprocess.TimeoutExpired):
            self._proc.wait(timeout=10)
        for stream in (self._proc.stdout, self._proc.stderr):
            if stream is not None:
                stream.close()


class _LocalLauncher:
    """Runs on this host: ``python -m reprobuild_entrypoint CMD`` with a copy of the runtime on
    PYTHONPATH and a ``sitecustomize`` that starts its hook in every Python the command starts,
    in the environment a CPU (or, with --gpus, GPU) image with seed 0 and mode strict bakes."""

    where = "on this host (--local)"
    out_label = "$REPRO_OUTPUT_DIR"

    def __init__(self, spec: VerifySpec) -> None:
        self._spec = spec
        self._path: list[str] = []

    def prepare(self, work: Path) -> None:
        from reprobuild.runtimefiles import runtime_package

        runtime = work / "runtime"
        for rel, (data, _mode) in runtime_package().items():
            target = runtime / rel
            target.parent.mkdir(parents=True, exist_ok=True)
            target.write_bytes(data)
        shim = work / "shim"
        shim.mkdir()
        (shim / "sitecustomize.py").write_text(_SITECUSTOMIZE)
        self._path = [str(shim), str(runtime)]

    def environment(self, out_dir: Path, record_dir: Path) -> dict[str, str]:
        spec = self._spec
        env = dict(os.environ)
        for name in (
            "REPRO_RUN_ID",
            "REPROBUILD_BASE_ENTRYPOINT",
            "REPROBUILD_FORCE_INIT",
            "REPROBUILD_MANIFEST_PATH",
        ):
            env.pop(name, None)
        variant = "gpu" if spec.gpus is not None else "cpu"
        env.update(
            REPROBUILD_IMAGE_SEED="0",
            REPROBUILD_IMAGE_DETERMINISM="strict",
            REPROBUILD_VARIANT=variant,
        )
        for name, value in image_env(0, "strict", variant).items():
            env.setdefault(name, value)  # a host value is the user's, like `docker run -e`
        env.setdefault("PYTHONUNBUFFERED", "1")
        env["PYTHONPATH"] = os.pathsep.join(
            [*self._path, *([env["PYTHONPATH"]] if env.get("PYTHONPATH") else [])]
        )
        env["REPRO_RUN_DIR"] = str(record_dir)
        env["REPRO_OUTPUT_DIR"] = str(out_dir)
        visible = None if spec.gpus is None else spec.gpus.cuda_visible_devices()
        if visible is not None:
            env["CUDA_VISIBLE_DEVICES"] = visible
        env.update(_run_env(spec))
        return env

    def start(self, index: int, out_dir: Path, record_dir: Path) -> _Run:
        argv = [sys.executable, "-m", "reprobuild_entrypoint", "--", *self._spec.command]
        return _ProcessRun(argv, self.environment(out_dir, record_dir))

    def finish(self) -> None:
        return None


@dataclass
class _RunState:
    index: int
    handle: _Run
    out_dir: Path
    record_dir: Path
    started: float
    ended: float | None = None
    exit_code: int | None = None
    killed: bool = False
    error: str | None = None
    digest: Any = field(default_factory=hashlib.sha256)
    stderr: deque[str] = field(default_factory=lambda: deque(maxlen=STDERR_TAIL))
    threads: list[threading.Thread] = field(default_factory=list)


Event = tuple[str, int, Any]


def _pump_stdout(state: _RunState, events: queue.Queue[Event]) -> None:
    splitter = LineSplitter()
    try:
        for chunk in state.handle.stdout():
            state.digest.update(chunk)
            for line in splitter.feed(chunk):
                events.put(("line", state.index, line))
        for line in splitter.close():
            events.put(("line", state.index, line))
        events.put(("eof", state.index, None))
    except Exception as exc:
        events.put(("error", state.index, f"lost its stdout: {type(exc).__name__}: {exc}"))
        state.handle.kill()
    try:
        code: int | None = state.handle.wait()
    except Exception as exc:
        events.put(("error", state.index, f"lost its exit status: {type(exc).__name__}: {exc}"))
        code = None
    events.put(("exit", state.index, code))


def _pump_stderr(state: _RunState) -> None:
    splitter = LineSplitter()
    with contextlib.suppress(Exception):
        for chunk in state.handle.stderr():
            for line in splitter.feed(chunk):
                state.stderr.append(line.decode("utf-8", errors="replace")[:2000])
    for line in splitter.close():
        state.stderr.append(line.decode("utf-8", errors="replace")[:2000])


@dataclass
class _Watch:
    divergence: Divergence | None = None
    failed: int | None = None
    error: tuple[int, str] | None = None
    stopped_early: bool = False


# C901: refactor in flight (issue 9), with the split of verify.py
def _watch(states: list[_RunState], comparator: StreamComparator, log: Log) -> _Watch:  # noqa: C901
    """Stream every run's stdout into the comparator until all runs exit; the first divergence
    or failure kills the runs still going."""
    events: queue.Queue[Event] = queue.Queue()
    for state in states:
        out = threading.Thread(target=_pump_stdout, args=(state, events), daemon=True)
        err = threading.Thread(target=_pump_stderr, args=(state,), daemon=True)
        state.threads = [out, err]
        out.start()
        err.start()
    watch = _Watch()
    running = {state.index for state in states}
    stop_deadline: float | None = None

    def stop(reason: str) -> None:
        nonlocal stop_deadline
        if stop_deadline is not None:
            return
        stop_deadline = time.monotonic() + STOP_GRACE_S
        still = [s for s in states if s.index in running]
        if still:
            watch.stopped_early = True
            log(f"verify: {reason}: stopping run(s) {', '.join(str(s.index + 1) for s in still)}")
        for state in still:
            state.killed = True
            state.handle.kill()

    while running:
        timeout = None if stop_deadline is None else max(0.0, stop_deadline - time.monotonic())
        try:
            kind, index, value = events.get(timeout=timeout)
        except queue.Empty:
            break  # killed runs that never reported: close() removes them
        state = states[index]
        if kind == "line":
            if index == 0:
                log(f"[1] {value.decode('utf-8', errors='replace')}")
            found = comparator.feed(index, value) if stop_deadline is None else None
            if found is not None:
                watch.divergence = found
                stop(f"stdout line {found.line} differs")
        elif kind == "eof":
            found = comparator.end(index) if stop_deadline is None else None
            if found is not None:
                watch.divergence = found
                stop(f"run {found.runs[1]} printed a different number of lines")
        elif kind == "error":
            if state.error is None:
                state.error = str(value)
            if stop_deadline is None:
                watch.error = (index, str(value))
                stop(f"run {index + 1} {value}")
        elif kind == "exit":
            running.discard(index)
            state.exit_code = value
            state.ended = time.monotonic()
            if state.killed and value == 0:
                state.killed = False  # it ended on its own before the kill reached it
            if value != 0 and stop_deadline is None:
                watch.failed = index
                stop(f"run {index + 1} exited with status {value}")
    for state in states:
        for thread in state.threads:
            thread.join(timeout=5)
    return watch


# ---------------------------------------------------------------------------------- outputs


def _file_digest(path: Path) -> FileDigest:
    digest = hashlib.sha256()
    size = 0
    with path.open("rb") as fh:
        while chunk := fh.read(1 << 20):
            digest.update(chunk)
            size += len(chunk)
    return FileDigest(digest.hexdigest(), size)


def collect_outputs(root: Path, outputs: Sequence[str]) -> dict[str, FileDigest]:
    """sha256 and size of every declared output file under ``root`` (directories: every
    regular file in them), by path relative to ``root``; missing ones are left out."""
    found: dict[str, FileDigest] = {}
    for name in outputs:
        path = root if name == "." else root / name.rstrip("/")
        if path.is_symlink():
            continue
        if path.is_dir():
            for dirpath, dirnames, filenames in os.walk(path):
                dirnames.sort()
                for filename in sorted(filenames):
                    file = Path(dirpath) / filename
                    if file.is_file() and not file.is_symlink():
                        found[file.relative_to(root).as_posix()] = _file_digest(file)
        elif path.is_file():
            found[path.relative_to(root).as_posix()] = _file_digest(path)
    return dict(sorted(found.items()))


def _first_byte_difference(a: Path, b: Path) -> int | None:
    offset = 0
    with a.open("rb") as fa, b.open("rb") as fb:
        while True:
            ca, cb = fa.read(1 << 20), fb.read(1 << 20)
            if ca != cb:
                for i, (x, y) in enumerate(zip(ca, cb, strict=False)):
                    if x != y:
                        return offset + i
                return offset + min(len(ca), len(cb))
            if not ca:
                return None
            offset += len(ca)


def _as_text(data: bytes) -> str | None:
    if b"\0" in data:
        return None
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError:
        return None


def file_divergence(
    name: str, a: Path, b: Path, runs: tuple[int, int], da: FileDigest, db: FileDigest
) -> Divergence:
    """How two versions of one output file differ: JSON by key path, text by line, anything
    else by the first differing byte."""
    offset = _first_byte_difference(a, b)
    digests = f"sha256 {da.sha256[:12]}... vs {db.sha256[:12]}..."
    if da.size <= TEXT_LIMIT and db.size <= TEXT_LIMIT:
        raw_a, raw_b = a.read_bytes(), b.read_bytes()
        text_a, text_b = _as_text(raw_a), _as_text(raw_b)
        if text_a is not None and text_b is not None:
            if name.lower().endswith(".json"):
                try:
                    doc_a, doc_b = json.loads(text_a), json.loads(text_b)
                except json.JSONDecodeError:
                    pass
                else:
                    return _json_divergence(name, runs, doc_a, doc_b, offset, digests)
            line, la, lb = first_line_difference(text_a.splitlines(), text_b.splitlines())
            if line:
                found = line_divergence("output", runs, line, la, lb, file=name, offset=offset)
                return replace(found, detail=f"{name}: {found.detail}")
    sizes = f"{da.size} vs {db.size} bytes" if da.size != db.size else f"{da.size} bytes each"
    return Divergence(
        where="output",
        runs=runs,
        file=name,
        offset=offset,
        detail=f"{name} differs between run {runs[0]} and run {runs[1]}: {digests}, {sizes}",
    )


def _json_divergence(
    name: str, runs: tuple[int, int], doc_a: Any, doc_b: Any, offset: int | None, digests: str
) -> Divergence:
    diffs = diff_json(doc_a, doc_b)
    if not diffs:
        return Divergence(
            where="output",
            runs=runs,
            file=name,
            offset=offset,
            detail=f"{name}: the same JSON values in other bytes (key order, spacing or number "
            f"spelling): {digests}",
        )
    first = diffs[0]
    more = f" ({len(diffs)} differences)" if len(diffs) > 1 else ""
    return Divergence(
        where="output",
        runs=runs,
        file=name,
        key=first.where,
        offset=offset,
        a=None if first.kind == "added" else json_text(first.a),
        b=None if first.kind == "removed" else json_text(first.b),
        numeric=first.numeric,
        json_differences=tuple(diffs),
        detail=f"{name}: {first.where} {_JSON_KINDS[first.kind]} between run {runs[0]} and "
        f"run {runs[1]}{more}",
    )


_JSON_KINDS = {
    "changed": "differs",
    "type": "changes type",
    "added": "is only in the later run",
    "removed": "is missing from the later run",
}


def compare_outputs(
    dirs: Sequence[Path], digests: Sequence[dict[str, FileDigest]]
) -> list[Divergence]:
    """Every output file that differs between run 1 and another run (missing counts)."""
    found: list[Divergence] = []
    names = sorted(set().union(*digests))
    for name in names:
        ref = digests[0].get(name)
        for other in range(1, len(digests)):
            theirs = digests[other].get(name)
            runs = (1, other + 1)
            if ref is None and theirs is None:
                continue
            if ref is None or theirs is None:
                missing = runs[0] if ref is None else runs[1]
                found.append(
                    Divergence(
                        where="output",
                        runs=runs,
                        file=name,
                        detail=f"{name}: run {missing} did not write it, run "
                        f"{runs[1] if ref is None else runs[0]} did",
                    )
                )
            elif ref.sha256 != theirs.sha256:
                found.append(
                    file_divergence(name, dirs[0] / name, dirs[other] / name, runs, ref, theirs)
                )
    return found


# ---------------------------------------------------------------------------------- records


def _load_json(path: Path) -> dict[str, Any]:
    try:
        data = json.loads(path.read_bytes())
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as exc:
        return {"error": f"cannot read {path.name}: {exc}"}
    return data if isinstance(data, dict) else {"error": f"{path.name} is not a JSON object"}


def read_records(record_dir: Path) -> tuple[dict[str, Any] | None, list[dict[str, Any]]]:
    """The run record and the framework records a run's runtime wrote (see
    ``reprobuild_entrypoint.runrecord``)."""
    run_record: dict[str, Any] | None = None
    frameworks: list[dict[str, Any]] = []
    for path in sorted(record_dir.glob("run-*.json")):
        if "-frameworks-" in path.name:
            frameworks.append(_load_json(path))
        elif run_record is None:
            run_record = _load_json(path)
    return run_record, frameworks


def _stack_view(
    run_record: dict[str, Any] | None, frameworks: list[dict[str, Any]], with_frameworks: bool
) -> dict[str, Any]:
    view = {k: v for k, v in (run_record or {}).items() if k not in _VOLATILE}
    if isinstance(view.get("host"), dict):
        view["host"] = {k: v for k, v in view["host"].items() if k != "hostname"}
    if with_frameworks:
        merged: dict[str, Any] = {}
        for record in frameworks:
            merged.update(record.get("framework_settings") or {})
        view["frameworks"] = merged
    return view


def record_differences(
    first: tuple[dict[str, Any] | None, list[dict[str, Any]]],
    other: tuple[dict[str, Any] | None, list[dict[str, Any]]],
) -> list[JsonDifference]:
    """Where two runs' records differ in what describes the stack, host and settings; the
    framework part only when both runs lived long enough to write it."""
    both = bool(first[1]) and bool(other[1])
    return diff_json(_stack_view(*first, both), _stack_view(*other, both))


# ------------------------------------------------------------------------------------- verify


def _check_image(engine: Engine, image: str, log: Log) -> str:
    image_id = engine.image_id(image)
    if image_id is None:
        raise VerifyError(
            f"no image {image!r} on this engine",
            hint="build it with `reprobuild image`, or pull it first (`docker pull IMAGE`)",
        )
    labels = (engine.inspect(image).get("Config") or {}).get("Labels") or {}
    if "io.reprobuild.manifest.sha256" not in labels:
        log(
            f"note: {image} was not built by reprobuild: nothing in it makes the runs "
            "deterministic, and its runs write no run records"
        )
    return image_id


def _short(exc: BaseException) -> str:
    text = getattr(exc, "explanation", None) or str(exc)
    if isinstance(text, bytes):
        text = text.decode(errors="replace")
    return " ".join(str(text).split())[:300]


def _workdir(keep: Path | None) -> Path:
    if keep is None:
        return Path(tempfile.mkdtemp(prefix="reprobuild-verify-"))
    keep = keep.absolute()
    if keep.exists() and (not keep.is_dir() or any(keep.iterdir())):
        raise VerifyUsageError(f"--keep {keep}: exists and is not an empty directory")
    try:
        keep.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise OutputError(f"cannot create {str(keep)!r}: {exc.strerror or exc}") from None
    return keep


def verify(
    spec: VerifySpec,
    *,
    report_path: Path | None = None,
    keep: Path | None = None,
    log: Log = _quiet,
    engine: Engine | None = None,
) -> VerifyResult:
    """Run ``spec.runs`` runs side by side, compare them, write the report, return it.

    Raises :class:`RunFailedError` (after writing the report) when a run failed or no run wrote
    a declared output; :class:`VerifyError`/:class:`~reprobuild.errors.EngineError` when the
    runs could not be started or followed. ``keep``: leave each run's output and record
    directories there (``run-<n>/out``, ``run-<n>/records``) instead of deleting them.
    """
    started_at = _dt.datetime.now(_dt.UTC)
    launcher: _Launcher
    image_id: str | None = None
    if spec.image is None:
        launcher = _LocalLauncher(spec)
    else:
        from reprobuild.engine import Engine

        image_id = _check_image(engine or Engine(), spec.image, log)
        launcher = _DockerLauncher(spec, image_id)
    path = (
        report_path.absolute()
        if report_path
        else _unused(default_report_path(image_id, started_at))
    )
    work = _workdir(keep)
    states: list[_RunState] = []
    t0 = time.monotonic()
    try:
        launcher.prepare(work)
        for index in range(spec.runs):
            out_dir = work / f"run-{index + 1}" / "out"
            record_dir = work / f"run-{index + 1}" / "records"
            out_dir.mkdir(parents=True)
            record_dir.mkdir(parents=True)
            handle = launcher.start(index, out_dir, record_dir)
            states.append(_RunState(index, handle, out_dir, record_dir, time.monotonic()))
        log(f"verify: {spec.runs} runs of `{shlex.join(spec.command)}` {launcher.where}")
        comparator = StreamComparator(spec.runs)
        watch = _watch(states, comparator, log)
        elapsed = time.monotonic() - t0
        if watch.error is not None:
            index, message = watch.error
            raise VerifyError(f"run {index + 1} {message}")
        report = _conclude(spec, launcher, states, comparator, watch, image_id, started_at, elapsed)
    finally:
        for state in states:
            state.handle.close()
        launcher.finish()
        if keep is None:
            shutil.rmtree(work, ignore_errors=True)
    try:
        write_atomic(path, report.to_json())
    except OSError as exc:
        raise OutputError(f"cannot write the report to {str(path)!r}: {exc.strerror}") from None
    if report.failure is not None:
        failure = report.failure
        hint = f"report: {path}"
        if failure.hint:
            hint = f"{failure.hint}; {hint}"
        raise RunFailedError(
            failure.message,
            report=report,
            report_path=path,
            stderr_tail="\n".join(failure.stderr_tail),
            hint=hint,
        )
    return VerifyResult(report, path)


def _conclude(
    spec: VerifySpec,
    launcher: _Launcher,
    states: list[_RunState],
    comparator: StreamComparator,
    watch: _Watch,
    image_id: str | None,
    started_at: _dt.datetime,
    elapsed: float,
) -> VerifyReport:
    command = shlex.join(spec.command)
    divergence = watch.divergence
    failure: Failure | None = None
    differences: list[Divergence] = []
    digests = [collect_outputs(s.out_dir, spec.outputs) for s in states]
    if watch.failed is not None:
        state = states[watch.failed]
        code = state.exit_code
        what = (
            "was killed (SIGKILL: out of memory?)" if code == 137 else f"exited with status {code}"
        )
        failure = Failure(
            message=f"run {state.index + 1} of {spec.runs}: `{command}` {what}",
            run=state.index + 1,
            exit_code=code,
            stderr_tail=tuple(state.stderr),
            hint="the last lines of its stderr are above" if state.stderr else None,
        )
    elif divergence is None:
        missing = [
            name for name in spec.outputs if not any(_declares(name, found) for found in digests)
        ]
        if missing:
            names = ", ".join(f"{launcher.out_label}/{m}" for m in missing)
            failure = Failure(
                message=f"no run wrote {names} (named by --output)",
                hint=f"the command must write its outputs under {launcher.out_label}, "
                "each run's own output directory",
            )
        else:
            differences = compare_outputs([s.out_dir for s in states], digests)
            divergence = differences[0] if differences else None
    records = [read_records(s.record_dir) for s in states]
    runs = tuple(
        RunReport(
            run=s.index + 1,
            exit_code=s.exit_code,
            killed=s.killed,
            elapsed_s=round(((s.ended or time.monotonic()) - s.started), 3),
            stdout_lines=comparator.counts[s.index],
            stdout_sha256=s.digest.hexdigest(),
            stderr_tail=tuple(s.stderr),
            outputs=digests[s.index],
            run_record=records[s.index][0],
            framework_records=tuple(records[s.index][1]),
            record_differences=tuple(record_differences(records[0], records[s.index]))
            if s.index
            else (),
        )
        for s in states
    )
    if failure is not None:
        result, summary = "failed", failure.message
    elif divergence is not None:
        result = "diverged"
        summary = _divergence_summary(divergence)
    else:
        result = "identical"
        what = f"{comparator.lines_compared} stdout lines"
        if spec.outputs:
            what += f" and {len(digests[0])} output file(s)"
        summary = f"{spec.runs} runs of `{command}` {launcher.where}: {what}, bit for bit"
    return VerifyReport(
        result=result,
        summary=summary,
        command=spec.command,
        image=spec.image,
        image_id=image_id,
        runs_requested=spec.runs,
        seed=spec.seed,
        mode=spec.mode,
        outputs=spec.outputs,
        data=spec.data,
        env=dict(spec.env),
        gpus=None if spec.gpus is None else spec.gpus.spec,
        network=spec.network,
        started=started_at.isoformat(timespec="milliseconds").replace("+00:00", "Z"),
        elapsed_s=round(elapsed, 3),
        stopped_early=watch.stopped_early,
        lines_compared=comparator.lines_compared,
        runs=runs,
        divergence=divergence,
        output_differences=tuple(differences),
        failure=failure,
    )


def _declares(name: str, found: dict[str, FileDigest]) -> bool:
    if name == ".":
        return bool(found)
    bare = name.rstrip("/")
    return any(path == bare or path.startswith(bare + "/") for path in found)


def _divergence_summary(div: Divergence) -> str:
    first, other = div.runs
    if div.where == "stdout":
        return f"stdout line {div.line} differs between run {first} and run {other}"
    return f"output {div.detail}"
