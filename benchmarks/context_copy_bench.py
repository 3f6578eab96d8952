"""What the buildah context's own copies of the wheels cost (issue 29).

    python benchmarks/context_copy_bench.py [--project images/digits-torch] [--rounds 5]

A buildah build bind-mounts the context's wheels (RUN --mount), and buildah 1.39 digests the
mount's source, mtimes included, so the context clamps them to SOURCE_DATE_EPOCH; they are hard
links into the wheel cache, so clamping first gives each its own copy (a reflink where the file
system has them). Per round, into a fresh context in TMPDIR (as a build's; on the cache's
file system the wheels are linked, elsewhere copied by the fetch step already): the
fetch step as a build runs it (every locked wheel already cached: link, and verify each one's
sha256), then the clamp (the copies). Medians over rounds, and the clamp as a ratio of the fetch
step measured in the same round. The page cache is warm, as in a build: the fetch step has just
read every wheel. Needs the project's wheels in the cache (one build of it, or ``reprobuild
image`` once); prints a table and writes benchmarks/results/context_copy.json.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import tempfile
import time
from pathlib import Path

from reprobuild.imaging.context import clamp_times
from reprobuild.locks.lockfile import load_lock
from reprobuild.locks.wheels import Target, cache_root, fetch_wheels

HERE = Path(__file__).resolve().parent
EPOCH = 1700000000


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--project", type=Path, default=HERE.parent / "images" / "digits-torch")
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--target", default="3.11,x86_64,2.36", help="python,machine,glibc")
    args = parser.parse_args()
    py, machine, glibc = args.target.split(",")
    major, minor = glibc.split(".")
    target = Target(py, machine, (int(major), int(minor)))
    lock = load_lock(args.project / "requirements.lock")
    folder = cache_root() / "wheels" / target.key
    fetch, copy, size = [], [], 0
    for _ in range(args.rounds):
        with tempfile.TemporaryDirectory() as tmp:
            ctx = Path(tmp) / "context"
            ctx.mkdir()
            t0 = time.perf_counter()
            wheels = fetch_wheels(lock, target, ctx / "wheels", log=lambda _m: None)
            t1 = time.perf_counter()
            clamp_times(ctx, EPOCH)
            t2 = time.perf_counter()
            assert all(w.stat().st_nlink == 1 for w in wheels)
            size = sum(w.stat().st_size for w in wheels)
            fetch.append(t1 - t0)
            copy.append(t2 - t1)
    ratios = [c / f for c, f in zip(copy, fetch, strict=True)]
    result = {
        "project": str(args.project),
        "same_file_system": Path(tempfile.gettempdir()).stat().st_dev == folder.stat().st_dev,
        "wheels": len(wheels),
        "megabytes": round(size / 1e6, 1),
        "rounds": args.rounds,
        "fetch_s": round(statistics.median(fetch), 3),
        "copy_and_clamp_s": round(statistics.median(copy), 3),
        "copy_over_fetch": round(statistics.median(ratios), 3),
    }
    for key, value in result.items():
        print(f"{key:18} {value}")
    out = HERE / "results" / "context_copy.json"
    out.parent.mkdir(exist_ok=True)
    out.write_text(json.dumps(result, indent=2) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
