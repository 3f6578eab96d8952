"""Runs INSIDE a reprobuild image (as root) for runtime_bench.py; prints one JSON line.

"with" = the image as built; "without" = the same image with the start-up .pth moved aside,
so the only difference is the runtime's hook. Blocks alternate (A B A B ...) to spread drift.
"""

import json
import os
import statistics
import subprocess
import sys
import sysconfig
import time
from pathlib import Path

PTH = Path(sysconfig.get_paths()["purelib"]) / "_reprobuild_runtime.pth"
ASIDE = PTH.with_suffix(".off")
PY = "/opt/venv/bin/python"


def once(argv: list[str], env: dict[str, str]) -> float:
    start = time.perf_counter()
    subprocess.run(argv, check=True, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    return time.perf_counter() - start


def ab(argv: list[str], rounds: int, per_block: int) -> dict[str, float]:
    env = {**os.environ, "REPRO_QUIET": "1", "TF_CPP_MIN_LOG_LEVEL": "3"}
    samples: dict[str, list[float]] = {"with": [], "without": []}
    try:
        for _ in range(rounds):
            for label in ("with", "without"):
                if label == "without":
                    PTH.rename(ASIDE)
                try:
                    samples[label] += [once(argv, env) for _ in range(per_block)]
                finally:
                    if ASIDE.exists():
                        ASIDE.rename(PTH)
    finally:
        if ASIDE.exists():
            ASIDE.rename(PTH)
    return {k: statistics.median(v) * 1000 for k, v in samples.items()}


def train(script: str, mode: str, runs: int) -> float:
    env = {**os.environ, "REPRO_QUIET": "1", "TF_CPP_MIN_LOG_LEVEL": "3", "REPRO_DETERMINISM": mode}
    return statistics.median(once([PY, script], env) for _ in range(runs))


def main() -> int:
    out: dict[str, object] = {"nproc": os.cpu_count()}
    out["startup_ms"] = ab([PY, "-c", "pass"], rounds=5, per_block=10)
    out["import_torch_ms"] = ab([PY, "-c", "import torch"], rounds=4, per_block=3)
    out["import_tensorflow_ms"] = ab([PY, "-c", "import tensorflow"], rounds=3, per_block=2)
    for script in sys.argv[1:]:
        name = Path(script).stem
        out[f"train_{name}_s"] = {mode: train(script, mode, runs=3) for mode in ("strict", "off")}
    print(json.dumps(out))
    return 0


if __name__ == "__main__":
    sys.exit(main())
