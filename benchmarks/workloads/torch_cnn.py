"""A "real-world" PyTorch script for the runtime benchmark: a small CNN (two conv layers,
batch norm, dropout) on scikit-learn's digits upsampled to 32x32, trained with Adam. No seed of
its own (BENCH_SEED, see _bench_env.py, is for bare and off runs): prints the validation loss of
each epoch in full, then the training time."""

import time

import _bench_env  # first: BENCH_THREADS before torch loads
import torch
import torch.nn.functional as F
from sklearn.datasets import load_digits
from torch import nn

_bench_env.seed(torch.manual_seed)  # BENCH_SEED (bare and off runs only)
_bench_env.torch_options(torch)  # BENCH_TORCH_NOFILL (attribution runs only)
x, y = load_digits(return_X_y=True)
x = torch.tensor(x / 16.0, dtype=torch.float32).reshape(-1, 1, 8, 8)
x = F.interpolate(x, size=(32, 32), mode="bilinear", align_corners=False)
y = torch.tensor(y)
perm = torch.randperm(len(x))
train, val = perm[:1400], perm[1400:]
model = nn.Sequential(
    nn.Conv2d(1, 32, 3, padding=1),
    nn.BatchNorm2d(32),
    nn.ReLU(),
    nn.MaxPool2d(2),
    nn.Conv2d(32, 64, 3, padding=1),
    nn.BatchNorm2d(64),
    nn.ReLU(),
    nn.MaxPool2d(2),
    nn.Flatten(),
    nn.Dropout(0.3),
    nn.Linear(64 * 8 * 8, 128),
    nn.ReLU(),
    nn.Linear(128, 10),
)
opt = torch.optim.Adam(model.parameters(), lr=1e-3)
loss_fn = nn.CrossEntropyLoss()
start = time.perf_counter()
for epoch in range(4):
    model.train()
    for batch in torch.randperm(len(train)).split(64):
        idx = train[batch]
        opt.zero_grad()
        loss_fn(model(x[idx]), y[idx]).backward()
        opt.step()
    model.eval()
    with torch.no_grad():
        print(f"epoch {epoch} val_loss {loss_fn(model(x[val]), y[val]).item()!r}")
print(f"train_s {time.perf_counter() - start:.3f}")
