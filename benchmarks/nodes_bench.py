"""Multi-node benchmark (issue 13): the wall time of the 2-node x 2-process DDP job under the
runtime (``REPRO_DETERMINISM=strict``) against the same job with ``off``, as a ratio measured
in one run.

    python benchmarks/nodes_bench.py --image TAG [--rounds 3] [--epochs 3]

TAG is the determinism test image (tests/data/projects/determinism, which holds
scripts/ddp_train.py), built by ``reprobuild image``. The job file is written by
``reprobuild compose --nodes 2 --nproc-per-node 2``; each round runs it once strict and once
off (alternating which goes first, so a warm page cache favours neither), each under its own
compose project, and times ``docker-compose up`` (prepare, then the nodes) from start to
the last node's exit. The
figure is median(strict) / median(off). One thread per process (``REPRO_THREADS=1``): the
reference machine has two CPUs for four ranks. Writes benchmarks/results/nodes.json.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import time
import uuid
from pathlib import Path

HERE = Path(__file__).resolve().parent
PROJECT = HERE.parent / "tests" / "data" / "projects" / "determinism"


def write_job(image: str, where: Path) -> Path:
    project = where / "project"
    shutil.copytree(PROJECT, project)
    config = project / "reprobuild.yaml"
    config.write_text(config.read_text().replace("scripts/torch_mlp.py", "scripts/ddp_train.py", 1))
    job = where / "job"
    subprocess.run(
        [sys.executable, "-m", "reprobuild", "compose", str(project), "--image", image,
         "--nodes", "2", "--nproc-per-node", "2", "-o", str(job / "compose.yml")],
        check=True,
    )  # fmt: skip
    (job / "data").mkdir()
    return job


def run_once(job: Path, mode: str, epochs: int) -> float:
    name = f"rbnodesbench{uuid.uuid4().hex[:8]}"
    env = {
        **{k: v for k, v in os.environ.items() if not k.startswith("REPRO_")},
        "REPRO_DETERMINISM": mode,
        "REPRO_THREADS": "1",
        "REPRO_QUIET": "1",
        "DDP_EPOCHS": str(epochs),
    }
    base = ["docker-compose", "-p", name, "-f", str(job / "compose.yml")]
    try:
        # `up` as a user runs it: prepare, then both nodes (containers created in the timing,
        # the same for both modes; `up --no-start` waits forever on prepare's condition)
        start = time.perf_counter()
        subprocess.run([*base, "up"], env=env, cwd=job, check=True, capture_output=True,
                       timeout=600)  # fmt: skip
        took = time.perf_counter() - start
        codes = subprocess.run(
            [*base, "ps", "-q"], env=env, cwd=job, check=True, capture_output=True, text=True
        ).stdout.split()
        for cid in codes:
            state = subprocess.run(
                ["docker", "inspect", "-f", "{{.State.ExitCode}}", cid],
                check=True, capture_output=True, text=True,
            ).stdout.strip()  # fmt: skip
            if state != "0":
                raise SystemExit(f"a node of the {mode} job exited {state}")
        return took
    finally:
        subprocess.run([*base, "down", "-t", "1"], env=env, cwd=job, capture_output=True)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--image", required=True, help="the determinism test image")
    parser.add_argument("--rounds", type=int, default=3, help="rounds of strict + off (>= 3)")
    parser.add_argument("--epochs", type=int, default=3, help="DDP_EPOCHS of the job")
    args = parser.parse_args()
    # SIGTERM as an exception, so the running job's containers and network are removed
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))
    if args.rounds < 3:
        parser.error("--rounds: at least 3 (a median of fewer says little)")
    times: dict[str, list[float]] = {"strict": [], "off": []}
    with tempfile.TemporaryDirectory(prefix="rbnodes-bench-") as tmp:
        job = write_job(args.image, Path(tmp))
        for i in range(args.rounds):
            order = ("strict", "off") if i % 2 == 0 else ("off", "strict")
            for mode in order:
                times[mode].append(run_once(job, mode, args.epochs))
                print(f"round {i} {mode}: {times[mode][-1]:.2f} s", file=sys.stderr)
    strict, off = statistics.median(times["strict"]), statistics.median(times["off"])
    result = {
        "job": "2 nodes x 2 processes, gloo, CPU, ddp_train.py",
        "epochs": args.epochs,
        "rounds": args.rounds,
        "seconds": times,
        "median_strict_s": round(strict, 2),
        "median_off_s": round(off, 2),
        "ratio_strict_over_off": round(strict / off, 3),
        "goal": "<= 1.05",
    }
    out = HERE / "results" / "nodes.json"
    out.parent.mkdir(exist_ok=True)
    out.write_text(json.dumps(result, indent=2) + "\n")
    print(json.dumps(result, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
