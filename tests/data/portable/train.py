"""Issue 31's proof program: unseeded, small, and touching every CPU library path that
dispatches by instruction set (conv, batchnorm, GELU, dropout, log_softmax, matmul, default
Adam with its sqrt, NumPy noise). Prints the final loss in hex and a digest of the parameters."""

import hashlib

import numpy as np
import torch
from torch import nn

model = nn.Sequential(
    nn.Conv2d(3, 8, 3, padding=1),
    nn.BatchNorm2d(8),
    nn.GELU(),
    nn.Dropout(0.2),
    nn.Conv2d(8, 8, 3, padding=1),
    nn.GELU(),
    nn.AdaptiveAvgPool2d(4),
    nn.Flatten(),
    nn.Linear(128, 10),
)
optimizer = torch.optim.Adam(model.parameters(), lr=1e-2)
images = torch.randn(32, 3, 16, 16)
labels = torch.randint(0, 10, (32,))
loss = torch.zeros(())
for _step in range(6):
    noise = np.random.normal(0.0, 0.1, size=images.shape).astype(np.float32)
    batch = images + torch.from_numpy(np.sin(noise))
    optimizer.zero_grad()
    loss = nn.functional.cross_entropy(model(batch), labels)
    loss.backward()
    optimizer.step()
digest = hashlib.sha256()
for tensor in model.state_dict().values():
    digest.update(tensor.detach().contiguous().numpy().tobytes())
print(f"loss {loss.item().hex()} params {digest.hexdigest()[:16]}")
