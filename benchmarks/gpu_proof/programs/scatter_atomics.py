"""``index_add_`` and ``scatter_add_`` of float32 values into few bins: on CUDA both add with
float atomics, so the order of the additions, and with it the rounding, changes from run to run.
Under torch's deterministic mode both switch to a sorted, ordered implementation.

Prints every bin of every round exactly. The data is seeded here (a fixed generator), so two
bare runs can differ only through the kernels."""

from __future__ import annotations

import torch
from _common import emit, fingerprint, hexes, parse

SIZES = {"cpu": (1 << 14, 64, 1), "quick": (1 << 22, 256, 2), "full": (1 << 24, 1024, 3)}


def main() -> None:
    args = parse()
    n, bins, rounds = SIZES[args.scale]
    gen = torch.Generator().manual_seed(1234)
    for r in range(rounds):
        # magnitudes spread over 2**-10..2**10: the sum's rounding depends on the order
        src = torch.randn(n, generator=gen) * torch.exp2(
            torch.randint(-10, 11, (n,), generator=gen).float()
        )
        index = torch.randint(0, bins, (n,), generator=gen)
        src, index = src.to(args.device), index.to(args.device)
        added = torch.zeros(bins, device=args.device).index_add_(0, index, src)
        scattered = torch.zeros(bins, device=args.device).scatter_add_(0, index, src)
        emit("round", r, "index_add fingerprint", fingerprint(added))
        emit("round", r, "scatter_add fingerprint", fingerprint(scattered))
        for b in range(bins):
            emit("round", r, "bin", b, "index_add", hexes(added[b], 1))
            emit("round", r, "bin", b, "scatter_add", hexes(scattered[b], 1))


if __name__ == "__main__":
    main()
