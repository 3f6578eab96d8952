"""The backward pass of a 2-D convolution through cuDNN with ``cudnn.benchmark = True``, as many
training scripts set it: cuDNN times its algorithms and keeps the fastest, and several of the
weight- and data-gradient algorithms add with atomics. Under the runtime, cuDNN's deterministic
setting restricts the search to deterministic algorithms (the script's benchmark line stays).

The convolution is a ResNet stem (7x7, stride 2, 3 input channels, 224x224): on one H100
(cuDNN 9.19, 2026-11-26) its input gradient took 6 different values in 6 passes over 2
processes, where a 3x3 stride-1 convolution of 64 channels gave the same bits every time, so
the bare runs show the problem this check is for.

Prints the fingerprint and the first values of both gradients for each pass. Seeded data."""

from __future__ import annotations

import torch
from _common import emit, fingerprint, hexes, parse

SIZES = {  # input shape (N, C, H, W), output channels, passes
    "cpu": ((4, 3, 32, 32), 8, 2),
    "quick": ((32, 3, 224, 224), 64, 3),
    "full": ((64, 3, 224, 224), 64, 5),
}
KERNEL, STRIDE, PADDING = 7, 2, 3


def main() -> None:
    args = parse()
    shape, out_channels, passes = SIZES[args.scale]
    torch.backends.cudnn.benchmark = True  # what the script asks for; the runtime leaves it
    gen = torch.Generator().manual_seed(1234)
    x = torch.randn(shape, generator=gen).to(args.device).requires_grad_(True)
    weight = torch.randn((out_channels, shape[1], KERNEL, KERNEL), generator=gen) * 0.05
    weight = weight.to(args.device)
    weight.requires_grad_(True)
    side = [(n + 2 * PADDING - KERNEL) // STRIDE + 1 for n in shape[2:]]
    upstream = torch.randn((shape[0], out_channels, *side), generator=gen).to(args.device)
    for p in range(passes):
        x.grad = None
        weight.grad = None
        y = torch.nn.functional.conv2d(x, weight, stride=STRIDE, padding=PADDING)
        y.backward(upstream)
        assert weight.grad is not None and x.grad is not None
        emit("pass", p, "weight.grad fingerprint", fingerprint(weight.grad))
        emit("pass", p, "weight.grad", hexes(weight.grad, 8))
        emit("pass", p, "input.grad fingerprint", fingerprint(x.grad))
        emit("pass", p, "input.grad", hexes(x.grad, 8))


if __name__ == "__main__":
    main()
