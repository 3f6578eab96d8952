"""The backward pass of a 2-D convolution through cuDNN with ``cudnn.benchmark = True``, as many
training scripts set it: cuDNN times its algorithms and keeps the fastest, and several of the
weight- and data-gradient algorithms add with atomics. Under the runtime, cuDNN's deterministic
setting restricts the search to deterministic algorithms (the script's benchmark line stays).

Prints the fingerprint and the first values of both gradients for each pass. Seeded data."""

from __future__ import annotations

import torch
from _common import emit, fingerprint, hexes, parse

SIZES = {
    "cpu": ((4, 8, 16, 16), 8, 2),
    "quick": ((32, 64, 56, 56), 64, 3),
    "full": ((64, 64, 56, 56), 128, 5),
}


def main() -> None:
    args = parse()
    shape, out_channels, passes = SIZES[args.scale]
    torch.backends.cudnn.benchmark = True  # what the script asks for; the runtime leaves it
    gen = torch.Generator().manual_seed(1234)
    x = torch.randn(shape, generator=gen).to(args.device).requires_grad_(True)
    weight = (torch.randn((out_channels, shape[1], 3, 3), generator=gen) * 0.05).to(args.device)
    weight.requires_grad_(True)
    upstream = torch.randn((shape[0], out_channels, shape[2], shape[3]), generator=gen)
    upstream = upstream.to(args.device)
    for p in range(passes):
        x.grad = None
        weight.grad = None
        y = torch.nn.functional.conv2d(x, weight, padding=1)
        y.backward(upstream)
        assert weight.grad is not None and x.grad is not None
        emit("pass", p, "weight.grad fingerprint", fingerprint(weight.grad))
        emit("pass", p, "weight.grad", hexes(weight.grad, 8))
        emit("pass", p, "input.grad fingerprint", fingerprint(x.grad))
        emit("pass", p, "input.grad", hexes(x.grad, 8))


if __name__ == "__main__":
    main()
