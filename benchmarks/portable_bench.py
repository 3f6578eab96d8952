"""Issue 31: what ``REPRO_CPU=portable`` costs against native strict, as ratios in one run.

    python benchmarks/portable_bench.py [--rounds 3] [--threads 2] [--json FILE]

Workloads (each a fresh interpreter started with the runtime's start-up hook, as in an image,
timed inside the program so that imports stay out of the figure; unseeded, the runtime seeds):

- ``cnn``: a torch CNN (two conv layers with batch norm, ReLU, max-pool, dropout, a linear
  head) on 32x32 synthetic images, default Adam, 30 steps of batch 64;
- ``matmul``: ten float32 1024x1024 @ 1024x1024 products;
- ``adam``: 50 default (single-tensor) Adam steps on 4 * 10**6 float32 parameters, where the
  float32 sqrt that portable mode takes exactly shows.

Configurations: ``native`` (strict, ``REPRO_CPU=native``), ``portable`` (``x86-64-v2``: ATen
DEFAULT, oneDNN and NNPACK off, oneMKL COMPATIBLE, exact sqrt) and ``x86-64-v3`` (the AVX2 level:
oneDNN kept on, capped at AVX2). Each round runs every configuration of a workload back to back;
a ratio is the median over rounds of ``time(config) / time(native)`` in the same round (the host
is shared, so absolute times are not figures). Each run prints its result bits: a configuration
whose rounds disagree is reported, as are the configurations whose bits equal native's.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import subprocess
import sys
import tempfile
import textwrap
from pathlib import Path

import reprobuild_entrypoint
from reprobuild_entrypoint import cpulevel
from reprobuild_entrypoint.envplan import image_env

RUNTIME_ROOT = str(Path(reprobuild_entrypoint.__file__).resolve().parent.parent)
LAUNCH = (
    "import runpy, site, sys; site.addsitedir(sys.argv[1]); sys.argv = sys.argv[2:]; "
    "runpy.run_path(sys.argv[0], run_name='__main__')"
)
CONFIGS = ("native", "portable", "x86-64-v3")
GOAL = 1.25

WORKLOADS = {
    "cnn": """
        import hashlib, time, torch
        from torch import nn
        x = torch.randn(640, 1, 32, 32); y = torch.randint(0, 10, (640,))
        model = nn.Sequential(
            nn.Conv2d(1, 32, 3, padding=1), nn.BatchNorm2d(32), nn.ReLU(), nn.MaxPool2d(2),
            nn.Conv2d(32, 64, 3, padding=1), nn.BatchNorm2d(64), nn.ReLU(), nn.MaxPool2d(2),
            nn.Flatten(), nn.Dropout(0.3), nn.Linear(64 * 8 * 8, 128), nn.ReLU(),
            nn.Linear(128, 10),
        )
        opt = torch.optim.Adam(model.parameters(), lr=1e-3)
        start = time.perf_counter()
        for step in range(30):
            idx = torch.arange(step % 10 * 64, step % 10 * 64 + 64)
            opt.zero_grad()
            loss = nn.functional.cross_entropy(model(x[idx]), y[idx])
            loss.backward()
            opt.step()
        took = time.perf_counter() - start
        h = hashlib.sha256(b"".join(p.detach().numpy().tobytes() for p in model.parameters()))
        print(f"time_s {took:.4f}"); print(f"bits {loss.item().hex()} {h.hexdigest()[:16]}")
    """,
    "matmul": """
        import hashlib, time, torch
        a = torch.randn(1024, 1024); b = torch.randn(1024, 1024)
        a @ b
        start = time.perf_counter()
        for _ in range(10):
            c = a @ b
        took = time.perf_counter() - start
        print(f"time_s {took:.4f}")
        print(f"bits {hashlib.sha256(c.numpy().tobytes()).hexdigest()[:16]}")
    """,
    "adam": """
        import hashlib, time, torch
        p = torch.nn.Parameter(torch.randn(4_000_000))
        opt = torch.optim.Adam([p], lr=1e-3)
        grads = [torch.randn(4_000_000) for _ in range(5)]
        start = time.perf_counter()
        for step in range(50):
            p.grad = grads[step % 5]
            opt.step()
        took = time.perf_counter() - start
        print(f"time_s {took:.4f}")
        print(f"bits {hashlib.sha256(p.detach().numpy().tobytes()).hexdigest()[:16]}")
    """,
}


def environment(cpu: str | None, threads: int) -> dict[str, str]:
    """A CPU image's environment (seed 0, strict), plus the run's threads and CPU mode (None:
    the image's own default, REPRO_CPU unset)."""
    env = {
        "PATH": os.environ.get("PATH", "/usr/bin:/bin"),
        "HOME": os.environ.get("HOME", "/root"),
        "REPRO_QUIET": "1",
        "REPROBUILD_IMAGE_SEED": "0",
        "REPROBUILD_IMAGE_DETERMINISM": "strict",
        "REPROBUILD_VARIANT": "cpu",
        **image_env(0, "strict", "cpu"),
        "REPRO_THREADS": str(threads),
    }
    if cpu is not None:
        env["REPRO_CPU"] = cpu
    return env


def run_once(site: Path, program: Path, cpu: str, threads: int) -> tuple[float, str]:
    done = subprocess.run(
        [sys.executable, "-c", LAUNCH, str(site), str(program)],
        env=environment(cpu, threads),
        capture_output=True,
        text=True,
        timeout=900,
        check=False,
    )
    if done.returncode != 0:
        raise SystemExit(f"error: {program.stem} ({cpu}) failed: {done.stderr[-2000:]}")
    fields = dict(line.split(" ", 1) for line in done.stdout.splitlines() if " " in line)
    return float(fields["time_s"]), fields["bits"]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--workloads", default=",".join(WORKLOADS))
    parser.add_argument("--json", type=Path, default=None, help="also write the figures here")
    args = parser.parse_args(argv)
    names = [n for n in args.workloads.split(",") if n]
    unknown = [n for n in names if n not in WORKLOADS]
    if unknown or args.rounds < 1 or args.threads < 1:
        parser.error(f"workloads are {', '.join(WORKLOADS)}; rounds and threads at least 1")
    found = cpulevel.detect()
    configs = [
        c
        for c in CONFIGS
        if c == "native" or cpulevel.check(cpulevel.level_name(c) or c, found) is None
    ]
    with tempfile.TemporaryDirectory(prefix="portable-bench-") as scratch:
        site = Path(scratch) / "site"
        site.mkdir()
        (site / "reprobuild.pth").write_text(
            f"{RUNTIME_ROOT}\nimport reprobuild_entrypoint._startup\n"
        )
        times: dict[str, dict[str, list[float]]] = {n: {c: [] for c in configs} for n in names}
        bits: dict[str, dict[str, set[str]]] = {n: {c: set() for c in configs} for n in names}
        for round_number in range(args.rounds):
            for name in names:
                program = Path(scratch) / f"{name}.py"
                program.write_text(textwrap.dedent(WORKLOADS[name]))
                for cpu in configs:
                    took, result = run_once(site, program, cpu, args.threads)
                    times[name][cpu].append(took)
                    bits[name][cpu].add(result)
                    print(f"round {round_number + 1} {name:7} {cpu:10} {took:8.3f} s  {result}")
    report = {
        "host": {
            "cpu_level": found.get("level"),
            "vendor": found.get("vendor"),
            "machine": platform.machine(),
            "cpus": os.cpu_count(),
        },
        "threads": args.threads,
        "rounds": args.rounds,
        "workloads": {},
    }
    print(f"\nratios against native strict (median of per-round ratios; goal <= {GOAL}x)")
    for name in names:
        row: dict[str, object] = {}
        for cpu in configs:
            ratios = [t / n for t, n in zip(times[name][cpu], times[name]["native"], strict=True)]
            ratio = statistics.median(ratios)
            repeat = len(bits[name][cpu]) == 1
            same_as_native = bits[name][cpu] == bits[name]["native"]
            row[cpu] = {
                "median_s": statistics.median(times[name][cpu]),
                "ratio": ratio,
                "bits_repeat": repeat,
                "bits_equal_native": same_as_native,
            }
            if cpu != "native":
                flag = "" if ratio <= GOAL else "  (over the goal)"
                print(
                    f"  {name:7} {cpu:10} {ratio:5.2f}x{flag}  bits repeat: {repeat}, "
                    f"equal native's: {same_as_native}"
                )
        report["workloads"][name] = row  # type: ignore[index]
    if args.json is not None:
        args.json.write_text(json.dumps(report, indent=2) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
