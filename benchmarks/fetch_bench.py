"""The wheel fetch into a cold cache against a plain parallel download of the same URLs
(issue 52 item 4), as ratios measured in the same run.

    python benchmarks/fetch_bench.py [--lock tests/data/lockfiles/wild/outlines-1.3.3/uv.lock]
                                     [--extras test] [--max-mb 60] [--rounds 3] [--old]
                                     [--out FILE]

The lock is a public project's uv.lock (default: outlines 1.3.3, its ``test`` extra, the JAX
and transformers stack) read for CPython 3.11 on linux x86_64 (glibc 2.36), without its wheels
over ``--max-mb`` (torch, its CUDA wheels, tensorflow: 3.2 GB that would measure the disk
more than the fetch). Each round, in alternating order:

- ``ours``: :func:`reprobuild.locks.wheels.fetch_wheels` into an empty cache (no local wheel
  folder or mirror: ``REPROBUILD_FIND_LINKS``/``REPROBUILD_LOCAL_INDEXES`` unset), the index
  probe, the plan and the hash checks included, ``REPROBUILD_FETCH_THREADS`` as set (8);
- ``curl8``: the same URLs (the ones ours chose) by ``curl -sSfL``, 8 at a time
  (``xargs -P 8``), into an empty folder, nothing checked;
- ``py8``: the same URLs by 8 threads of plain :mod:`urllib` sharing one TLS context,
  nothing checked;
- ``old`` (with ``--old``): the path before issue 52, one ``pip download`` per index.

Goal: ours at most 1.25 x the faster of curl8 and py8. Prints a table and writes
benchmarks/results/fetch-<date>.json (or --out).
"""

from __future__ import annotations

import argparse
import concurrent.futures
import json
import os
import shutil
import ssl
import statistics
import subprocess
import sys
import tempfile
import time
import tomllib
import urllib.request
from dataclasses import replace
from pathlib import Path
from typing import Any

from reprobuild.locks import fetchnet, parfetch, wheels
from reprobuild.locks.lockfile import Lock, load_lock
from reprobuild.locks.native import Selection

HERE = Path(__file__).resolve().parent
DEFAULT_LOCK = HERE.parent / "tests/data/lockfiles/wild/outlines-1.3.3/uv.lock"
TARGET = wheels.Target("3.11", "x86_64", (2, 36))


def bench_lock(path: Path, extras: tuple[str, ...], max_mb: float) -> tuple[Lock, list[str], int]:
    """The lock without its packages whose chosen wheel is over ``max_mb``; its URLs and bytes."""
    selection = Selection(extras=extras)
    lock = load_lock(path, selection)
    lock = replace(lock, requirements=lock.wheel_requirements)
    sizes = {
        w["hash"].split(":", 1)[1]: int(w.get("size", 0))
        for p in tomllib.loads(path.read_text())["package"]
        for w in p.get("wheels", [])
    }
    ranks = parfetch.target_ranks(TARGET.python_version, TARGET.abi, TARGET.platforms())
    planned = parfetch.plan(lock, lock.requirements, selection, ranks=ranks, threads=8)
    keep = [j for j in planned.jobs if sizes.get(j.sha256, 0) <= max_mb * 1e6]
    names = {j.req.name for j in keep}
    lock = replace(lock, requirements=tuple(r for r in lock.requirements if r.name in names))
    return lock, [j.url for j in keep], sum(sizes.get(j.sha256, 0) for j in keep)


def run_ours(lock: Lock, tmp: Path) -> float:
    os.environ["REPROBUILD_CACHE_DIR"] = str(tmp / "cache")
    start = time.monotonic()
    got = wheels.fetch_wheels(lock, TARGET, tmp / "ctx", log=lambda _: None)
    took = time.monotonic() - start
    _check(got, lock)
    return took


def _check(got: list[Path], lock: Lock) -> None:
    """Every package's wheel came (all downloaded: the cache was empty)."""
    if len(got) != len(lock.requirements):
        raise SystemExit(f"fetched {len(got)} wheels for {len(lock.requirements)} packages")


def run_curl(urls: list[str], tmp: Path) -> float:
    (tmp / "curl").mkdir()
    start = time.monotonic()
    subprocess.run(
        ["xargs", "-P", "8", "-n", "1", "curl", "-sSfL", "-O"],
        input="\n".join(urls) + "\n", text=True, cwd=tmp / "curl", check=True,
    )  # fmt: skip
    return time.monotonic() - start


def run_py(urls: list[str], tmp: Path) -> float:
    """The same URLs by 8 threads of plain urllib (a 1 MiB buffer), nothing checked; one TLS
    context for all (``urlopen``'s own loads the CA bundle again for every connection: on a
    loaded 2-core host that alone made it twice as slow)."""
    (tmp / "py").mkdir()
    opener = urllib.request.build_opener(
        urllib.request.HTTPSHandler(context=ssl.create_default_context())
    )

    def get(url: str) -> None:
        path = tmp / "py" / url.rsplit("/", 1)[-1]
        with opener.open(url, timeout=60) as response, path.open("wb") as out:
            shutil.copyfileobj(response, out, 1 << 20)

    start = time.monotonic()
    with concurrent.futures.ThreadPoolExecutor(8) as pool:
        list(pool.map(get, urls))
    return time.monotonic() - start


def run_old(lock: Lock, tmp: Path) -> float:
    """The path before issue 52: every wheel by ``pip download`` (no URL is planned)."""
    os.environ["REPROBUILD_CACHE_DIR"] = str(tmp / "cache")
    real = parfetch.plan
    parfetch.plan = lambda lock, reqs, *a, **k: parfetch.Plan((), tuple(reqs))  # type: ignore[assignment]
    try:
        start = time.monotonic()
        got = wheels.fetch_wheels(lock, TARGET, tmp / "ctx", log=lambda _: None)
        took = time.monotonic() - start
        _check(got, lock)
        return took
    finally:
        parfetch.plan = real


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--lock", type=Path, default=DEFAULT_LOCK)
    parser.add_argument("--extras", default="test")
    parser.add_argument("--max-mb", type=float, default=60.0)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--old", action="store_true")
    parser.add_argument("--out", type=Path)
    args = parser.parse_args()
    for var in (fetchnet.FIND_LINKS_VAR, fetchnet.LOCAL_INDEXES_VAR):
        os.environ.pop(var, None)
    extras = tuple(e for e in args.extras.split(",") if e)
    lock, urls, nbytes = bench_lock(args.lock, extras, args.max_mb)
    print(f"{args.lock}: {len(urls)} wheels, {nbytes / 1e6:.1f} MB for {TARGET.key}")
    arms: dict[str, Any] = {"ours": run_ours, "curl8": run_curl, "py8": run_py}
    if args.old:
        arms["old"] = run_old
    times: dict[str, list[float]] = {name: [] for name in arms}
    for n in range(args.rounds):
        order = list(arms) if n % 2 == 0 else list(reversed(arms))
        for name in order:
            with tempfile.TemporaryDirectory(prefix="fetch-bench-") as tmp:
                what = urls if name in ("curl8", "py8") else lock
                took = arms[name](what, Path(tmp))
            times[name].append(took)
            print(f"round {n + 1}: {name} {took:.1f} s", flush=True)
    medians = {name: statistics.median(t) for name, t in times.items()}
    plain = min(medians["curl8"], medians["py8"])
    ratio = medians["ours"] / plain
    result = {
        "lock": str(args.lock),
        "extras": list(extras),
        "max_mb": args.max_mb,
        "wheels": len(urls),
        "bytes": nbytes,
        "threads": fetchnet.fetch_threads(),
        "times_s": {k: [round(x, 2) for x in v] for k, v in times.items()},
        "median_s": {k: round(v, 2) for k, v in medians.items()},
        "ours_over_plain": round(ratio, 3),
        "goal": "ours <= 1.25 x the faster plain 8-connection download (curl8, py8)",
        "command": " ".join([Path(sys.executable).name, *sys.argv]),
    }
    if "old" in medians:
        result["old_over_plain"] = round(medians["old"] / plain, 3)
    print(json.dumps(result, indent=2))
    out = args.out or HERE / "results" / f"fetch-{time.strftime('%Y-%m-%d')}.json"
    out.write_text(json.dumps(result, indent=2) + "\n")
    return 0 if ratio <= 1.25 else 1


if __name__ == "__main__":
    sys.exit(main())
