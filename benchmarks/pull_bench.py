"""The cold pull of images from the loopback registry into an empty engine (issue 52): the venv
as layers by package against the same packages in one layer, as ratios in the same run.

    python benchmarks/pull_bench.py --ref LAYERED --ref ONE_LAYER [--rounds 3] [--out FILE]

Each ``--ref`` is an image in the loopback registry (``benchmarks/layers_bench.py`` pushes its
images there as ``127.0.0.1:5000/bench/layers-RUN:layered-new`` and ``:baseline-new``). A
dockerd of its own is started with an empty data root (``scripts/worker-engines`` under a
temporary root), so that nothing of either image, the base included, is held: each pull is what
a new node pays. In each round every ref is pulled once, the refs alternating, and the engine
is emptied (every image removed) before each pull. The first ref's median over the
others' is the figure (goal: at most 1.00, the layers pull side by side). Needs root. Prints a
table and writes benchmarks/results/pull.json (or --out).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import docker

HERE = Path(__file__).resolve().parent
ENGINES = HERE.parent / "scripts" / "worker-engines"


def empty_engine(root: Path) -> tuple[str, dict[str, str]]:
    """Start a dockerd with an empty data root under ``root``: its DOCKER_HOST, and the
    environment that stops it again."""
    env = {**os.environ, "REPROBUILD_WORKER_ENGINES_ROOT": str(root)}
    env["REPROBUILD_WORKER_ENGINES_NET"] = "200"  # apart from CI's and the suite's engines
    out = subprocess.run(
        [str(ENGINES), "2"], env=env, capture_output=True, text=True, check=True
    ).stdout.split()
    host = out[1].partition("|")[0]
    if not host:
        sys.exit(f"error: scripts/worker-engines gave no engine: {out}")
    return host, env


def pull_seconds(client: docker.DockerClient, ref: str) -> float:
    for image in client.images.list():
        client.images.remove(image.id, force=True)
    assert not client.images.list(), "the engine is not empty"
    start = time.monotonic()
    client.images.pull(ref)
    return time.monotonic() - start


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--ref", action="append", required=True, help="an image to pull")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--out", type=Path, default=HERE / "results" / "pull.json")
    args = parser.parse_args()
    if len(args.ref) < 2:
        parser.error("name two --ref at least: the first is measured against the others")
    times: dict[str, list[float]] = {ref: [] for ref in args.ref}
    with tempfile.TemporaryDirectory(prefix="pull-bench-", ignore_cleanup_errors=True) as tmp:
        host, env = empty_engine(Path(tmp))
        try:
            client = docker.DockerClient(base_url=host, timeout=1800)
            for n in range(args.rounds):
                order = args.ref if n % 2 == 0 else list(reversed(args.ref))
                for ref in order:
                    seconds = pull_seconds(client, ref)
                    times[ref].append(round(seconds, 2))
                    print(f"round {n + 1}: {ref} {seconds:.1f} s", flush=True)
            for image in client.images.list():
                client.images.remove(image.id, force=True)
        finally:
            subprocess.run([str(ENGINES), "--stop"], env=env, check=False)
    medians = {ref: statistics.median(values) for ref, values in times.items()}
    first, *others = args.ref
    results = {
        "rounds": args.rounds,
        "pull_s": {ref: {"runs": times[ref], "median": medians[ref]} for ref in args.ref},
        "first_over": {ref: round(medians[first] / medians[ref], 4) for ref in others},
    }
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(results, indent=2, sort_keys=True) + "\n")
    for ref in others:
        print(f"{first} / {ref}: {results['first_over'][ref]:.3f} (goal <= 1.00)")
    print(f"results: {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
