"""The hostile-input corpus's one yardstick (tests/hostile/): what every failing command must
show and what it must not leave behind.

A hostile case passes when the CLI exits with the expected non-zero code; stderr holds exactly
one ``error:`` line (a failed build may print its log tail above it; at most one ``hint:``
line may follow) and no Python traceback; stdout is empty; and nothing changed that the case
did not ask for: the project tree, the output location, the wheel cache, image tags (scratch
tags included), containers, and ``reprobuild-*`` temp dirs.
"""

from __future__ import annotations

import hashlib
import os
import subprocess
import tempfile
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

TEMP_PREFIXES = ("reprobuild-",)


def tree_state(root: Path) -> dict[str, str]:
    """Every entry under ``root`` (not following symlinks): files by content hash, symlinks by
    target, dirs and other kinds by type. Missing root gives {}."""
    state: dict[str, str] = {}
    if not root.exists() and not root.is_symlink():
        return state
    for dirpath, dirnames, filenames in os.walk(root, followlinks=False):
        for name in [*dirnames, *filenames]:
            path = Path(dirpath) / name
            rel = str(path.relative_to(root))
            if path.is_symlink():
                state[rel] = f"link:{os.readlink(path)}"
            elif path.is_dir():
                state[rel] = "dir"
            elif path.is_file():
                state[rel] = "file:" + hashlib.sha256(path.read_bytes()).hexdigest()
            else:
                state[rel] = "special"
    return state


def temp_dirs() -> set[str]:
    tmp = Path(tempfile.gettempdir())
    return {p.name for p in tmp.iterdir() if p.name.startswith(TEMP_PREFIXES)}


def engine_state(docker_client: Any) -> dict[str, set[str]]:
    """Tags and containers (all, running or not) on the engine."""
    tags = {t for image in docker_client.images.list(all=True) for t in image.tags}
    containers = {c.id for c in docker_client.containers.list(all=True)}
    return {"tags": tags, "containers": containers}


@dataclass
class Snapshot:
    """What a command may not change when it fails. Compare with ``assert_unchanged``."""

    trees: dict[str, dict[str, str]]
    temps: set[str]
    engine: dict[str, set[str]] | None

    @classmethod
    def take(cls, paths: Iterable[Path], docker_client: Any = None) -> Snapshot:
        return cls(
            trees={str(p): tree_state(p) for p in paths},
            temps=temp_dirs(),
            engine=engine_state(docker_client) if docker_client is not None else None,
        )

    def assert_unchanged(self, docker_client: Any = None) -> None:
        for path, before in self.trees.items():
            after = tree_state(Path(path))
            changed = sorted(
                k for k in before.keys() | after.keys() if before.get(k) != after.get(k)
            )
            assert not changed, f"{path} changed: {changed[:10]}"
        new_temps = temp_dirs() - self.temps
        assert not new_temps, f"temp dirs left behind: {sorted(new_temps)}"
        if self.engine is not None:
            after_engine = engine_state(docker_client)
            # Only what appeared counts: other tests may remove their own things meanwhile.
            new_tags = after_engine["tags"] - self.engine["tags"]
            assert not new_tags, f"image tags left behind: {sorted(new_tags)}"
            new_containers = after_engine["containers"] - self.engine["containers"]
            assert not new_containers, f"containers left behind: {sorted(new_containers)}"


def assert_clean_failure(
    proc: subprocess.CompletedProcess[str],
    expected: str,
    *,
    exit_code: int | None = None,
    build_log_allowed: bool = False,
) -> str:
    """One ``error:`` line containing ``expected`` (at most one ``hint:`` after it), no
    traceback, nothing on stdout, a non-zero (or the given) exit code. Returns the error line."""
    err = proc.stderr
    assert "Traceback (most recent call last)" not in err, err[-3000:]
    if exit_code is None:
        assert proc.returncode != 0, f"exit 0 for a bad input\n{err[-2000:]}"
    else:
        assert proc.returncode == exit_code, f"exit {proc.returncode}\n{err[-2000:]}"
    lines = err.strip().splitlines()
    errors = [ln for ln in lines if ln.startswith("error: ")]
    assert len(errors) == 1, err[-3000:]
    if not build_log_allowed:
        assert lines[0] == errors[0], err[-3000:]
    after = lines[lines.index(errors[0]) + 1 :]
    assert len(after) <= 1 and all(ln.startswith("hint: ") for ln in after), err[-3000:]
    assert expected in errors[0], f"{expected!r} not in {errors[0]!r}"
    assert len(errors[0]) <= 400, f"error line too long ({len(errors[0])} chars)"
    assert proc.stdout == "", proc.stdout[-2000:]
    return errors[0]
