"""Issue 53's program: unseeded and small (a few steps of a tiny MLP on torch.randn data), run
on amd64 and on arm64 (emulated). Prints the machine it runs on, then each step's loss with
repr() (equal text, equal bits) and a digest of the trained parameters."""

import hashlib
import platform

import torch
from torch import nn

print(f"machine {platform.machine()}", flush=True)
x = torch.randn(256, 8)
y = torch.sin(x.sum(dim=1, keepdim=True))
model = nn.Sequential(nn.Linear(8, 16), nn.Tanh(), nn.Linear(16, 1))
optimizer = torch.optim.Adam(model.parameters(), lr=1e-2)
for step in range(5):
    optimizer.zero_grad()
    loss = nn.functional.mse_loss(model(x), y)
    loss.backward()
    optimizer.step()
    print(f"step {step} loss {loss.item()!r}", flush=True)
digest = hashlib.sha256()
for tensor in model.state_dict().values():
    digest.update(repr(tensor.tolist()).encode())
print(f"params {digest.hexdigest()[:16]}", flush=True)
