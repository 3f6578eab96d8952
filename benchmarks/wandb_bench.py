"""W&B stack benchmark (issue 40): a training run's wall time with the stack added to its W&B
run against W&B alone, as a ratio measured in one run.

    python benchmarks/wandb_bench.py [--rounds 7] [--steps 100]

Alternating, runs the same script in a fresh interpreter: one ``wandb.init()`` in offline mode
(``WANDB_MODE=offline``: no server, the run written to disk) and ``--steps`` logged metrics, then
``finish()``. Both arms start under the in-image runtime's start-up hook (a .pth file, as in an
image) in the same image set-up (a manifest, a run record, the same seed and mode); in the
"stack" arm the wrapped ``wandb.init`` adds the ``reprobuild`` config key and the two files, the
"alone" arm puts W&B's own ``init`` back (``__wrapped__``) before it starts the run.
The whole process is timed, from interpreter start to exit (wall time, and the CPU time of the
process and of wandb-core, which it waits for: steadier on a shared host). Goal: a median
wall-time ratio of at most 1.02. Writes benchmarks/results/wandb.json.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
SCRIPT = """
import os
import sys
import wandb
if os.environ.get("BENCH_ARM") == "alone":  # W&B's own init, as without the runtime
    wandb.init = wandb.init.__wrapped__
run = wandb.init(project="bench", config={"lr": 0.1})
for step in range(int(sys.argv[1])):
    run.log({"loss": 1.0 / (step + 1)})
run.finish()
"""
LAUNCH = (
    "import runpy, site, sys; site.addsitedir(sys.argv[1]); sys.argv = sys.argv[2:]; "
    "runpy.run_path(sys.argv[0], run_name='__main__')"
)


def _site(work: Path) -> Path:
    """A folder with the image venv's .pth line: the runtime's start-up hook at every start."""
    import reprobuild_entrypoint

    root = Path(reprobuild_entrypoint.__file__).resolve().parent.parent
    site = work / "site"
    site.mkdir()
    (site / "reprobuild.pth").write_text(f"{root}\nimport reprobuild_entrypoint._startup\n")
    return site


def _time(site: Path, script: Path, env: dict[str, str], steps: int) -> tuple[float, float]:
    """(wall seconds, CPU seconds of the process and those it waited for: wandb-core)."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    started = time.perf_counter()
    subprocess.run(
        [sys.executable, "-c", LAUNCH, str(site), str(script), str(steps)],
        env=env,
        cwd=script.parent,
        check=True,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    wall = time.perf_counter() - started
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu = after.ru_utime + after.ru_stime - before.ru_utime - before.ru_stime
    return wall, cpu


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=7, help="runs per arm (default: 7)")
    parser.add_argument("--steps", type=int, default=100, help="logged steps (default: 100)")
    parser.add_argument("--out", type=Path, default=HERE / "results" / "wandb.json")
    args = parser.parse_args()
    if args.rounds < 3:
        parser.error("--rounds: at least 3 (a median of fewer says little)")
    work = Path(tempfile.mkdtemp(prefix="wandb-bench-"))
    try:
        site = _site(work)
        script = work / "train.py"
        script.write_text(SCRIPT)
        manifest = work / "manifest.json"
        manifest.write_text(json.dumps({"schema_version": 1, "name": "bench", "seed": 0}))
        (work / "run-bench.json").write_text(json.dumps({"run_id": "bench"}))
        clean = {k: v for k, v in os.environ.items() if not k.startswith(("WANDB_", "REPRO"))}
        common = {
            **clean,
            "WANDB_MODE": "offline",
            "WANDB_DIR": str(work),
            "WANDB_CONFIG_DIR": str(work / "wandb-config"),
            "WANDB_CACHE_DIR": str(work / "wandb-cache"),
            "WANDB_DATA_DIR": str(work / "wandb-data"),
            "REPRO_SEED": "0",
            "REPRO_DETERMINISM": "warn",
            "REPRO_QUIET": "1",
        }
        image = {
            **common,
            "REPROBUILD_MANIFEST_PATH": str(manifest),
            "REPRO_RUN_DIR": str(work),
            "REPRO_RUN_ID": "bench",
            "REPRO_IMAGE": "bench@sha256:" + "0" * 64,
        }
        arms = {"alone": {**image, "BENCH_ARM": "alone"}, "stack": image}
        _time(site, script, arms["alone"], args.steps)  # warm: the page cache, wandb's .pyc
        times: dict[str, list[float]] = {"alone": [], "stack": []}
        cpu: dict[str, list[float]] = {"alone": [], "stack": []}
        for _ in range(args.rounds):
            for arm, env in arms.items():
                wall, used = _time(site, script, env, args.steps)
                times[arm].append(wall)
                cpu[arm].append(used)
        stamped = sorted(work.glob("wandb/offline-run-*/files/reprobuild/manifest.json"))
        if len(stamped) != args.rounds:  # the stack arm's runs, and only those, carry it
            raise SystemExit(f"{len(stamped)} runs carry the stack, not {args.rounds}")
    finally:
        shutil.rmtree(work, ignore_errors=True)
    medians = {arm: statistics.median(values) for arm, values in times.items()}
    cpu_medians = {arm: statistics.median(values) for arm, values in cpu.items()}
    result = {
        "steps": args.steps,
        "rounds": args.rounds,
        "seconds": times,
        "median_s": medians,
        "ratio": medians["stack"] / medians["alone"],
        "goal": 1.02,
        # each round's two runs ran back to back, under the same load: their ratio's median
        "paired_ratio": statistics.median(
            s / a for a, s in zip(times["alone"], times["stack"], strict=True)
        ),
        "cpu_seconds": cpu,
        "cpu_median_s": cpu_medians,
        "cpu_ratio": cpu_medians["stack"] / cpu_medians["alone"],
        "load_average": os.getloadavg(),
    }
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(result, indent=2) + "\n")
    print(
        f"W&B alone {medians['alone']:.3f} s, with reprobuild's stack {medians['stack']:.3f} s "
        f"(median of {args.rounds}, {args.steps} steps, offline): ratio {result['ratio']:.3f} "
        f"(paired {result['paired_ratio']:.3f}); "
        f"CPU time ratio {result['cpu_ratio']:.3f}; load average {os.getloadavg()[0]:.1f}"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
