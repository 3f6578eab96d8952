"""``reprobuild verify --slurm SCRIPT``: submit the sbatch script ``reprobuild slurm`` wrote N
times, one job after the other, and compare the jobs as ``verify --nodes`` compares compose
runs.

Each submission is ``sbatch --parsable --wait --output=RUN/stdout --error=RUN/stderr SCRIPT``
from the current directory (which every node must see, as for any submission of the script),
with ``REPRO_JOB_DIR=RUN`` in its environment: the script keeps every node's run records and
outputs in ``RUN/runs/node-<i>/`` and ``RUN/out/node-<i>/``, where ``RUN`` is
``reprobuild-verify-<UTC time>/run-<n>`` (or ``--keep DIR``'s ``run-<n>``). Only the training
program's ranks write the job's stdout (the script's and the runtimes' lines go to stderr), so
the stdout is compared line by line (wall-clock fields masked as ``verify`` masks them), then
each node's run and framework records (:func:`reprobuild.checks.runrecords.compare_run_records`),
then every output file by sha256. The first divergence is named; a job that did not complete
(``sbatch --wait``'s exit status) is a failed run.
"""

from __future__ import annotations

import datetime as _dt
import hashlib
import os
import subprocess
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from reprobuild.checks.runrecords import RunRecords, compare_run_records, read_run_dir
from reprobuild.checks.streams import (
    Divergence,
    StdoutLine,
    first_line_difference,
    stdout_divergence,
)
from reprobuild.checks.terminal import TerminalLines
from reprobuild.checks.volatile import Masker, rules_for
from reprobuild.errors import ReprobuildError

_JOB_TIMEOUT_S = 7 * 24 * 3600


class SlurmVerifyError(ReprobuildError):
    """A script that cannot be submitted, or a job that did not complete."""


@dataclass(frozen=True)
class SlurmRun:
    job_id: str
    directory: Path
    returncode: int
    stdout: tuple[StdoutLine, ...]


@dataclass
class SlurmVerifyResult:
    runs: list[SlurmRun]
    divergence: Divergence | None
    compared: dict[str, int] = field(default_factory=dict)

    @property
    def identical(self) -> bool:
        return self.divergence is None

    def lines(self) -> list[str]:
        jobs = ", ".join(run.job_id for run in self.runs)
        where = f"{len(self.runs)} Slurm jobs ({jobs}) in {self.runs[0].directory.parent}"
        if self.divergence is None:
            return [
                f"identical: {where}: {self.compared.get('lines', 0)} stdout lines, the records "
                f"of {self.compared.get('nodes', 0)} node(s), "
                f"{self.compared.get('files', 0)} output file(s)"
            ]
        d = self.divergence
        out = [f"diverged: {where}", f"first divergence: {d.where}: {d.detail}"]
        if d.a is not None or d.b is not None:
            out += [f"  job {self.runs[d.runs[0] - 1].job_id}: {d.a}"]
            out += [f"  job {self.runs[d.runs[1] - 1].job_id}: {d.b}"]
        return out

    def to_dict(self) -> dict[str, Any]:
        return {
            "kind": "reprobuild.verify.slurm",
            "result": "identical" if self.identical else "diverged",
            "jobs": [
                {"job_id": r.job_id, "directory": str(r.directory), "exit": r.returncode}
                for r in self.runs
            ],
            "compared": self.compared,
            "first_divergence": None if self.divergence is None else self.divergence.to_dict(),
        }


def verify_slurm(
    script: Path,
    *,
    runs: int = 2,
    keep: Path | None = None,
    env: Sequence[tuple[str, str]] = (),
    sbatch: str = "sbatch",
    log: Callable[[str], None] = lambda _: None,
) -> SlurmVerifyResult:
    """Submit ``script`` ``runs`` times, one after the other; compare the jobs."""
    if runs < 2:
        raise SlurmVerifyError(f"--runs {runs}: comparing needs at least 2 runs")
    if not script.is_file():
        raise SlurmVerifyError(f"--slurm {script}: no such file")
    stamp = _dt.datetime.now(_dt.UTC).strftime("%Y%m%dT%H%M%SZ")
    base = (keep or Path(f"reprobuild-verify-{stamp}")).absolute()
    done: list[SlurmRun] = []
    for n in range(1, runs + 1):
        run_dir = base / f"run-{n}"
        run_dir.mkdir(parents=True, exist_ok=False)
        run = _submit(script, run_dir, env, sbatch)
        log(f"job {run.job_id} (run {n}) ended: exit {run.returncode}")
        done.append(run)
        if run.returncode != 0:
            tail = (run_dir / "stderr").read_text(errors="replace")[-2000:]
            raise SlurmVerifyError(
                f"Slurm job {run.job_id} (run {n}) did not complete: sbatch --wait exited "
                f"{run.returncode}; its stderr: {run_dir / 'stderr'}\n{tail.rstrip()}"
            )
    return compare_jobs(done)


def _submit(script: Path, run_dir: Path, env: Sequence[tuple[str, str]], sbatch: str) -> SlurmRun:
    argv = [
        sbatch,
        "--parsable",
        "--wait",
        f"--output={run_dir / 'stdout'}",
        f"--error={run_dir / 'stderr'}",
        str(script.absolute()),
    ]
    environ = {**os.environ, **dict(env), "REPRO_JOB_DIR": str(run_dir)}
    try:
        proc = subprocess.run(
            argv, capture_output=True, text=True, env=environ, timeout=_JOB_TIMEOUT_S, check=False
        )
    except FileNotFoundError:
        raise SlurmVerifyError(
            f"{sbatch} is not on PATH: run verify --slurm where jobs are submitted"
        ) from None
    first = (proc.stdout.strip().splitlines() or [""])[0]
    job_id = first.split(";", 1)[0]
    if not job_id.isdigit():
        raise SlurmVerifyError(f"sbatch did not submit {script}: {proc.stderr.strip()[-2000:]}")
    stdout = run_dir / "stdout"
    text = stdout.read_bytes() if stdout.is_file() else b""
    return SlurmRun(job_id, run_dir, proc.returncode, tuple(_lines(text)))


def _lines(data: bytes) -> list[StdoutLine]:
    """The stdout as verify compares it: as a terminal shows it, wall-clock fields masked."""
    terminal = TerminalLines()
    masker = Masker(rules_for(()))
    shown = [*terminal.feed(data), *terminal.close()]
    return [StdoutLine(line.text, masker.key(n, line.text)) for n, line in enumerate(shown, 1)]


def _digests(out: Path) -> dict[str, str]:
    found: dict[str, str] = {}
    for path in sorted(out.rglob("*")) if out.is_dir() else []:
        if path.is_file() and not path.is_symlink():
            digest = hashlib.sha256()
            with path.open("rb") as handle:
                while chunk := handle.read(1 << 20):
                    digest.update(chunk)
            found[path.relative_to(out).as_posix()] = f"sha256:{digest.hexdigest()}"
    return found


def compare_jobs(runs: Sequence[SlurmRun]) -> SlurmVerifyResult:
    """Run 1 against each other run: stdout, then records node by node, then outputs."""
    compared = {"lines": len(runs[0].stdout), "nodes": 0, "files": 0}
    first = runs[0]
    for index, other in enumerate(runs[1:], 2):
        pair = (1, index)
        found = _stdout(first, other, pair) or _records(first, other, pair, compared)
        found = found or _outputs(first, other, pair, compared)
        if found is not None:
            return SlurmVerifyResult(list(runs), found, compared)
    return SlurmVerifyResult(list(runs), None, compared)


def _stdout(a: SlurmRun, b: SlurmRun, pair: tuple[int, int]) -> Divergence | None:
    keys_a = [line.key for line in a.stdout]
    keys_b = [line.key for line in b.stdout]
    line, _, _ = first_line_difference(keys_a, keys_b)
    if line == 0:
        return None
    ours = a.stdout[line - 1] if line <= len(a.stdout) else None
    theirs = b.stdout[line - 1] if line <= len(b.stdout) else None
    return stdout_divergence(pair, line, ours, theirs)


def _nodes(run: SlurmRun) -> list[str]:
    runs = run.directory / "runs"
    return sorted(p.name for p in runs.iterdir() if p.is_dir()) if runs.is_dir() else []


_RDZV_ID = "--rdzv-id="


def _masked(value: Any, suffix: str) -> Any:
    if isinstance(value, str) and value.startswith(_RDZV_ID) and value.endswith(suffix):
        return value[: -len(suffix)] + "-<job id>"
    if isinstance(value, list):
        return [_masked(item, suffix) for item in value]
    if isinstance(value, dict):
        return {key: _masked(item, suffix) for key, item in value.items()}
    return value


def _own_job(records: RunRecords, job_id: str) -> RunRecords:
    """The records with the job's rendezvous id (``--rdzv-id=NAME-<Slurm job id>``, one per
    job by design: two jobs never join one rendezvous) written as ``NAME-<job id>``."""
    suffix = f"-{job_id}"
    return RunRecords(
        _masked(records.record, suffix),
        tuple(_masked(record, suffix) for record in records.frameworks),
    )


def _records(
    a: SlurmRun, b: SlurmRun, pair: tuple[int, int], compared: dict[str, int]
) -> Divergence | None:
    nodes_a, nodes_b = _nodes(a), _nodes(b)
    if nodes_a != nodes_b:
        return Divergence(
            where="records",
            runs=pair,
            detail="the jobs wrote records for other nodes",
            a=" ".join(nodes_a),
            b=" ".join(nodes_b),
        )
    for node in nodes_a:
        agreement = compare_run_records(
            _own_job(read_run_dir(a.directory / "runs" / node), a.job_id),
            _own_job(read_run_dir(b.directory / "runs" / node), b.job_id),
        )
        if not agreement.agree:
            first = agreement.differences[0]
            return Divergence(
                where=f"records of {node}: {first.where}",
                runs=pair,
                detail=f"the run records of {node} differ first at {first.where}",
                json_differences=agreement.differences,
            )
    compared["nodes"] = len(nodes_a)
    return None


def _outputs(
    a: SlurmRun, b: SlurmRun, pair: tuple[int, int], compared: dict[str, int]
) -> Divergence | None:
    files_a: Mapping[str, str] = _digests(a.directory / "out")
    files_b: Mapping[str, str] = _digests(b.directory / "out")
    for name in sorted(set(files_a) | set(files_b)):
        if files_a.get(name) != files_b.get(name):
            return Divergence(
                where=f"out/{name}",
                runs=pair,
                detail=f"out/{name}: {files_a.get(name, '(absent)')} != "
                f"{files_b.get(name, '(absent)')}",
                file=f"out/{name}",
            )
    compared["files"] = len(files_a)
    return None
