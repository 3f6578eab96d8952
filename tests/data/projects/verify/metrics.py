"""Identical stdout; its metrics file differs in one nested key (a wall-clock duration)."""

import json
import os
import random
import time
from pathlib import Path

started = time.perf_counter()
losses = [random.random() for _ in range(3)]
out = Path(os.environ.get("REPRO_OUTPUT_DIR", "/out"))
metrics = {
    "config": {"epochs": 3, "lr": 0.001},
    "history": [{"epoch": i + 1, "loss": loss} for i, loss in enumerate(losses)],
    "timing": {"train_s": time.perf_counter() - started, "epochs": 3},
}
(out / "metrics.json").write_text(json.dumps(metrics, indent=2))
print("final loss", losses[-1], flush=True)
