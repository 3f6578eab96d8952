"""``reprobuild verify --resume-at K``: is resuming right? (issue 12)

Three legs, one after the other, each a fresh container (or, with ``--local``, a fresh process
group):

1. **straight**: the command runs to its end;
2. **stopped**: the command runs until its stdout names epoch K or later (``epoch K``,
   ``Epoch K/N``: :func:`reprobuild.compare.epoch_of`), then gets SIGTERM, as from
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
import json
import queue
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from reprobuild import fsutil
from reprobuild.compare import epoch_of
from reprobuild.errors import VerifyError
from reprobuild.verify.launchers import _DockerLauncher, _Launcher, _LocalLauncher, _Run
from reprobuild.verify.outputs import collect_outputs, compare_outputs
from reprobuild.verify.spec import VerifySpec

RESUME_KIND = "reprobuild.verify_resume"
SCHEMA_VERSION = 1
LEG_TIMEOUT_S = 24 * 3600.0


@dataclass
class Leg:
    name: str
    out_dir: Path
    record_dir: Path
    stdout: list[str] = field(default_factory=list)
    stderr_tail: list[str] = field(default_factory=list)
    exit_code: int | None = None
    stopped_at: str | None = None

    def to_dict(self) -> dict[str, Any]:
        return {
            "name": self.name,
            "exit_code": self.exit_code,
            "stopped_at": self.stopped_at,
            "stdout_lines": len(self.stdout),
            "stderr_tail": self.stderr_tail[-20:],
        }


def _epoch_number(line: str) -> int | None:
    found = epoch_of(line)
    return None if found is None else int(found.split()[-1])


def _lines(chunks: Iterator[bytes], sink: queue.Queue[str | None]) -> None:
    pending = b""
    try:
        for chunk in chunks:
            pending += chunk
            *whole, pending = pending.split(b"\n")
            for raw in whole:
                sink.put(raw.decode(errors="replace").rstrip("\r"))
        if pending:
            sink.put(pending.decode(errors="replace"))
    finally:
        sink.put(None)


def _run_leg(handle: _Run, leg: Leg, stop_at: int | None) -> None:
    """Follow one leg to its end; with ``stop_at``, SIGTERM it once stdout names that epoch."""
    lines: queue.Queue[str | None] = queue.Queue()
    errors: queue.Queue[str | None] = queue.Queue()
    threads = [
        threading.Thread(target=_lines, args=(handle.stdout(), lines), daemon=True),
        threading.Thread(target=_lines, args=(handle.stderr(), errors), daemon=True),
    ]
    for thread in threads:
        thread.start()
    deadline = time.monotonic() + LEG_TIMEOUT_S
    while (line := lines.get(timeout=max(1.0, deadline - time.monotonic()))) is not None:
        leg.stdout.append(line)
        number = _epoch_number(line)
        if stop_at is not None and leg.stopped_at is None and (number or 0) >= stop_at:
            leg.stopped_at = f"epoch {number}"
            handle.terminate()
    leg.exit_code = handle.wait()
    for thread in threads:
        thread.join(timeout=10)
    while (err := errors.get_nowait() if not errors.empty() else None) is not None:
        leg.stderr_tail.append(err)


def _after(lines: list[str], epoch: int) -> list[str]:
    """The lines from the first one that names an epoch after ``epoch`` to the end."""
    for index, line in enumerate(lines):
        number = _epoch_number(line)
        if number is not None and number > epoch:
            return lines[index:]
    return []


def verify_resume(
    spec: VerifySpec, resume_at: int, *, report_path: Path, work: Path, log: Any = print
) -> dict[str, Any]:
    """Run the three legs in ``work`` and write the report to ``report_path``; returns it."""
    if resume_at < 1:
        raise VerifyError(f"--resume-at {resume_at}: give the epoch after which to stop (>= 1)")
    launcher: _Launcher
    if spec.image is None:
        launcher = _LocalLauncher(spec)
    else:
        from reprobuild.engine import Engine
        from reprobuild.verify.run import _check_image

        launcher = _DockerLauncher(spec, _check_image(Engine(), spec.image, log))
    launcher.prepare(work)
    legs: list[Leg] = []
    try:
        for index, (name, stop_at, shared) in enumerate(
            [("straight", None, None), ("stopped", resume_at, None), ("resumed", None, 1)]
        ):
            out_dir = legs[shared].out_dir if shared is not None else work / name / "out"
            leg = Leg(name, out_dir, work / name / "records")
            for folder in (leg.out_dir, leg.record_dir):
                folder.mkdir(parents=True, exist_ok=True)
            if name == "resumed":  # the launchers read the spec at start
                resumed = dataclasses.replace(spec, env=(*spec.env, ("REPRO_RESUME", "1")))
                launcher._spec = resumed
            log(f"verify --resume-at {resume_at}: {name} leg {launcher.where}")
            handle = launcher.start(index, leg.out_dir, leg.record_dir)
            try:
                _run_leg(handle, leg, stop_at)
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
    a, b = _after(straight.stdout, resume_at), _after(resumed.stdout, resume_at)
    for number, (line_a, line_b) in enumerate(zip(a, b, strict=False), 1):
        if line_a != line_b:
            report["differences"].append(
                {
                    "where": "stdout",
                    "line_after_resume": number,
                    "straight": line_a,
                    "resumed": line_b,
                }
            )
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
