"""Shared by the GPU proof programs: arguments, and printing tensors so that two runs can be
compared bit for bit (``float.hex`` of float32 values, and an integer fingerprint of every bit).

The programs import nothing from reprobuild: under the runtime they are unmodified scripts.
"""

from __future__ import annotations

import argparse
import sys
from typing import Any

SCALES = ("cpu", "quick", "full")


def parse(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser()
    parser.add_argument("--device", choices=("cpu", "cuda"), required=True)
    parser.add_argument("--scale", choices=SCALES, required=True)
    return parser.parse_args(argv)


def fingerprint(tensor: Any) -> int:
    """An integer that changes when any bit of a float32 tensor changes: the float32 bit
    patterns as int64, each times a position weight, summed (integer sums are exact, so the
    fingerprint itself is deterministic on every device)."""
    import torch

    bits = tensor.detach().contiguous().reshape(-1).view(torch.int32).to(torch.int64)
    weights = torch.arange(bits.numel(), device=bits.device, dtype=torch.int64) % 65521 + 1
    return int((bits * weights).sum().item())


def hexes(tensor: Any, count: int) -> str:
    """The first ``count`` values, exactly (a float32 value is exact as a Python float)."""
    values = tensor.detach().reshape(-1)[:count].cpu().tolist()
    return " ".join(float(v).hex() for v in values)


def emit(*parts: object) -> None:
    sys.stdout.write(" ".join(str(p) for p in parts) + "\n")


def note(key: str, value: object) -> None:
    """A fact for the runner, on stderr as ``gpu-proof KEY=VALUE`` (stdout is what the runs are
    compared on; ``reprobuild verify`` keeps the tail of each run's stderr in its report)."""
    sys.stderr.write(f"gpu-proof {key}={value}\n")
    sys.stderr.flush()


def timing(loop_s: float) -> None:
    """The timed part's wall time (see :func:`note`)."""
    note("loop_s", f"{loop_s:.6f}")


def sync(device: str) -> None:
    if device == "cuda":
        import torch

        torch.cuda.synchronize()
