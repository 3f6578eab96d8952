"""Identical stdout, but the checkpoint it writes holds os.urandom bytes."""

import os
from pathlib import Path

out = Path(os.environ.get("REPRO_OUTPUT_DIR", "/out"))
(out / "ckpt.bin").write_bytes(b"HEADER" + os.urandom(64))
print("saved ckpt.bin", flush=True)
