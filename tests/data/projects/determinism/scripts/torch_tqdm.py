"""A PyTorch training loop as people write it: a tqdm bar per epoch (elapsed, ETA and it/s,
redrawn as fast as the machine goes) with the running loss as its postfix. No seed."""

import sys

import torch
from sklearn.datasets import load_digits
from torch import nn
from tqdm import tqdm

x, y = load_digits(return_X_y=True)
x = torch.tensor(x / 16.0, dtype=torch.float32)
y = torch.tensor(y)
model = nn.Sequential(nn.Linear(64, 64), nn.ReLU(), nn.Dropout(0.3), nn.Linear(64, 10))
opt = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)
loss_fn = nn.CrossEntropyLoss()
for epoch in range(1, 4):
    bar = tqdm(torch.randperm(len(x)).split(16), desc=f"Epoch {epoch}", file=sys.stdout)
    for batch in bar:
        opt.zero_grad()
        loss = loss_fn(model(x[batch]), y[batch])
        loss.backward()
        opt.step()
        bar.set_postfix(loss=f"{loss.item():.6f}")
    bar.close()
