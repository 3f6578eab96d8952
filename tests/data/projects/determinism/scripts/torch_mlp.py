"""A PyTorch MLP on scikit-learn's digits. No seed, no flags: prints per-epoch losses in full."""

import torch
from sklearn.datasets import load_digits
from torch import nn

x, y = load_digits(return_X_y=True)
x = torch.tensor(x / 16.0, dtype=torch.float32)
y = torch.tensor(y)
perm = torch.randperm(len(x))
train, val = perm[:1400], perm[1400:]
model = nn.Sequential(nn.Linear(64, 64), nn.ReLU(), nn.Dropout(0.3), nn.Linear(64, 10))
opt = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)
loss_fn = nn.CrossEntropyLoss()
for epoch in range(5):
    model.train()
    for batch in torch.randperm(len(train)).split(100):
        idx = train[batch]
        opt.zero_grad()
        loss_fn(model(x[idx]), y[idx]).backward()
        opt.step()
    model.eval()
    with torch.no_grad():
        print(f"epoch {epoch} val_loss {loss_fn(model(x[val]), y[val]).item()!r}")
