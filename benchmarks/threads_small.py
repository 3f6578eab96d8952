"""Issue 31, item 4: the runtime's fixed thread count on a small machine, and what it costs.

Runs ``workloads/torch_lbfgs.py`` (small-tensor float64 LBFGS, as pytorch/examples'
time_sequence_prediction) and, with ``--cnn`` where scikit-learn is installed,
``workloads/torch_cnn.py`` on this host under the
runtime's start-up hook in strict mode (the environment an image bakes, planned in the process
before torch loads, as in the image), at ``REPRO_THREADS`` 4 (the default), 2 and 1, each with
OpenMP's wait policy as the runtime now sets it (``OMP_WAIT_POLICY=PASSIVE``: a thread that
waits sleeps) and as the libraries leave it (the variable set empty: libgomp spins a while
first). Configurations alternate within each round; a ratio is the median over rounds of two
configurations' times in the same round. Every configuration's printed losses must repeat; the
wait policy must not change them (the thread count may). ``--attribute`` adds the LBFGS loop at
4 threads with oneMKL alone held to 1 and to 2 (``BENCH_MKL_LOCAL``): which library's threads
cost the time, and which library's thread count the printed loss follows.

    python benchmarks/threads_small.py --rounds 3 [--cnn] [--attribute]
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

from portable_bench import environment  # the same image environment (this folder)

import reprobuild_entrypoint

HERE = Path(__file__).resolve().parent
RUNTIME = str(Path(reprobuild_entrypoint.__file__).resolve().parent.parent)
LAUNCH = (
    "import runpy, site, sys; site.addsitedir(sys.argv[1]); sys.argv = sys.argv[2:]; "
    "runpy.run_path(sys.argv[0], run_name='__main__')"
)
POLICIES = {"passive": "PASSIVE", "spin": ""}  # "": unset for libgomp, kept as user-set


def run(
    site: Path, script: str, threads: int, policy: str, mkl: int, length: int = 0
) -> tuple[float, float, str]:
    """Wall time of the whole process, the program's own training time, and its printout."""
    env = {
        **environment(None, threads),
        "OMP_WAIT_POLICY": POLICIES[policy],
        "PYTHONPATH": str(HERE / "workloads"),
    }
    if mkl:
        env["BENCH_MKL_LOCAL"] = str(mkl)
    if length:
        env["BENCH_LBFGS_LENGTH"] = str(length)
    start = time.perf_counter()
    done = subprocess.run(
        [sys.executable, "-c", LAUNCH, str(site), str(HERE / "workloads" / f"{script}.py")],
        env=env,
        capture_output=True,
        text=True,
        check=False,
        cwd=HERE / "workloads",
    )
    wall = time.perf_counter() - start
    if done.returncode != 0:
        raise SystemExit(f"{script} threads {threads} {policy} failed:\n{done.stderr[-2000:]}")
    lines = done.stdout.splitlines()
    bits = "\n".join(line for line in lines if not line.startswith(("train_s", "time")))
    train = [float(line.split()[1]) for line in lines if line.startswith("train_s ")]
    if not train:
        raise SystemExit(f"{script} threads {threads} {policy} printed no train_s line")
    return wall, train[0], bits


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--cnn", action="store_true", help="also the torch CNN at 4 threads")
    parser.add_argument("--attribute", action="store_true", help="also oneMKL held to 1 and 2")
    parser.add_argument("--length", type=int, default=0, help="LBFGS sequence length (100)")
    parser.add_argument("--json", type=Path)
    args = parser.parse_args()
    configs = [("torch_lbfgs", t, p, 0) for t in (4, 2, 1) for p in POLICIES]
    if args.cnn:
        configs += [("torch_cnn", 4, p, 0) for p in POLICIES]
    if args.attribute:
        configs += [("torch_lbfgs", 4, "passive", m) for m in (1, 2)]
    times: dict[str, list[float]] = {}
    trains: dict[str, list[float]] = {}  # the program's own training time, start-up left out
    outputs: dict[str, set[str]] = {}
    with tempfile.TemporaryDirectory() as folder:
        site = Path(folder)
        (site / "reprobuild.pth").write_text(f"{RUNTIME}\nimport reprobuild_entrypoint._startup\n")
        for number in range(args.rounds):
            for script, threads, policy, mkl in configs:
                key = f"{script} threads={threads} {policy}" + (f" mkl={mkl}" if mkl else "")
                wall, train, bits = run(site, script, threads, policy, mkl, args.length)
                times.setdefault(key, []).append(wall)
                trains.setdefault(key, []).append(train)
                outputs.setdefault(key, set()).add(bits)
                print(f"round {number + 1}: {key}: {wall:.2f} s", file=sys.stderr, flush=True)

    def ratio(a: str, b: str, table: dict[str, list[float]] = times) -> float:
        return statistics.median(x / y for x, y in zip(table[a], table[b], strict=True))

    lb = "torch_lbfgs threads="
    best = min(
        (f"{lb}{t} {p}" for t in (4, 2, 1) for p in POLICIES),
        key=lambda k: statistics.median(times[k]),
    )
    result = {
        "cpus": len(os.sched_getaffinity(0)),
        "rounds": args.rounds,
        "median_s": {k: round(statistics.median(v), 3) for k, v in times.items()},
        "train_median_s": {k: round(statistics.median(v), 3) for k, v in trains.items()},
        "repeats_its_bits": {k: len(v) == 1 for k, v in outputs.items()},
        "policy_keeps_bits": {
            f"{s} threads={t}": outputs[f"{s} threads={t} passive"]
            == outputs[f"{s} threads={t} spin"]
            for s, t, p, m in configs
            if p == "passive" and not m
        },
        "same_bits_as_4_threads": {
            str(t): outputs[f"{lb}{t} passive"] == outputs[f"{lb}4 passive"] for t in (2, 1)
        },
        "ratios": {
            "lbfgs default(4) spin / best": ratio(f"{lb}4 spin", best),
            "lbfgs default(4) passive / best": ratio(f"{lb}4 passive", best),
            "lbfgs default(4) passive / 1 passive, training only": ratio(
                f"{lb}4 passive", f"{lb}1 passive", trains
            ),
            "lbfgs 4 passive / 4 spin": ratio(f"{lb}4 passive", f"{lb}4 spin"),
            "lbfgs 2 passive / 2 spin": ratio(f"{lb}2 passive", f"{lb}2 spin"),
            "lbfgs 1 passive / 1 spin": ratio(f"{lb}1 passive", f"{lb}1 spin"),
            "best": best,
        },
    }
    if args.attribute:
        for m in (1, 2):
            key = f"{lb}4 passive mkl={m}"
            result["ratios"][f"lbfgs 4 passive mkl={m} / {m} passive"] = ratio(
                key, f"{lb}{m} passive"
            )
            result["same_bits_as_4_threads"][f"4 mkl={m}"] = (
                outputs[key] == outputs[f"{lb}4 passive"]
            )
            result["same_bits_as_4_threads"][f"4 mkl={m} as {m}"] = (
                outputs[key] == outputs[f"{lb}{m} passive"]
            )
    if args.cnn:
        result["ratios"]["cnn 4 passive / 4 spin"] = ratio(
            "torch_cnn threads=4 passive", "torch_cnn threads=4 spin"
        )
    text = json.dumps(result, indent=2, default=str)
    print(text)
    if args.json:
        args.json.write_text(text)


if __name__ == "__main__":
    main()
