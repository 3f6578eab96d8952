"""How long writing a verify report's page takes, and how large it is, for a long run.

A real ``reprobuild verify --local`` of a program that prints STEPS lines of 4 metrics
(``step N loss X acc Y lr Z grad_norm W``; default 10,000 steps, 2 runs, identical, so both
runs keep every point) writes the JSON report. Then, REPEAT times (best kept), in fresh
processes as a user runs them:

- the baseline: a process that imports the page module and reads the report;
- ``reprobuild report REPORT -o PAGE``: the same, plus drawing and writing the page.

Prints both times, their ratio, the page's size and the goal (under 2 s, under 2 MB; exit 1
when missed), all measured in this run.

Wall times are best of REPEAT; CPU times (user + system) are printed beside them, since on a
shared machine the wall time follows the others' load.

    python benchmarks/report_bench.py [--steps N] [--repeat N]
"""

from __future__ import annotations

import argparse
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path

GOAL_S = 2.0
GOAL_BYTES = 2 * 1024 * 1024
PROGRAM = """
import math, sys
loss, acc = 2.5, 0.1
for step in range(1, int(sys.argv[1]) + 1):
    loss = loss * 0.9995 + 0.001 * math.sin(step / 7.0)
    acc = 1.0 - 0.9 * math.exp(-step / 3000.0)
    lr = 1e-3 * 0.5 * (1 + math.cos(math.pi * step / int(sys.argv[1])))
    grad = abs(math.sin(step * 0.37)) * loss
    print(f"step {step} loss {loss!r} acc {acc!r} lr {lr!r} grad_norm {grad!r}")
"""


CPU: dict[str, float] = {}
"""The CPU time (user + system) of the best run of each kind: wall time on a shared 2-core
machine swings with its load, CPU time much less."""


def _cpu() -> float:
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


def _timed(args: list[str], kind: str = "") -> float:
    cpu, start = _cpu(), time.perf_counter()
    proc = subprocess.run(args, capture_output=True, text=True, check=False)
    elapsed = time.perf_counter() - start
    if proc.returncode != 0:
        sys.exit(f"report_bench: {args[:4]} failed: {proc.stderr[-2000:]}")
    if kind:
        CPU[kind] = min(CPU.get(kind, float("inf")), _cpu() - cpu)
    return elapsed


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=10_000)
    parser.add_argument("--repeat", type=int, default=3)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        work = Path(tmp)
        (work / "train.py").write_text(PROGRAM)
        report, page = work / "report.json", work / "page.html"
        cli = [sys.executable, "-m", "reprobuild"]
        verify = [*cli, "verify", "--local", "-q", "--report", str(report)]
        _timed([*verify, "--", sys.executable, str(work / "train.py"), str(args.steps)])
        baseline_code = (
            "import sys; from pathlib import Path; "
            "from reprobuild.checks.page import read_report; read_report(Path(sys.argv[1]))"
        )
        baseline = min(
            _timed([sys.executable, "-c", baseline_code, str(report)], "baseline")
            for _ in range(args.repeat)
        )
        written = min(
            _timed([*cli, "report", str(report), "-o", str(page)], "report")
            for _ in range(args.repeat)
        )
        size = page.stat().st_size
        report_size = report.stat().st_size
    print(f"steps: {args.steps} x 4 metrics x 2 runs; report {report_size / 1e6:.2f} MB")
    print(
        f"baseline (start, import, read the report): {baseline:.2f} s (CPU {CPU['baseline']:.2f} s)"
    )
    print(f"reprobuild report (the same, draw, write): {written:.2f} s (CPU {CPU['report']:.2f} s)")
    print(f"ratio: {written / baseline:.1f}x; drawing and writing: {written - baseline:.2f} s")
    print(f"page: {size / 1e6:.2f} MB ({size} bytes)")
    ok = written < GOAL_S and size < GOAL_BYTES
    print(f"goal (< {GOAL_S:g} s, < {GOAL_BYTES >> 20} MiB): {'met' if ok else 'MISSED'}")
    sys.exit(0 if ok else 1)


if __name__ == "__main__":
    main()
