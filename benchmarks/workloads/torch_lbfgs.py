"""A small-tensor float64 LBFGS loop, as pytorch/examples' time_sequence_prediction (two
LSTMCells of 51 units predicting sine waves, LBFGS with lr 0.8), cut to a size that runs in
seconds: many tiny operations, each far below the size at which a parallel kernel pays. Issue
31, item 4: at the runtime's fixed 4 threads on a 2-CPU container the original took 1.74x the
time of 1 thread. Prints the final loss in hex, then the training time."""

import math
import os
import time

import _bench_env  # first: BENCH_THREADS before torch loads
import torch
from torch import nn

_bench_env.seed(torch.manual_seed)
_bench_env.torch_options(torch)  # BENCH_MKL_LOCAL (attribution runs only)
SEQUENCES, LENGTH, STEPS = 24, int(os.environ.get("BENCH_LBFGS_LENGTH", "100")), 2
t = torch.arange(LENGTH, dtype=torch.float64)
phase = torch.randint(-80, 80, (SEQUENCES, 1)).double()
data = torch.sin((t + phase) / 20.0 * math.pi / 2)
inputs, target = data[:, :-1], data[:, 1:]


class Sequence(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.lstm1 = nn.LSTMCell(1, 51)
        self.lstm2 = nn.LSTMCell(51, 51)
        self.linear = nn.Linear(51, 1)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h1 = c1 = torch.zeros(x.size(0), 51, dtype=torch.float64)
        h2 = c2 = torch.zeros(x.size(0), 51, dtype=torch.float64)
        outputs = []
        for step in x.split(1, dim=1):
            h1, c1 = self.lstm1(step, (h1, c1))
            h2, c2 = self.lstm2(h1, (h2, c2))
            outputs.append(self.linear(h2))
        return torch.cat(outputs, dim=1)


model = Sequence().double()
optimizer = torch.optim.LBFGS(model.parameters(), lr=0.8, max_iter=8)
loss_fn = nn.MSELoss()
start = time.perf_counter()
loss = torch.zeros(())
for _ in range(STEPS):

    def closure() -> torch.Tensor:
        optimizer.zero_grad()
        out = loss_fn(model(inputs), target)
        out.backward()
        return out

    loss = optimizer.step(closure)
print(f"loss {float(loss.detach()).hex()}")
print(f"train_s {time.perf_counter() - start:.3f}")
