"""Deterministic under the runtime, though it sets no seed: `random` is seeded at start and
PYTHONHASHSEED fixes set order. Writes a metrics file and a checkpoint directory."""

import json
import os
import random
from pathlib import Path

out = Path(os.environ.get("REPRO_OUTPUT_DIR", "/out"))
for epoch in range(1, 6):
    print(f"epoch {epoch} loss {random.random()!r}", flush=True)
print("order", sorted({"alpha", "beta", "gamma", "delta"}, key=hash))
(out / "metrics.json").write_text(json.dumps({"final": {"loss": random.random()}}))
(out / "ckpt").mkdir()
(out / "ckpt" / "weights.bin").write_bytes(random.randbytes(4096))
