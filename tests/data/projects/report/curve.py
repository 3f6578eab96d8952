"""A training curve on stdout, standard library only: `epoch E loss X acc Y` per epoch.

From epoch --part on, random.random() moves the loss a little. Under reprobuild's runtime
`random` is seeded, so two runs print the same curve; with `--mode off` (the control) it is
not, and the runs part at epoch --part. On SIGTERM it saves its state (epoch, loss, the
random state) to $REPRO_OUTPUT_DIR/ckpt.json and exits 0; with REPRO_RESUME=1 it resumes
from there (--no-rng: without the random state, so the resumed run parts from the straight
one).
"""

import argparse
import json
import os
import random
import signal
import sys
import time

parser = argparse.ArgumentParser()
parser.add_argument("--epochs", type=int, default=60)
parser.add_argument("--part", type=int, default=37)
parser.add_argument("--sleep", type=float, default=0.0)
parser.add_argument("--no-rng", action="store_true")
args = parser.parse_args()
out = os.environ.get("REPRO_OUTPUT_DIR", ".")
ckpt = os.path.join(out, "ckpt.json")
state = {"epoch": 0, "loss": 2.5, "acc": 0.1}
if os.environ.get("REPRO_RESUME") == "1":
    with open(ckpt) as f:
        saved = json.load(f)
    state = saved["state"]
    if not args.no_rng:
        version, internal, gauss = saved["rng"]
        random.setstate((version, tuple(internal), gauss))


def save(signum, frame):
    with open(ckpt, "w") as f:
        json.dump({"state": state, "rng": random.getstate()}, f)
    sys.exit(0)


signal.signal(signal.SIGTERM, save)
for epoch in range(state["epoch"] + 1, args.epochs + 1):
    loss = state["loss"] * 0.97
    if epoch >= args.part:
        loss += random.random() * 1e-9 * (epoch - args.part + 1) ** 3
    acc = min(1.0, state["acc"] + 0.01)
    state = {"epoch": epoch, "loss": loss, "acc": acc}  # before the line: a SIGTERM after it
    print(f"epoch {epoch} loss {loss!r} acc {acc!r}", flush=True)  # saves this epoch
    time.sleep(args.sleep)
