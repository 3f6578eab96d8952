"""An unseeded PyTorch regression: synthetic data from torch.randn, a small MLP, the training
loss of every epoch printed with repr().

It sets no seed and no determinism flag. Under the image's runtime two runs print the same
losses to the last bit, and ``reprobuild verify IMAGE -- python train.py`` proves it; with
the runtime off (``--mode off``) the data, the initial weights and the batch order change
from run to run, and verify shows the first line where two runs part and by how much.

When ``REPRO_OUTPUT_DIR`` is set (``reprobuild verify`` sets it to /out), the trained weights
go to model.pt and the final figures to metrics.json there, for ``--output``.
"""

import json
import os
from pathlib import Path

import torch
from torch import nn

SAMPLES = 2048
FEATURES = 16
EPOCHS = 12
BATCH = 64


def main() -> None:
    x = torch.randn(SAMPLES, FEATURES)
    true_w = torch.randn(FEATURES, 1)
    y = torch.sin(x @ true_w) + 0.1 * torch.randn(SAMPLES, 1)

    model = nn.Sequential(
        nn.Linear(FEATURES, 64), nn.Tanh(), nn.Linear(64, 64), nn.Tanh(), nn.Linear(64, 1)
    )
    optimizer = torch.optim.Adam(model.parameters(), lr=1e-2)
    loss_fn = nn.MSELoss()
    for epoch in range(1, EPOCHS + 1):
        order = torch.randperm(SAMPLES)
        total = 0.0
        for start in range(0, SAMPLES, BATCH):
            batch = order[start : start + BATCH]
            optimizer.zero_grad()
            loss = loss_fn(model(x[batch]), y[batch])
            loss.backward()
            optimizer.step()
            total += loss.item() * len(batch)
        train_loss = total / SAMPLES
        # repr() prints the shortest string that round-trips the float: equal text, equal bits.
        print(f"epoch {epoch:2d} loss {train_loss!r}", flush=True)

    out = os.environ.get("REPRO_OUTPUT_DIR")
    if out:
        torch.save(model.state_dict(), Path(out) / "model.pt")
        metrics = {"epochs": EPOCHS, "final_loss": train_loss, "samples": SAMPLES}
        (Path(out) / "metrics.json").write_text(json.dumps(metrics, indent=2) + "\n")


if __name__ == "__main__":
    main()
