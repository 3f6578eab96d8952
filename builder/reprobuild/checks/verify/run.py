"""``verify()``: start the runs, follow them, compare what they wrote, write the report; and
clean up whatever ends it (a signal included: every run's container and scratch directory
go before verify exits)."""

from __future__ import annotations

import contextlib
import datetime as _dt
import shlex
import shutil
import signal
import tempfile
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from types import FrameType
from typing import TYPE_CHECKING

from reprobuild._util import leftovers
from reprobuild.checks.runrecords import (
    RunRecords,
    compare_run_records,
    cpu_cause,
    read_run_dir,
)
from reprobuild.checks.streams import Divergence, Number, StreamComparator
from reprobuild.checks.terminal import TerminalLines
from reprobuild.checks.verify.launchers import (
    _DockerLauncher,
    _Launcher,
    _LocalLauncher,
    _NodesLauncher,
)
from reprobuild.checks.verify.outputs import UnsafeOutputError, collect_outputs, compare_outputs
from reprobuild.checks.verify.report import (
    Failure,
    FileDigest,
    RunReport,
    StdoutCompare,
    VerifyReport,
    VerifyResult,
    _unused,
    check_writable,
    default_report_path,
    write_report,
)
from reprobuild.checks.verify.spec import VerifySpec
from reprobuild.checks.verify.watcher import _RunState, _Watch, _watch
from reprobuild.checks.volatile import Masker
from reprobuild.errors import (
    OutputError,
    RunFailedError,
    VerifyError,
    VerifyUsageError,
    signal_exit_code,
)
from reprobuild.imaging.manifest import MANIFEST_LABEL

if TYPE_CHECKING:
    # Imported where containers are run: --local must work without the Docker SDK (GPU hosts
    # that have only a framework's Python, scripts/gpu-proof).
    from reprobuild.backends.engine import Engine

Log = Callable[[str], None]
WORKDIR_PREFIX = "reprobuild-verify-"  # then the owner token: leftovers.temp_prefix
_SIGNALS: dict[int, str] = {
    signal.SIGTERM: "SIGTERM",
    signal.SIGINT: "SIGINT",
    signal.SIGHUP: "SIGHUP",
}


def _quiet(_: str) -> None:
    return None


class VerifyInterrupted(VerifyError):
    """verify was stopped by a signal; its runs were stopped and removed. The exit code is a
    shell's for that signal (128 + its number: 143 for SIGTERM, 130 for SIGINT)."""

    def __init__(self, signum: int) -> None:
        name = _SIGNALS.get(signum, f"signal {signum}")
        super().__init__(f"interrupted by {name}: every run was stopped and removed")
        self.exit_code = signal_exit_code(signum)


@contextlib.contextmanager
def _signals_stop_runs() -> Iterator[None]:
    """While inside: SIGTERM, SIGINT and SIGHUP raise :class:`VerifyInterrupted` in the main
    thread (once: a second signal during the clean-up is ignored), so the clean-up in the
    ``finally`` blocks runs. Outside the main thread nothing is installed."""
    raised = False

    def handler(signum: int, _frame: FrameType | None) -> None:
        nonlocal raised
        if raised:
            return
        raised = True
        raise VerifyInterrupted(signum)

    previous: dict[int, signal._HANDLER] = {}
    try:
        for signum in _SIGNALS:
            previous[signum] = signal.signal(signum, handler)
    except ValueError:  # not the main thread
        pass
    try:
        yield
    finally:
        for signum, old in previous.items():
            signal.signal(signum, old)


def _check_image(engine: Engine, image: str, log: Log) -> str:
    image_id = engine.image_id(image)
    if image_id is None:  # an index's digest (image --platform A,B --push): its image held here
        from reprobuild.cluster.pinning import pin_index

        index = pin_index(engine, image)
        if index is not None:
            log(
                f"note: {image} is an image index of {', '.join(index.platforms)}: verifying "
                f"the image of it this engine holds ({index.id[:19]}), this machine's first"
            )
            image = image_id = index.id
    if image_id is None:
        raise VerifyError(
            f"no image {image!r} on this engine",
            hint="build it with `reprobuild image`, or pull it first (`docker pull IMAGE`)",
        )
    labels = (engine.inspect(image).get("Config") or {}).get("Labels") or {}
    if MANIFEST_LABEL not in labels:
        log(
            f"note: {image} was not built by reprobuild: nothing in it makes the runs "
            "deterministic, and its runs write no run records"
        )
    return image_id


def _workdir(keep: Path | None) -> Path:
    if keep is None:
        return Path(tempfile.mkdtemp(prefix=leftovers.temp_prefix("verify")))
    keep = keep.absolute()
    if keep.exists() and (not keep.is_dir() or any(keep.iterdir())):
        raise VerifyUsageError(f"--keep {keep}: exists and is not an empty directory")
    try:
        keep.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise OutputError(f"cannot create {str(keep)!r}: {exc.strerror or exc}") from None
    return keep


def _report_path(report_path: Path | None, image_id: str | None, started: _dt.datetime) -> Path:
    """Where the report goes, checked writable now: before the runs, not after hours."""
    if report_path is not None:
        check_writable(report_path)
        return report_path.absolute()
    path = _unused(default_report_path(image_id, started))
    check_writable(path, create_parent=True)
    return path


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
    runs could not be started or followed; :class:`VerifyInterrupted` on SIGTERM, SIGINT or
    SIGHUP, after stopping and removing every run. ``keep``: leave each run's output and
    record directories there (``run-<n>/out``, ``run-<n>/records``) instead of deleting them.
    """
    started_at = _dt.datetime.now(_dt.UTC)
    with _signals_stop_runs():
        launcher: _Launcher
        image_id: str | None = None
        if spec.image is None:
            launcher = _LocalLauncher(spec)
        else:
            from reprobuild.backends.engine import Engine

            image_id = _check_image(engine or Engine(), spec.image, log)
            if spec.nodes is not None:
                launcher = _NodesLauncher(spec, image_id)
            else:
                launcher = _DockerLauncher(spec, image_id)
        path = _report_path(report_path, image_id, started_at)
        report = _run_all(spec, launcher, keep, image_id, started_at, log)
    write_report(path, report)
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


def _run_all(
    spec: VerifySpec,
    launcher: _Launcher,
    keep: Path | None,
    image_id: str | None,
    started_at: _dt.datetime,
    log: Log,
) -> VerifyReport:
    rules = spec.stdout_rules()
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
            states.append(
                _RunState(
                    index,
                    handle,
                    out_dir,
                    record_dir,
                    time.monotonic(),
                    terminal=TerminalLines(fold=spec.default_ignore),
                    masker=Masker(rules),
                )
            )
        log(f"verify: {spec.runs} runs of `{shlex.join(spec.command)}` {launcher.where}")
        comparator = StreamComparator(spec.runs)
        watch = _watch(states, comparator, log)
        if watch.error is not None:
            index, message = watch.error
            raise VerifyError(f"run {index + 1} {message}")
        run = _Finished(spec, launcher, states, comparator, watch, image_id, started_at)
        return run.conclude(time.monotonic() - t0)
    finally:
        with _signals_held():  # a signal now waits until every run is gone
            for state in states:
                state.handle.close()
            launcher.finish()
            if keep is None:
                shutil.rmtree(work, ignore_errors=True)


@contextlib.contextmanager
def _signals_held() -> Iterator[None]:
    """Block SIGTERM, SIGINT and SIGHUP while inside (the clean-up is not cut short); one
    that came meanwhile is delivered on the way out."""
    blocked = signal.pthread_sigmask(signal.SIG_BLOCK, list(_SIGNALS))
    try:
        yield
    finally:
        signal.pthread_sigmask(signal.SIG_SETMASK, blocked)


def _killed_how(code: int | None, oom: bool | None) -> str:
    """How a run ended, in words: the OOM killer only when the engine says so."""
    if oom:
        return f"was killed for lack of memory (out of memory; exit status {code})"
    if code is not None and code > 128:
        number = code - 128
        try:
            name = signal.Signals(number).name
        except ValueError:
            return f"exited with status {code}"
        return f"was killed by signal {number} ({name})"
    return f"exited with status {code}"


@dataclass
class _Finished:
    """The runs have ended: what they printed, wrote and recorded, as the report."""

    spec: VerifySpec
    launcher: _Launcher
    states: list[_RunState]
    comparator: StreamComparator
    watch: _Watch
    image_id: str | None
    started_at: _dt.datetime

    def _digests(self) -> tuple[list[dict[str, FileDigest]], Failure | None]:
        digests: list[dict[str, FileDigest]] = []
        for state in self.states:
            try:
                digests.append(
                    collect_outputs(state.out_dir, self.spec.outputs, label=self.launcher.out_label)
                )
            except UnsafeOutputError as exc:
                message = f"run {state.index + 1}: {exc.message}"
                return [{} for _ in self.states], Failure(
                    message, run=state.index + 1, hint=exc.hint
                )
        return digests, None

    def _run_failure(self) -> Failure | None:
        if self.watch.failed is None:
            return None
        state = self.states[self.watch.failed]
        code = state.exit_code
        what = _killed_how(code, state.handle.oom_killed())
        if self.spec.cpus:
            what = f"on CPU {self.spec.cpus[state.index]} {what}"
            refused = _cpu_field(read_run_dir(state.record_dir), "refused")
            said = [line.removeprefix("reprobuild: ") for line in state.stderr]
            said = [line for line in said if line.startswith(_REFUSAL)]
            if isinstance(refused, str) or said:
                what += f": {refused if isinstance(refused, str) else said[-1]}"
        return Failure(
            message=f"run {state.index + 1} of {self.spec.runs}: `{_command(self.spec)}` {what}",
            run=state.index + 1,
            exit_code=code,
            stderr_tail=tuple(state.stderr),
            hint="the last lines of its stderr are above" if state.stderr else None,
        )

    def _missing(self, digests: list[dict[str, FileDigest]]) -> Failure | None:
        missing = [
            name
            for name in self.spec.outputs
            if not any(_declares(name, found) for found in digests)
        ]
        if not missing:
            return None
        label = self.launcher.out_label
        names = ", ".join(f"{label}/{m}" for m in missing)
        return Failure(
            message=f"no run wrote {names} (named by --output)",
            hint=f"the command must write its outputs under {label}, "
            "each run's own output directory",
        )

    def _nothing_compared(self) -> Failure | None:
        """Runs that printed no stdout line and wrote no declared output prove nothing: a
        script that logs its loss to stderr (Python's logging does) or shows only a progress
        bar would be called identical on zero lines."""
        if self.comparator.lines_compared or self.spec.outputs:
            return None
        return Failure(
            message=f"nothing to compare: no run of `{_command(self.spec)}` printed a line to "
            "stdout (stderr is not compared)",
            hint="print what the training computes (its loss, its metrics) to stdout, or name "
            "the files it writes with --output",
        )

    def _run_reports(self, digests: list[dict[str, FileDigest]]) -> tuple[RunReport, ...]:
        records: list[RunRecords] = [read_run_dir(s.record_dir) for s in self.states]
        return tuple(
            RunReport(
                run=s.index + 1,
                exit_code=s.exit_code,
                killed=s.killed,
                elapsed_s=round(((s.ended or time.monotonic()) - s.started), 3),
                stdout_lines=self.comparator.counts[s.index],
                stdout_sha256=s.digest.hexdigest(),
                ignored=s.masker.ignored,
                series=s.series.series(),
                series_truncated=s.series.truncated,
                stderr_tail=tuple(s.stderr),
                outputs=digests[s.index],
                run_record=None
                if records[s.index].record is None
                else dict(records[s.index].record or {}),
                framework_records=tuple(dict(r) for r in records[s.index].frameworks),
                record_differences=compare_run_records(records[0], records[s.index]).differences
                if s.index
                else (),
            )
            for s in self.states
        )

    def conclude(self, elapsed: float) -> VerifyReport:
        spec = self.spec
        divergence = self.watch.divergence
        differences: list[Divergence] = []
        digests, failure = self._digests()
        failure = self._run_failure() or failure
        if failure is None and divergence is None:
            failure = self._missing(digests) or self._nothing_compared()
            if failure is None:
                differences = compare_outputs([s.out_dir for s in self.states], digests)
                divergence = differences[0] if differences else None
        failure = failure or self._unemulated()
        if failure is not None:
            result, summary = "failed", failure.message
        elif divergence is not None:
            result, summary = "diverged", _divergence_summary(divergence)
        else:
            result, summary = "identical", self._identical_summary(digests)
        return VerifyReport(
            result=result,
            summary=summary,
            command=spec.command,
            image=spec.image,
            image_id=self.image_id,
            runs_requested=spec.runs,
            seed=spec.seed,
            trial=spec.trial,
            mode=spec.mode,
            outputs=spec.outputs,
            data=spec.data,
            env=dict(spec.env),
            gpus=None if spec.gpus is None else spec.gpus.spec,
            network=spec.network,
            started=self.started_at.isoformat(timespec="milliseconds").replace("+00:00", "Z"),
            elapsed_s=round(elapsed, 3),
            stopped_early=self.watch.stopped_early,
            lines_compared=self.comparator.lines_compared,
            stdout_compare=StdoutCompare(
                fold_redraws=spec.default_ignore,
                builtin_rules=spec.default_ignore,
                patterns=spec.ignore,
            ),
            runs=self._run_reports(digests),
            divergence=divergence,
            output_differences=tuple(differences),
            failure=failure,
            cpus=spec.cpus,
            cpu_cause=self._cause(divergence) if result == "diverged" else None,
            nodes=spec.nodes,
            nproc_per_node=spec.nproc_per_node if spec.nodes is not None else None,
            divergence_steps=self._divergence_steps(divergence),
        )

    def _divergence_steps(self, divergence: Divergence | None) -> dict[str, Number]:
        if divergence is None or divergence.where != "stdout" or divergence.line is None:
            return {}
        return self.states[divergence.runs[0] - 1].series.steps_at(divergence.line)

    def _unemulated(self) -> Failure | None:
        """An emulated leg whose run record names no emulator: the image's runtime predates
        ``--cpu`` and ran the command on this CPU, so the comparison would prove nothing."""
        for state, leg in zip(self.states, self.spec.cpus, strict=False):
            record = read_run_dir(state.record_dir)
            if leg != "native" and record.record is not None and not _cpu_field(record, "emulator"):
                return Failure(
                    f"run {state.index + 1} (CPU {leg}): the image's runtime did not start the "
                    "command under the emulator (its run record names none): it predates --cpu",
                    run=state.index + 1,
                    hint="rebuild the image with this reprobuild",
                )
        return None

    def _cause(self, divergence: Divergence | None) -> str | None:
        if divergence is None or not self.spec.cpus:
            return None
        first, other = divergence.runs
        return cpu_cause(
            read_run_dir(self.states[first - 1].record_dir),
            read_run_dir(self.states[other - 1].record_dir),
        )

    def _identical_summary(self, digests: list[dict[str, FileDigest]]) -> str:
        what = f"{self.comparator.lines_compared} stdout lines"
        if self.spec.outputs:
            what += f" and {len(digests[0])} output file(s)"
        command = shlex.join(self.spec.command)
        return f"{self.spec.runs} runs of `{command}` {self.launcher.where}: {what}, bit for bit"


_REFUSAL = "this run is pinned to CPU level "
"""How the runtime's refusal of a CPU below the pinned level starts (cpulevel.check)."""


def _cpu_field(records: RunRecords, name: str) -> object:
    cpu = (records.record or {}).get("cpu")
    return cpu.get(name) if isinstance(cpu, dict) else None


def _command(spec: VerifySpec, limit: int = 120) -> str:
    """The command for a message, cut to ``limit`` characters."""
    text = shlex.join(spec.command)
    return text if len(text) <= limit else text[: limit - 3] + "..."


def _declares(name: str, found: dict[str, FileDigest]) -> bool:
    if name == ".":
        return bool(found)
    bare = name.rstrip("/")
    return any(path == bare or path.startswith(bare + "/") for path in found)


def _divergence_summary(div: Divergence) -> str:
    first, other = div.runs
    if div.where == "stdout":
        where = ", ".join(x for x in (div.epoch, div.value) if x)
        return f"stdout line {div.line} differs between run {first} and run {other}" + (
            f" ({where})" if where else ""
        )
    return f"output {div.detail}"
