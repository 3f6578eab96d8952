"""A training curve on stdout as bare columns, standard library only: a header line, then
`STEP LOSS GRAD` every 10 steps, numbers and nothing else (as PyTorch's tutorial prints
`t, loss.item()`), then a last line that names its number.

From step --part on, random.random() moves the loss a little: under reprobuild's runtime
`random` is seeded, so two runs print the same columns; with `--mode off` (the control) it is
not, and the runs part at step --part.
"""

import argparse
import math
import random

parser = argparse.ArgumentParser()
parser.add_argument("--steps", type=int, default=300)
parser.add_argument("--part", type=int, default=149)
args = parser.parse_args()
print("t loss grad_norm")
loss = 8.4
for t in range(args.steps):
    loss = loss * 0.99 + 0.001 * math.sin(t)
    if t >= args.part:
        loss += random.random() * 1e-9
    if t % 10 == 9:
        print(t, loss, -loss / 3)
print(f"final loss {loss!r}")
