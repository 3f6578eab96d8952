"""Data-parallel training under torchrun (issue 13): DDP, a DistributedSampler, dropout.

No seed, no flags: the model's initial weights come from rank 0's global RNG (DDP broadcasts
them), every rank draws its own dropout masks, and the sampler shuffles per epoch. Rank 0
prints each epoch's loss averaged over all ranks, the final one in full (``repr``: every bit
of the float), and writes it with the trained weights' sha256 to ``$REPRO_OUTPUT_DIR``.
Every rank prints one ``rank R ...`` line on stderr, with the seed its RNG started from.
The backend is ``$REPRO_DIST_BACKEND`` (gloo when unset: CPU). ``DDP_EPOCHS`` and
``DDP_SLEEP`` (seconds per step, to keep a job running while a test stops one of its nodes)
make the run longer; the defaults keep it to seconds. Every rank ends with its exit functions
and ``os._exit`` once its work is done (see the end).
"""

import atexit
import hashlib
import json
import os
import sys
import time
from pathlib import Path

import torch
import torch.distributed as dist
from sklearn.datasets import load_digits
from torch import nn
from torch.nn.parallel import DistributedDataParallel
from torch.utils.data import DataLoader, DistributedSampler, TensorDataset

dist.init_process_group(os.environ.get("REPRO_DIST_BACKEND") or "gloo")
rank, world = dist.get_rank(), dist.get_world_size()
print(
    f"rank {rank} of {world} on {os.uname().nodename} initial_seed {torch.initial_seed()}",
    file=sys.stderr,
    flush=True,
)
x, y = load_digits(return_X_y=True)
data = TensorDataset(torch.tensor(x / 16.0, dtype=torch.float32), torch.tensor(y))
sampler = DistributedSampler(data, num_replicas=world, rank=rank, shuffle=True)
loader = DataLoader(data, batch_size=32, sampler=sampler)
model = DistributedDataParallel(
    nn.Sequential(nn.Linear(64, 32), nn.ReLU(), nn.Dropout(0.3), nn.Linear(32, 10))
)
opt = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)
loss_fn = nn.CrossEntropyLoss()
epochs = int(os.environ.get("DDP_EPOCHS", "3"))
pause = float(os.environ.get("DDP_SLEEP", "0"))
for epoch in range(epochs):
    sampler.set_epoch(epoch)
    total = torch.zeros(2, dtype=torch.float64)
    for xb, yb in loader:
        opt.zero_grad()
        loss = loss_fn(model(xb), yb)
        loss.backward()
        opt.step()
        total += torch.tensor([loss.item() * len(yb), len(yb)], dtype=torch.float64)
        if pause:
            time.sleep(pause)
    dist.all_reduce(total)
    mean = (total[0] / total[1]).item()
    if rank == 0:
        print(f"epoch {epoch} loss {mean!r}", flush=True)
if rank == 0:
    weights = hashlib.sha256()
    for tensor in model.module.state_dict().values():
        weights.update(tensor.numpy().tobytes())
    print(f"final_loss {mean!r} weights {weights.hexdigest()[:16]}", flush=True)
    out = os.environ.get("REPRO_OUTPUT_DIR")
    if out:
        metrics = {"final_loss": mean, "weights_sha256": weights.hexdigest()}
        Path(out, "metrics.json").write_text(json.dumps(metrics, sort_keys=True) + "\n")
dist.destroy_process_group()
# torch 2.13's gloo can abort a rank ("terminate called without an active exception", SIGABRT)
# in the C++ teardown after the interpreter's exit functions, when destroy_process_group has
# long returned: 3 of 40 runs with REPRO_DETERMINISM=off here, and once in a strict Slurm job
# in CI, where torchrun then failed the whole job. So every rank ends here: its exit functions
# run (the runtime's framework record among them), then os._exit skips that teardown. The
# numbers are all out by then.
sys.stdout.flush()
sys.stderr.flush()
atexit._run_exitfuncs()
os._exit(0)
