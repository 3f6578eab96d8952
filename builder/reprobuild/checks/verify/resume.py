"""``reprobuild verify --resume-at K``: is resuming right? (issue 12)

Three legs, one after the other, each a fresh container (or, with ``--local``, a fresh process
group):

1. **straight**: the command runs to its end;
2. **stopped**: the command runs until its stdout names epoch K or later (``epoch K``,
   ``Epoch K/N``: :func:`reprobuild.checks.streams.epoch_of`), then gets SIGTERM, as from
   ``docker stop``: the program saves its checkpoint into ``$REPRO_OUTPUT_DIR`` and exits;
3. **resumed**: the command again, with the stopped leg's output directory (the checkpoint is
   there) and ``REPRO_RESUME=1``; the program resumes from its checkpoint and runs to its end.

Then the final outputs are compared as verify compares them: every ``--output`` file by sha256
(a JSON file by key path), and stdout from the first line that names an epoch after K to the
end, line by line, in the straight and the resumed leg. Exit code 0: identical, 1: they differ
or a leg failed (a leg that never reached epoch K, or a stopped leg that exited with a status
other than 0).
"""

from __future__ import annotations

import dataclasses
import datetime as _dt
import hashlib
import json
import queue
import shutil
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from reprobuild._util import fsutil
from reprobuild._util.threads import start as start_thread
from reprobuild.checks.streams import SeriesCollector, epoch_of
from reprobuild.checks.terminal import TerminalLines, printable
from reprobuild.checks.verify.launchers import _DockerLauncher, _Launcher, _LocalLauncher, _Run
from reprobuild.checks.verify.outputs import collect_outputs, compare_outputs
from reprobuild.checks.verify.spec import VerifySpec
from reprobuild.checks.volatile import Ignored, Masker
from reprobuild.errors import VerifyError, VerifyUsageError

RESUME_KIND = "reprobuild.verify_resume"
SCHEMA_VERSION = 1
LEG_TIMEOUT_S = 24 * 3600.0
MAX_LINES_AFTER = 1_000_000
"""The most stdout lines after epoch K a leg may print (each is kept as a digest and a short
preview, so memory stays bounded); past that the check fails and says to compare --output."""
PREVIEW_CHARS = 300


@dataclass(frozen=True)
class _Kept:
    digest: bytes
    """sha256 of the line's compared form (wall-clock fields masked)."""
    shown: str
    """The line as shown, cut to :data:`PREVIEW_CHARS`."""


@dataclass
class Leg:
    name: str
    out_dir: Path
    record_dir: Path
    resume_at: int = 0
    lines: int = 0
    after: list[_Kept] = field(default_factory=list)
    """The lines from the first one that names an epoch after ``resume_at``."""
    after_started: bool = False
    stderr_tail: list[str] = field(default_factory=list)
    exit_code: int | None = None
    stopped_at: str | None = None
    ignored: Ignored = field(default_factory=Ignored)
    series: SeriesCollector = field(default_factory=SeriesCollector)
    """The named numbers of its stdout, for the report's plots (as verify's runs keep them)."""
    after_from: int = 0
    """The stdout line of ``after``'s first line."""

    def to_dict(self) -> dict[str, Any]:
        return {
            "name": self.name,
            "exit_code": self.exit_code,
            "stopped_at": self.stopped_at,
            "stdout_lines": self.lines,
            "stderr_tail": self.stderr_tail[-20:],
            "ignored": self.ignored.to_dict(),
            "series": {name: s.to_dict() for name, s in self.series.series().items()},
            "series_truncated": self.series.truncated,
        }


def _epoch_number(line: str) -> int | None:
    found = epoch_of(line)
    return None if found is None else int(found.split()[-1])


def _pump(chunks: Iterator[bytes], sink: queue.Queue[Any], terminal: TerminalLines) -> None:
    """Lines as a terminal shows them (progress-bar redraws folded), then None."""
    try:
        for chunk in chunks:
            for line in terminal.feed(chunk):
                sink.put(line.text)
        for line in terminal.close():
            sink.put(line.text)
    except Exception as exc:  # the stream broke: the leg's exit status says the rest
        sink.put(exc)
    finally:
        sink.put(None)


def _next_line(lines: queue.Queue[Any], handle: _Run, leg: Leg, deadline: float) -> Any:
    try:
        return lines.get(timeout=max(1.0, deadline - time.monotonic()))
    except queue.Empty:
        handle.kill()
        raise VerifyError(
            f"the {leg.name} leg ran past {LEG_TIMEOUT_S / 3600:.0f} h; it was stopped"
        ) from None


def _keep(leg: Leg, handle: _Run, masker: Masker, number: int, line: str) -> None:
    if len(leg.after) >= MAX_LINES_AFTER:
        handle.kill()
        raise VerifyError(
            f"the {leg.name} leg printed more than {MAX_LINES_AFTER} lines after epoch "
            f"{leg.resume_at}",
            hint="compare what the run writes with --output instead",
        )
    key = masker.key(number, line).encode("utf-8", "surrogateescape")
    leg.after.append(_Kept(hashlib.sha256(key).digest(), printable(line[:PREVIEW_CHARS])))


def _run_leg(handle: _Run, leg: Leg, stop_at: int | None, spec: VerifySpec) -> None:
    """Follow one leg to its end; with ``stop_at``, SIGTERM it once stdout names that epoch.
    Stdout is taken as verify takes it (redraws folded, wall-clock fields masked: the spec's
    rules); the lines after epoch ``leg.resume_at`` are kept as digests, bounded."""
    lines: queue.Queue[Any] = queue.Queue()
    errors: queue.Queue[Any] = queue.Queue()
    masker = Masker(spec.stdout_rules())
    plotted = Masker(spec.stdout_rules())  # its counts are not the leg's: every line goes here
    threads = [
        threading.Thread(
            target=_pump,
            args=(handle.stdout(), lines, TerminalLines(fold=spec.default_ignore)),
            daemon=True,
        ),
        threading.Thread(
            target=_pump,
            args=(handle.stderr(), errors, TerminalLines(fold=False, max_chars=2000)),
            daemon=True,
        ),
    ]
    for thread in threads:
        start_thread(thread)
    deadline = time.monotonic() + LEG_TIMEOUT_S
    while (line := _next_line(lines, handle, leg, deadline)) is not None:
        if isinstance(line, Exception):
            leg.stderr_tail.append(f"verify lost the leg's stdout: {line}")
            continue
        leg.lines += 1
        leg.series.feed(leg.lines, plotted.key(leg.lines, line))
        epoch = _epoch_number(line)
        if not leg.after_started and epoch is not None and epoch > leg.resume_at:
            leg.after_started, leg.after_from = True, leg.lines
        if leg.after_started:
            _keep(leg, handle, masker, leg.lines, line)
        if stop_at is not None and leg.stopped_at is None and (epoch or 0) >= stop_at:
            leg.stopped_at = f"epoch {epoch}"
            handle.terminate()
    leg.exit_code = handle.wait()
    for thread in threads:
        thread.join(timeout=10)
    while not errors.empty():
        item = errors.get_nowait()
        if isinstance(item, str):
            leg.stderr_tail.append(printable(item))
    del leg.stderr_tail[:-20]
    leg.ignored = masker.ignored


def run_resume_check(
    spec: VerifySpec,
    resume_at: int,
    *,
    report_path: Path | None = None,
    keep: Path | None = None,
    log: Any = print,
) -> tuple[dict[str, Any], Path]:
    """``reprobuild verify --resume-at K``: the report (written atomically) and its path.

    The report path is checked writable before any leg runs; the legs run in an owner-tagged
    scratch directory (or ``keep``, which must be empty) that is removed at the end, on error
    and on SIGTERM/SIGINT/SIGHUP (the running leg is stopped first, as verify does)."""
    if resume_at < 1:
        raise VerifyUsageError(
            f"--resume-at {resume_at}: give the epoch after which to stop (1 or more)"
        )
    from reprobuild.checks.verify.run import (
        _report_path,
        _signals_held,
        _signals_stop_runs,
        _workdir,
    )

    started = _dt.datetime.now(_dt.UTC)
    with _signals_stop_runs():
        path = _report_path(report_path, None, started)
        work = _workdir(keep)
        try:
            report = verify_resume(spec, resume_at, report_path=path, work=work, log=log)
        finally:
            with _signals_held():
                if keep is None:
                    shutil.rmtree(work, ignore_errors=True)
    return report, path


def verify_resume(
    spec: VerifySpec, resume_at: int, *, report_path: Path, work: Path, log: Any = print
) -> dict[str, Any]:
    """Run the three legs in ``work`` and write the report to ``report_path``; returns it."""
    launcher: _Launcher
    if spec.image is None:
        launcher = _LocalLauncher(spec)
    else:
        from reprobuild.backends.engine import Engine
        from reprobuild.checks.verify.run import _check_image

        launcher = _DockerLauncher(spec, _check_image(Engine(), spec.image, log))
    launcher.prepare(work)
    legs: list[Leg] = []
    try:
        for index, (name, stop_at, shared) in enumerate(
            [("straight", None, None), ("stopped", resume_at, None), ("resumed", None, 1)]
        ):
            out_dir = legs[shared].out_dir if shared is not None else work / name / "out"
            leg = Leg(name, out_dir, work / name / "records", resume_at=resume_at)
            for folder in (leg.out_dir, leg.record_dir):
                folder.mkdir(parents=True, exist_ok=True)
            if name == "resumed":  # the launchers read the spec at start
                resumed = dataclasses.replace(spec, env=(*spec.env, ("REPRO_RESUME", "1")))
                launcher._spec = resumed
            log(f"verify --resume-at {resume_at}: {name} leg {launcher.where}")
            handle = launcher.start(index, leg.out_dir, leg.record_dir)
            try:
                _run_leg(handle, leg, stop_at, spec)
            finally:
                handle.close()
            legs.append(leg)
    finally:
        launcher.finish()
    report = _conclude(spec, resume_at, legs)
    fsutil.write_atomic(report_path, json.dumps(report, indent=2) + "\n")
    return report


def _conclude(spec: VerifySpec, resume_at: int, legs: list[Leg]) -> dict[str, Any]:
    straight, stopped, resumed = legs
    report: dict[str, Any] = {
        "schema_version": SCHEMA_VERSION,
        "kind": RESUME_KIND,
        "command": list(spec.command),
        "image": spec.image,
        "resume_at": resume_at,
        "legs": [leg.to_dict() for leg in legs],
        "differences": [],
        "divergence_steps": {},
    }
    failure = None
    if straight.exit_code != 0 or resumed.exit_code != 0:
        bad = straight if straight.exit_code != 0 else resumed
        failure = f"the {bad.name} leg exited with status {bad.exit_code}"
    elif stopped.stopped_at is None:
        failure = f"the stopped leg never printed epoch {resume_at} (its stdout names no epoch)"
    elif stopped.exit_code != 0:
        failure = (
            f"the stopped leg exited with status {stopped.exit_code} after SIGTERM: save the "
            "checkpoint in the SIGTERM handler and exit 0"
        )
    if failure is not None:
        report.update(result="failed", summary=f"failed: {failure}")
        return report
    a, b = straight.after, resumed.after
    for number, (line_a, line_b) in enumerate(zip(a, b, strict=False), 1):
        if line_a.digest != line_b.digest:
            line = straight.after_from + number - 1
            report["differences"].append(
                {
                    "where": "stdout",
                    "line_after_resume": number,
                    "line": line,
                    "straight": line_a.shown,
                    "resumed": line_b.shown,
                }
            )
            report["divergence_steps"] = straight.series.steps_at(line)
            break
    if len(a) != len(b) and not report["differences"]:
        report["differences"].append(
            {"where": "stdout", "detail": f"{len(a)} lines after epoch {resume_at} vs {len(b)}"}
        )
    if spec.outputs:
        digests = [collect_outputs(leg.out_dir, spec.outputs) for leg in (straight, resumed)]
        for div in compare_outputs([straight.out_dir, resumed.out_dir], digests):
            report["differences"].append(
                {"where": "output", "detail": div.detail, "file": div.file}
            )
    if not a and not spec.outputs:
        report.update(
            result="failed",
            summary=f"failed: nothing to compare (no stdout line after epoch {resume_at})",
        )
        return report
    if report["differences"]:
        first = report["differences"][0]
        shown = first.get("detail") or f"{first['straight']!r} vs {first['resumed']!r}"
        report.update(
            result="diverged", summary=f"diverged: resumed after epoch {resume_at}: {shown}"
        )
    else:
        report.update(
            result="identical",
            summary=f"identical: resumed after {stopped.stopped_at}, {len(a)} stdout lines after "
            f"epoch {resume_at} and {len(spec.outputs)} output(s) match the straight run",
        )
    return report
