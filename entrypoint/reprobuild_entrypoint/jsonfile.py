"""Write a JSON document atomically: a temporary file in the same folder, then a rename.

A reader sees the old file or the whole new one, never half of it; a crash leaves at most a
``.tmp`` file behind. Output is canonical (sorted keys, two-space indent, trailing newline).
"""

from __future__ import annotations

import contextlib
import json
import os
import tempfile
from pathlib import Path
from typing import Any


def dumps(data: Any) -> bytes:
    return (json.dumps(data, sort_keys=True, indent=2, default=str) + "\n").encode()


def write_atomic(path: Path, data: Any) -> Path:
    """Write ``data`` as JSON to ``path`` (creating the folder); returns ``path``."""
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        with os.fdopen(fd, "wb") as handle:
            handle.write(dumps(data))
            handle.flush()
            os.fsync(handle.fileno())
        os.chmod(tmp, 0o644)
        os.replace(tmp, path)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        raise
    return path
