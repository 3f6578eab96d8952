"""Which oneMKL code branches give the same matrix-product bits on which CPUs (issue 31).

Prints one digest of twenty products (five shapes from 64^3 to 513 x 257 x 129, torch's ``@``
and ``addmm``, float32 and float64; one thread) per ``MKL_CBWR`` branch, natively and under
qemu-user as other CPUs (``--emulate Haswell-noTSX,EPYC-Rome``; qemu answers ``cpuid`` with
the model's vendor, so oneMKL takes its AMD code for an EPYC). A fused multiply-add is exact
on a chip and under emulation alike, so two digests differ by the kernels' order of sums, not
by qemu. A branch oneMKL refuses on a CPU runs as another one silently; the digest shows which.

``--threads 1,2,4`` asks the other question, natively under ``MKL_CBWR=AUTO,STRICT``: do the
bits follow oneMKL's thread count? One digest per kind (matrix products as above plus one
1024^3; matrix-vector products; dot products of 31,000 and 10^5 values) per count.

    python benchmarks/mkl_branches.py [--emulate Haswell-noTSX,EPYC-Rome] [--threads 1,2,4]
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import shutil
import subprocess
import sys

BRANCHES = ("AUTO,STRICT", "AVX512,STRICT", "AVX2,STRICT", "COMPATIBLE")
SHAPES = ((64, 64, 64), (97, 51, 204), (256, 300, 128), (513, 257, 129), (32, 1024, 8))


def digests(threads: int, big: bool) -> dict[str, str]:
    """Digests of each kind of product, in this process (its MKL_CBWR as the parent set it),
    with torch (and so oneMKL) at ``threads``."""
    import torch

    torch.set_num_threads(threads)
    generator = torch.Generator().manual_seed(0)
    kinds = {kind: hashlib.sha256() for kind in ("matrix", "matrix-vector", "dot")}

    def randn(*shape: int, dtype: torch.dtype) -> torch.Tensor:
        return torch.randn(*shape, generator=generator, dtype=torch.float64).to(dtype)

    for dtype in (torch.float32, torch.float64):
        for m, k, n in SHAPES + (((1024, 1024, 1024),) if big else ()):
            a, b = randn(m, k, dtype=dtype), randn(k, n, dtype=dtype)
            kinds["matrix"].update((a @ b).numpy().tobytes())
            kinds["matrix"].update(
                torch.addmm(torch.ones(m, n, dtype=dtype), a, b).numpy().tobytes()
            )
        if big:
            matrix, vector = randn(2000, 3000, dtype=dtype), randn(3000, dtype=dtype)
            kinds["matrix-vector"].update((matrix @ vector).numpy().tobytes())
            for size in (31_000, 100_000):
                x, y = randn(size, dtype=dtype), randn(size, dtype=dtype)
                kinds["dot"].update(x.dot(y).numpy().tobytes())
    return {kind: h.hexdigest()[:16] for kind, h in kinds.items()}


def child(cpu: str, qemu: str | None, **env: str) -> dict[str, str] | str:
    argv = [sys.executable, os.path.abspath(__file__)]
    if cpu != "native":
        argv = [str(qemu), "-cpu", cpu, *argv]
    done = subprocess.run(
        argv,
        env={**os.environ, "MKL_BRANCHES_CHILD": "1", **env},
        capture_output=True,
        text=True,
        check=False,
    )
    return json.loads(done.stdout) if done.returncode == 0 else f"exit {done.returncode}"


def main() -> int:
    if os.environ.get("MKL_BRANCHES_CHILD") == "1":
        threads = os.environ.get("MKL_BRANCHES_THREADS", "")
        print(json.dumps(digests(int(threads or 1), big=bool(threads))))
        return 0
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--emulate", default="", help="qemu-user CPU models, comma-separated")
    parser.add_argument("--threads", default="", help="thread counts, comma-separated")
    args = parser.parse_args()
    if args.threads:
        counts = [c for c in args.threads.split(",") if c]
        print(f"{'kind':<16}" + "".join(f"{c + ' threads':<20}" for c in counts))
        rows = [
            child("native", None, MKL_CBWR="AUTO,STRICT", MKL_BRANCHES_THREADS=c) for c in counts
        ]
        for kind in ("matrix", "matrix-vector", "dot"):
            cells = [r[kind] if isinstance(r, dict) else r for r in rows]
            print(f"{kind:<16}" + "".join(f"{d:<20}" for d in cells))
        return 0
    cpus = ["native", *(m for m in args.emulate.split(",") if m)]
    qemu = shutil.which("qemu-x86_64-static") or shutil.which("qemu-x86_64")
    if len(cpus) > 1 and qemu is None:
        print("error: --emulate needs qemu-user (apt-get install qemu-user-static)")
        return 2
    print(f"{'cpu':<16}" + "".join(f"{b:<20}" for b in BRANCHES))
    for cpu in cpus:
        row = []
        for branch in BRANCHES:
            result = child(cpu, qemu, MKL_CBWR=branch)
            row.append(result["matrix"] if isinstance(result, dict) else result)
        print(f"{cpu:<16}" + "".join(f"{d:<20}" for d in row), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
