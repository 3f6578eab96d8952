"""An op with no deterministic kernel: ``Tensor.put_(..., accumulate=False)`` with repeated
indices (which write wins is up to the hardware). Torch's deterministic mode refuses it on CPU
and CUDA; the runtime's strict mode must fail the run and print its hint. Bare, it completes."""

from __future__ import annotations

import torch
from _common import emit, parse


def main() -> None:
    args = parse()
    target = torch.zeros(8, device=args.device)
    index = torch.tensor([0, 0, 1, 1], device=args.device)
    target.put_(index, torch.tensor([1.0, 2.0, 3.0, 4.0], device=args.device))
    emit("completed")


if __name__ == "__main__":
    main()
