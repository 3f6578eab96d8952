"""A float32 matmul whose bits change with TF32. The script asks for TF32, as PyTorch advises
for speed (``torch.set_float32_matmul_precision("high")``); NGC's PyTorch images go further
with ``TORCH_ALLOW_TF32_CUBLAS_OVERRIDE=1``. Either way cuBLAS rounds the inputs to TF32 (10-bit
mantissa). The runtime's strict mode sets ``NVIDIA_TF32_OVERRIDE=0``, which cuBLAS and cuDNN
obey whatever the program asks, so the product is IEEE float32 again.

Two bare runs are identical (cuBLAS is run-to-run deterministic for one configuration): the
control here is TF32 itself. Prints the product's fingerprint and first values, and its
norm-wise error against a float64 product: about 1e-7 in IEEE float32, about 1e-4 with TF32
(also on stderr, for the runner). Seeded data."""

from __future__ import annotations

import torch
from _common import emit, fingerprint, hexes, note, parse

SIZES = {"cpu": 256, "quick": 2048, "full": 4096}


def main() -> None:
    args = parse()
    n = SIZES[args.scale]
    torch.set_float32_matmul_precision("high")  # what the script asks for
    gen = torch.Generator().manual_seed(1234)
    a = torch.randn((n, n), generator=gen).to(args.device)
    b = torch.randn((n, n), generator=gen).to(args.device)
    c = a @ b
    exact = a.double() @ b.double()
    rel_err = float(torch.linalg.norm(c.double() - exact) / torch.linalg.norm(exact))
    emit("product fingerprint", fingerprint(c))
    emit("product first row", hexes(c, 8))
    emit(f"rel_err_vs_float64 {rel_err:.3e}")
    note("rel_err", f"{rel_err:.3e}")


if __name__ == "__main__":
    main()
