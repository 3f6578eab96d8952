"""A small CNN trained on synthetic images, written as an unmodified script would be: no seed,
``cudnn.benchmark = True``, dropout. Two bare runs differ (the initial weights, the data, the
dropout masks, and the kernels); under the runtime they are identical.

The training loop's wall time (after a warm-up of a few steps) goes to stderr; the losses of
every step go to stdout after the loop, as exact hex, then the weights' fingerprint. The loss
is a one-hot log-softmax sum, the one-hot made by a comparison (no NLLLoss, no scatter)."""

from __future__ import annotations

import time
from typing import Any

import torch
from _common import emit, fingerprint, parse, sync, timing

# (batch, image side, steps); the first WARMUP steps are not timed
SIZES = {"cpu": (16, 16, 10), "quick": (256, 32, 80), "full": (256, 32, 400)}
WARMUP = 5


def main() -> None:
    args = parse()
    batch, side, steps = SIZES[args.scale]
    torch.backends.cudnn.benchmark = True
    nn = torch.nn
    model = nn.Sequential(
        nn.Conv2d(3, 32, 3, padding=1),
        nn.ReLU(),
        nn.Conv2d(32, 64, 3, stride=2, padding=1),
        nn.ReLU(),
        nn.Conv2d(64, 64, 3, stride=2, padding=1),
        nn.ReLU(),
        nn.Flatten(1),
        nn.Dropout(0.1),
        nn.Linear(64 * (side // 4) ** 2, 10),
    ).to(args.device)
    opt = torch.optim.SGD(model.parameters(), lr=0.02, momentum=0.9)
    images = torch.randn((batch * 4, 3, side, side)).to(args.device)
    labels = torch.randint(0, 10, (batch * 4,)).to(args.device)
    classes = torch.arange(10, device=args.device)
    losses: list[Any] = []  # tensors, read after the loop (no sync per step)
    start = 0.0
    for step in range(steps):
        if step == WARMUP:
            sync(args.device)
            start = time.perf_counter()
        pick = torch.randint(0, batch * 4, (batch,)).to(args.device)
        logits = model(images[pick])
        onehot = (labels[pick].unsqueeze(1) == classes).to(logits.dtype)  # no scatter kernel
        loss = -(nn.functional.log_softmax(logits, dim=1) * onehot).sum(1).mean()
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()
        losses.append(loss.detach())
    sync(args.device)
    timing(time.perf_counter() - start)
    for step, value in enumerate(losses):
        emit("step", step, "loss", float(value).hex())
    emit("weights fingerprint", sum(fingerprint(p) for p in model.parameters()))


if __name__ == "__main__":
    main()
