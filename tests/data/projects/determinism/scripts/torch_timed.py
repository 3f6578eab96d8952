"""A training script that logs how long each epoch took, its throughput and a timestamp on
every line, beside the loss. No seed."""

import logging
import sys
import time

import torch
from sklearn.datasets import load_digits
from torch import nn

logging.basicConfig(stream=sys.stdout, format="%(asctime)s %(levelname)s %(message)s")
log = logging.getLogger("train")
log.setLevel(logging.INFO)
x, y = load_digits(return_X_y=True)
x = torch.tensor(x / 16.0, dtype=torch.float32)
y = torch.tensor(y)
model = nn.Sequential(nn.Linear(64, 64), nn.ReLU(), nn.Dropout(0.3), nn.Linear(64, 10))
opt = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)
loss_fn = nn.CrossEntropyLoss()
for epoch in range(1, 4):
    start = time.time()
    for batch in torch.randperm(len(x)).split(32):
        opt.zero_grad()
        loss = loss_fn(model(x[batch]), y[batch])
        loss.backward()
        opt.step()
    took = time.time() - start
    log.info("epoch %d loss %r", epoch, loss.item())
    print(f"epoch {epoch} took {took:.3f} s ({len(x) / took:.1f} samples/s), loss {loss.item()!r}")
