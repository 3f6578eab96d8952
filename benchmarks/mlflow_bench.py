"""MLflow tagging benchmark (issue 28): a training run's wall time with reprobuild's MLflow tags
on against MLflow alone, as a ratio measured in one run.

    python benchmarks/mlflow_bench.py [--rounds 7] [--steps 100]

Starts a real ``mlflow server`` (SQLite backend, 127.0.0.1, a free port), then, alternating,
runs the same script in a fresh interpreter: one ``mlflow.start_run()`` and ``--steps`` logged
metrics. Both arms run the in-image runtime from a copy on PYTHONPATH with the same manifest
and run record; the "tags" arm also has the distribution record that registers the run context
provider (so MLflow tags the run and logs the two artifacts at exit), the "alone" arm has not.
The whole process is timed, from interpreter start to exit. Goal: a median ratio of at most
1.02. Writes benchmarks/results/mlflow.json.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import shutil
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import time
import urllib.request
from pathlib import Path

HERE = Path(__file__).resolve().parent
SCRIPT = """
import sys
import mlflow
with mlflow.start_run():
    for step in range(int(sys.argv[1])):
        mlflow.log_metric("loss", 1.0 / (step + 1), step=step)
"""


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def _runtime(root: Path, with_tags: bool) -> Path:
    from reprobuild.imaging.runtimefiles import runtime_package

    out = root / ("tags" if with_tags else "alone")
    for rel, (data, _mode) in runtime_package().items():
        if not with_tags and ".dist-info/" in rel:
            continue
        (out / rel).parent.mkdir(parents=True, exist_ok=True)
        (out / rel).write_bytes(data)
    return out


def _server(where: Path) -> tuple[subprocess.Popen[bytes], str]:
    port = _free_port()
    url = f"http://127.0.0.1:{port}"
    proc = subprocess.Popen(
        [
            *(sys.executable, "-m", "mlflow", "server", "--host", "127.0.0.1"),
            *("--port", str(port), "--workers", "1"),
            *("--backend-store-uri", f"sqlite:///{where / 'mlflow.db'}"),
            *("--artifacts-destination", str(where / "artifacts")),
        ],
        cwd=where,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        start_new_session=True,
    )
    deadline = time.monotonic() + 180
    while time.monotonic() < deadline:
        with contextlib.suppress(OSError), urllib.request.urlopen(f"{url}/health", timeout=5):
            return proc, url
        time.sleep(0.5)
    os.killpg(proc.pid, signal.SIGKILL)
    raise SystemExit("mlflow server did not start")


def _time(runtime: Path, env: dict[str, str], steps: int) -> float:
    started = time.perf_counter()
    subprocess.run(
        [sys.executable, "-c", SCRIPT, str(steps)],
        env={**env, "PYTHONPATH": str(runtime)},
        check=True,
        stdout=subprocess.DEVNULL,
    )
    return time.perf_counter() - started


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=7, help="runs per arm (default: 7)")
    parser.add_argument("--steps", type=int, default=100, help="logged steps (default: 100)")
    parser.add_argument("--out", type=Path, default=HERE / "results" / "mlflow.json")
    args = parser.parse_args()
    if args.rounds < 3:
        parser.error("--rounds: at least 3 (a median of fewer says little)")
    work = Path(tempfile.mkdtemp(prefix="mlflow-bench-"))
    proc, url = _server(work)
    try:
        manifest = work / "manifest.json"
        manifest.write_text(json.dumps({"schema_version": 1, "name": "bench", "seed": 0}))
        (work / "run-bench.json").write_text(json.dumps({"run_id": "bench"}))
        env = {
            **os.environ,
            "MLFLOW_TRACKING_URI": url,
            "GIT_PYTHON_REFRESH": "quiet",
            "REPROBUILD_MANIFEST_PATH": str(manifest),
            "REPRO_RUN_DIR": str(work),
            "REPRO_RUN_ID": "bench",
        }
        arms = {"alone": _runtime(work, False), "tags": _runtime(work, True)}
        _time(arms["alone"], env, args.steps)  # warm: the server's first run, the page cache
        times: dict[str, list[float]] = {"alone": [], "tags": []}
        for _ in range(args.rounds):
            for arm, runtime in arms.items():
                times[arm].append(_time(runtime, env, args.steps))
    finally:
        os.killpg(proc.pid, signal.SIGTERM)
        proc.wait(30)
        shutil.rmtree(work, ignore_errors=True)
    medians = {arm: statistics.median(values) for arm, values in times.items()}
    result = {
        "steps": args.steps,
        "rounds": args.rounds,
        "seconds": times,
        "median_s": medians,
        "ratio": medians["tags"] / medians["alone"],
        "goal": 1.02,
    }
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(result, indent=2) + "\n")
    print(
        f"MLflow alone {medians['alone']:.3f} s, with reprobuild's tags {medians['tags']:.3f} s "
        f"(median of {args.rounds}, {args.steps} steps): ratio {result['ratio']:.3f}"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
