"""Preemption and exact resume, torch (issue 12). No seed: an MLP with dropout, a DataLoader
that shuffles with 2 workers and adds NumPy noise in them.

  python torch_resume.py [--resume] [--no-rng] [--epochs N] [--slow S] [--checkpoint PATH]

Each finished epoch is kept in memory (model, optimizer, RNG state); on SIGTERM the handler
saves the last finished epoch to the checkpoint and exits 0, so ``docker stop`` at any moment
loses at most the epoch in progress. ``--resume`` loads the checkpoint and goes on from there;
``--no-rng`` (the control) does not restore the RNG state. Prints ``epoch N val_loss X`` and
``final val_loss X``. ``--slow S`` sleeps S seconds after each epoch (time to stop it).
"""

import argparse
import copy
import os
import signal
import sys
import time

import numpy as np
import torch
from torch import nn
from torch.utils.data import DataLoader, Dataset

from reprobuild_entrypoint import capture_rng_state, restore_rng_state

parser = argparse.ArgumentParser()
parser.add_argument(
    "--resume", action="store_true", default=os.environ.get("REPRO_RESUME") == "1"
)  # verify --resume-at
parser.add_argument("--no-rng", action="store_true")
parser.add_argument("--epochs", type=int, default=4)
parser.add_argument("--slow", type=float, default=0.0)
parser.add_argument(
    "--checkpoint",
    default=os.path.join(os.environ.get("REPRO_OUTPUT_DIR", "/out"), "torch-ckpt.pt"),
)
args = parser.parse_args()

x = torch.randn(512, 16)
y = (x[:, :4].sum(dim=1) > 0).long()
train_x, train_y, val_x, val_y = x[:448], y[:448], x[448:], y[448:]


class Noisy(Dataset):
    def __len__(self) -> int:
        return len(train_x)

    def __getitem__(self, i: int) -> tuple[torch.Tensor, torch.Tensor]:
        noise = torch.from_numpy(np.random.normal(scale=0.1, size=16).astype("float32"))
        return train_x[i] + noise, train_y[i]


loader = DataLoader(Noisy(), batch_size=32, shuffle=True, num_workers=2)
model = nn.Sequential(nn.Linear(16, 32), nn.ReLU(), nn.Dropout(0.3), nn.Linear(32, 2))
opt = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)
loss_fn = nn.CrossEntropyLoss()
start = 0
if args.resume:
    checkpoint = torch.load(args.checkpoint, weights_only=False)
    model.load_state_dict(checkpoint["model"])
    opt.load_state_dict(checkpoint["optimizer"])
    start = checkpoint["epochs_done"]
    if not args.no_rng:
        start = restore_rng_state(checkpoint["rng"])["epochs_done"]
    print(f"resumed after epoch {start}", flush=True)

last_finished: dict[str, object] | None = None


def on_sigterm(signum: int, frame: object) -> None:
    # DataLoader workers get the same SIGTERM; torch's SIGCHLD handler would raise when they
    # die, so it is switched off first (SIGTERM's handler runs before SIGCHLD's).
    signal.signal(signal.SIGCHLD, signal.SIG_DFL)
    if last_finished is not None:
        tmp = args.checkpoint + ".tmp"
        torch.save(last_finished, tmp)
        os.replace(tmp, args.checkpoint)
        os.write(1, f"saved after epoch {last_finished['epochs_done']}\n".encode())
    sys.exit(0)


signal.signal(signal.SIGTERM, on_sigterm)
for epoch in range(start, args.epochs):
    model.train()
    for xb, yb in loader:
        opt.zero_grad()
        loss_fn(model(xb), yb).backward()
        opt.step()
    model.eval()
    with torch.no_grad():
        val = loss_fn(model(val_x), val_y).item()
    last_finished = {
        "model": copy.deepcopy(model.state_dict()),
        "optimizer": copy.deepcopy(opt.state_dict()),
        "epochs_done": epoch + 1,
        "rng": capture_rng_state(epochs_done=epoch + 1),
    }
    print(f"epoch {epoch + 1} val_loss {val!r}", flush=True)
    time.sleep(args.slow)
print(f"final val_loss {val!r}", flush=True)
