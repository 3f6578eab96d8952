"""Building a lock's sdists (issue 39): ours against a hand-written best-practice Dockerfile that
installs the same lock with ``uv pip install --require-hashes``, on the same builder (buildah)
and the same base digest, as ratios measured in the same run.

    python benchmarks/sdist_bench.py --base REF@sha256:... [--project benchmarks/workloads/sdists]
                                     [--rounds 3] [--out FILE] [--uv-compile-bytecode]

The project's uv.lock locks N packages as sdists only (the default: antlr4-python3-runtime
4.9.3, docopt 0.6.2, langdetect 1.0.9 and sqlitedict 2.1.0, beside six as a wheel; no torch
to drown the sdists' own cost; tests/data/projects/sdist has two of them). Two ML-sized ones
beside torch 2.13 CPU (the machine's own wheel): tests/data/projects/sdist-torch (julius 0.2.7)
and benchmarks/workloads/sdists-torch (julius and the four above: five sdists). Both arms start
cold (their builder's cache off; the base already pulled and every file already on the host,
as on a developer machine after the first build) and end with the image in the Docker engine;
the arms alternate, ours first in odd rounds and the baseline first in even ones, and each
starts after a ``sync`` (untimed: :func:`settle`), so that neither pays for the write-back of
the build before it:

- ``ours``: ``reprobuild image --builder buildah --no-cache`` (the wheel-build stage on the
  base, then the image; probe, stamp and the load into the engine included);
- ``best-uv``: one stage; the sdists, the build requirements' wheels, the lock exported as
  hashed requirements (``uv export``), the build lock (uv's ``--build-constraint``, hashed) and
  the host's own ``uv`` binary (the pinned uv in reprobuild's venv) bind-mounted (``RUN
  --mount``); ``uv pip install --require-hashes --no-index --no-cache`` into a venv, the sdists
  built by uv with build isolation from those wheels; ``buildah bud --layers --no-cache``,
  then ``buildah push docker-archive:`` through a pipe into ``docker load``, as ours loads.
  With ``--uv-compile-bytecode`` uv writes .pyc files too, as ours does (pip's default).

Then a code-only rebuild of ours (the app changed, not committed; cache on) against its cold
build, and a committed one: a build at one commit time (SOURCE_DATE_EPOCH), then the app
changed and built at a commit an hour later. Goals (issue 39): cold at most 1.05 x best-uv;
the code-only rebuild under 5 % of cold.
Every line each arm's builder prints is kept with the seconds since its start (``trace`` in
the JSON, for the round nearest each arm's median), so that where the time goes can be read off
a run. Prints a table and writes benchmarks/results/sdist-build-<date>.json (or --out).
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
import uuid
from pathlib import Path
from typing import Any

import docker

from reprobuild.backends import buildah
from reprobuild.project.config import load_config

HERE = Path(__file__).resolve().parent
BEST_UV = """\
FROM {base}
RUN --mount=type=bind,source=uv,target=/tmp/uv \\
    --mount=type=bind,source=dists,target=/tmp/dists \\
    --mount=type=bind,source=requirements.txt,target=/tmp/requirements.txt \\
    --mount=type=bind,source=build-constraints.txt,target=/tmp/build-constraints.txt \\
    python3 -m venv --without-pip /venv \\
 && /tmp/uv/uv pip install --python /venv/bin/python --no-cache --no-index{compile} \\
      --find-links /tmp/dists --require-hashes \\
      --build-constraint /tmp/build-constraints.txt -r /tmp/requirements.txt
ENV PATH=/venv/bin:$PATH
WORKDIR /app
COPY {app} /app/
CMD ["python", "{app}"]
"""
Trace = list[tuple[float, str]]


def traced(argv: list[str], env: dict[str, str] | None = None) -> tuple[float, Trace]:
    """Run ``argv``; its seconds, and each line it printed (stdout and stderr) with the
    seconds since the start at which it arrived."""
    start = time.perf_counter()
    lines: Trace = []
    proc = subprocess.Popen(
        argv, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, env=env,
        errors="replace",
    )  # fmt: skip
    assert proc.stdout is not None
    for line in proc.stdout:
        lines.append((round(time.perf_counter() - start, 2), line.rstrip("\n")))
    code = proc.wait()
    elapsed = time.perf_counter() - start
    if code != 0:
        tail = "\n".join(text for _, text in lines[-40:])
        sys.exit(f"benchmark step failed: {' '.join(argv)}\n{tail}")
    return elapsed, lines


def ours(
    project: Path, base: str, tag: str, env: dict[str, str], *extra: str
) -> tuple[float, Trace]:
    cli = [sys.executable, "-m", "reprobuild", "image", str(project), "--base", base]
    return traced([*cli, "--tag", tag, "--builder", "buildah", *extra], env)


def best_uv(context: Path, tag: str, scratch: Path) -> tuple[float, Trace]:
    """``buildah bud --no-cache``, then into the engine through a pipe, as ours goes."""
    start = time.perf_counter()
    name = f"localhost/bench-best-uv:{uuid.uuid4().hex[:8]}"
    iid = scratch / "best.iid"
    try:
        # within this machine's hard limits, as reprobuild's own buildah builds
        _, lines = traced(["buildah", "bud", "--layers", "--no-cache", "--pull=never", "-t", name,
                           *buildah.ulimits(), "--iidfile", str(iid), str(context)])  # fmt: skip
        image_id = iid.read_text().strip().removeprefix("sha256:")
        at = time.perf_counter() - start
        lines.append((round(at, 2), "(bench) buildah push docker-archive: | docker load"))
        traced(["bash", "-c", 'set -o pipefail; buildah push --quiet "$0" '
                '"docker-archive:/dev/fd/3:$1" 3>&1 >/dev/null | docker load -q',
                image_id, tag])  # fmt: skip
        elapsed = time.perf_counter() - start
        lines.append((round(elapsed, 2), "(bench) loaded"))
        return elapsed, lines
    finally:
        iid.unlink(missing_ok=True)
        subprocess.run(["buildah", "rmi", name], capture_output=True, check=False)


def best_context(
    work: Path, folder: Path, base: str, uv: Path, cache: Path, *, compile_bytecode: bool = False
) -> Path:
    """The baseline's build context: every sdist and wheel ours used, taken from the host cache
    its warm-up build filled (``cache``: this project's files only), under their own names; the
    lock exported as hashed requirements; the build lock as hashed build constraints; the uv
    binary; the app. ``compile_bytecode``: uv writes .pyc files as pip does in ours (uv's
    Docker guide recommends it for production images; uv does not by default)."""
    config = load_config(work)
    assert config.build_lock is not None, "the project needs a build lock (build_lock:)"
    dists = folder / "dists"
    dists.mkdir(parents=True)
    for sdist in (cache / "sources").iterdir():  # cached as <sha256>-<file name>
        if sdist.is_file():
            shutil.copy(sdist, dists / sdist.name.split("-", 1)[1])
    for wheel in (cache / "wheels").rglob("*.whl"):
        shutil.copy(wheel, dists / wheel.name)
    exported = subprocess.run(
        [str(uv), "export", "--frozen", "--no-emit-project", "--no-header", "--format",
         "requirements-txt", "--directory", str(work)],
        capture_output=True, text=True, check=True,
    )  # fmt: skip
    (folder / "requirements.txt").write_text(exported.stdout)
    shutil.copy(config.build_lock, folder / "build-constraints.txt")
    (folder / "uv").mkdir()
    shutil.copy(uv, folder / "uv" / "uv")
    app = config.include[0]
    shutil.copy(work / app, folder / app)
    flag = " --compile-bytecode" if compile_bytecode else ""
    (folder / "Dockerfile").write_text(BEST_UV.format(base=base, app=app, compile=flag))
    return folder


def settle() -> dict[str, float]:
    """Write back what the previous build left dirty in the page cache (``sync``, not timed),
    so that no build pays for the one before it: a build's commit writes its layer through the
    page cache, and where the kernel is still writing back the last build's gigabytes it
    throttles the writer down to the disk's speed (on a 2-core host here the torch layer's
    commit took 5 s after some builds and 15 s after others). Returns the dirty megabytes
    found and the seconds the write-back took."""
    dirty_kb = next(
        int(line.split()[1])
        for line in Path("/proc/meminfo").read_text().splitlines()
        if line.startswith("Dirty:")
    )
    start = time.perf_counter()
    os.sync()
    return {"dirty_mb": round(dirty_kb / 1024, 1), "sync_s": round(time.perf_counter() - start, 2)}


def nearest_median(runs: list[tuple[float, Trace]]) -> Trace:
    """The trace of the run whose time is nearest the median."""
    middle = statistics.median(seconds for seconds, _ in runs)
    return min(runs, key=lambda run: abs(run[0] - middle))[1]


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--base", required=True, help="digest-pinned base (REF@sha256:...)")
    parser.add_argument("--project", type=Path, default=HERE / "workloads" / "sdists")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--out", type=Path, default=None)
    parser.add_argument(
        "--uv-compile-bytecode",
        action="store_true",
        help="the baseline compiles bytecode too (uv pip install --compile-bytecode), as ours "
        "ships it; off by default, as in the runs before 2026-11-28",
    )
    args = parser.parse_args()
    day = time.strftime("%Y-%m-%d", time.gmtime())
    out: Path = args.out or HERE / "results" / f"sdist-build-{day}.json"
    uv = Path(sys.executable).parent / "uv"
    if not uv.is_file():
        sys.exit(f"no uv beside {sys.executable}: run scripts/install (reprobuild pins uv)")
    client = docker.from_env()
    tags: list[str] = []
    try:
        results = _measure(args, client, uv, tags)
    finally:  # a failed step leaves no tag behind either
        for tag in tags:
            with contextlib.suppress(docker.errors.ImageNotFound):
                client.images.remove(tag, force=True)
    results["date"] = day
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(results, indent=2, sort_keys=True) + "\n")
    cold = results["cold_s"]
    print(f"\ncold builds, median of {args.rounds} rounds:")
    for name in ("ours", "best-uv"):
        runs = ", ".join(f"{s:.1f}" for s in cold[name]["runs"])
        print(f"  {name:8s} {cold[name]['median']:6.1f} s  ({runs})")
    print(
        f"  ours / best-uv: {results['cold_over_best_uv']:.3f} (goal <= 1.05); per round "
        f"{', '.join(f'{r:.2f}' for r in results['per_round_ratio'])}"
    )
    print(
        f"  code-only rebuild: {results['rebuild_code_change_s']:.1f} s = "
        f"{results['rebuild_over_cold']:.1%} of cold (goal < 5%)"
    )
    print(
        f"  committed code change: {results['rebuild_committed_s']:.1f} s = "
        f"{results['rebuild_committed_over_cold']:.1%} of cold"
    )
    print(f"results: {out}")
    return 0


def _measure(
    args: argparse.Namespace, client: docker.DockerClient, uv: Path, tags: list[str]
) -> dict[str, Any]:
    run_id = uuid.uuid4().hex[:8]
    with tempfile.TemporaryDirectory(prefix="reprobuild-bench-") as tmp_name:
        tmp = Path(tmp_name)
        work = tmp / "project"
        shutil.copytree(args.project, work)
        config = load_config(work)
        cache = tmp / "cache"  # this project's files only: the baseline copies all of them
        env = {**os.environ, "SOURCE_DATE_EPOCH": "0", "REPROBUILD_CACHE_DIR": str(cache)}
        # fills the cache (sdists, the build lock's wheels, the lock's), pulls the base
        warm = f"reprobuild-bench/sdist-ours:{run_id}-warm"
        tags.append(warm)
        ours(work, args.base, warm, env)
        best = best_context(
            work, tmp / "best", args.base, uv, cache, compile_bytecode=args.uv_compile_bytecode
        )
        sdists = sorted(p.name for p in (cache / "sources").iterdir() if p.is_file())
        load = os.getloadavg()
        print(f"{len(sdists)} sdists; load average {load[0]:.1f} at the start", flush=True)
        runs: dict[str, list[tuple[float, Trace]]] = {"ours": [], "best-uv": []}
        settled: list[dict[str, float]] = []
        for n in range(args.rounds):
            order = ["ours", "best-uv"] if n % 2 == 0 else ["best-uv", "ours"]
            for name in order:
                tag = f"reprobuild-bench/sdist-{name}:{run_id}-{n}"
                tags.append(tag)
                settled.append(settle())
                if name == "ours":
                    # a commit time of its own per round: the same inputs would give an image
                    # the engine already holds, only tagged; and no build of this project left
                    # in buildah's storage (--no-cache would time its removal)
                    buildah.forget(config.name, "cpu")
                    at = {**env, "SOURCE_DATE_EPOCH": str(n + 1)}
                    run = ours(work, args.base, tag, at, "--no-cache")
                else:
                    run = best_uv(best, tag, tmp)
                runs[name].append(run)
                print(f"round {n + 1}: {name:8s} {run[0]:7.1f} s", flush=True)
        cold = {name: statistics.median(s for s, _ in r) for name, r in runs.items()}
        app = work / config.include[0]
        app.write_text(app.read_text() + "\n# a code-only change\n")
        tag = f"reprobuild-bench/sdist-ours:{run_id}-rebuild"
        tags.append(tag)
        # the last round's epoch: its cached steps are what the next build after a code-only
        # change finds
        rebuild, rebuild_trace = ours(
            work, args.base, tag, {**env, "SOURCE_DATE_EPOCH": str(args.rounds)}
        )
        # A committed code change: SOURCE_DATE_EPOCH is the project's last commit time, so a
        # commit moves it. One build at a commit, then the app changed and committed an hour on.
        commit = 1700000000
        tags.append(f"reprobuild-bench/sdist-ours:{run_id}-commit-1")
        ours(work, args.base, tags[-1], {**env, "SOURCE_DATE_EPOCH": str(commit)})
        app.write_text(app.read_text() + "# a committed code change\n")
        tags.append(f"reprobuild-bench/sdist-ours:{run_id}-commit-2")
        committed, committed_trace = ours(
            work, args.base, tags[-1], {**env, "SOURCE_DATE_EPOCH": str(commit + 3600)}
        )
    return {
        "project": str(args.project),
        "sdists": sdists,
        "base": args.base,
        "rounds": args.rounds,
        "uv_compile_bytecode": args.uv_compile_bytecode,
        "cpus": os.cpu_count(),
        "load_average_at_start": [round(x, 2) for x in load],
        "buildah": buildah.version(),
        "uv": subprocess.run([str(uv), "--version"], capture_output=True, text=True).stdout.strip(),
        "cold_s": {
            name: {"runs": [round(s, 2) for s, _ in r], "median": round(cold[name], 2)}
            for name, r in runs.items()
        },
        "cold_over_best_uv": round(cold["ours"] / cold["best-uv"], 4),
        "settled_before_each_cold_build": settled,
        "per_round_ratio": [
            round(a[0] / b[0], 4) for a, b in zip(runs["ours"], runs["best-uv"], strict=True)
        ],
        "rebuild_code_change_s": round(rebuild, 2),
        "rebuild_over_cold": round(rebuild / cold["ours"], 4),
        "rebuild_committed_s": round(committed, 2),
        "rebuild_committed_over_cold": round(committed / cold["ours"], 4),
        "trace": {
            "ours": nearest_median(runs["ours"]),
            "best-uv": nearest_median(runs["best-uv"]),
            "ours-rebuild": rebuild_trace,
            "ours-rebuild-committed": committed_trace,
        },
    }


if __name__ == "__main__":
    sys.exit(main())
