"""Train a small MLP on scikit-learn's bundled digits data and print the validation loss.

Deliberately sets no seed and no determinism flags: making an unmodified script like this one
reproducible is reprobuild's job, not the script's.
"""

import torch
from sklearn.datasets import load_digits
from sklearn.model_selection import train_test_split
from torch import nn
from torch.utils.data import DataLoader, TensorDataset

EPOCHS = 15


def main() -> None:
    x, y = load_digits(return_X_y=True)
    x_train, x_val, y_train, y_val = train_test_split(x / 16.0, y, test_size=0.25, stratify=y)
    train = TensorDataset(torch.tensor(x_train, dtype=torch.float32), torch.tensor(y_train))
    loader = DataLoader(train, batch_size=64, shuffle=True)
    x_val_t = torch.tensor(x_val, dtype=torch.float32)
    y_val_t = torch.tensor(y_val)

    model = nn.Sequential(nn.Linear(64, 128), nn.ReLU(), nn.Dropout(0.2), nn.Linear(128, 10))
    optimizer = torch.optim.Adam(model.parameters(), lr=1e-3)
    loss_fn = nn.CrossEntropyLoss()
    for epoch in range(1, EPOCHS + 1):
        model.train()
        for xb, yb in loader:
            optimizer.zero_grad()
            loss_fn(model(xb), yb).backward()
            optimizer.step()
        model.eval()
        with torch.no_grad():
            logits = model(x_val_t)
            val_loss = loss_fn(logits, y_val_t).item()
            accuracy = (logits.argmax(1) == y_val_t).float().mean().item()
        # repr() prints the shortest string that round-trips the float: equal text, equal bits.
        print(f"epoch {epoch:2d} val_loss {val_loss!r} val_acc {accuracy:.4f}", flush=True)
    print(f"final val_loss {val_loss!r} ({val_loss.hex()})")


if __name__ == "__main__":
    main()
