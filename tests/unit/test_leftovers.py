"""Owner tokens: what decides that a scratch tag, container or temp dir is a leftover."""

from __future__ import annotations

import os
import subprocess
import sys
import tempfile
from pathlib import Path

from reprobuild._util import leftovers


def test_own_token_is_alive_and_names_this_process() -> None:
    token = leftovers.owner()
    assert token.startswith(f"{os.getpid()}-")
    assert leftovers.is_alive(token)
    assert not leftovers.is_alive(f"{os.getpid()}-1")  # same pid, other start: another process


def test_dead_process_is_not_alive() -> None:
    proc = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"], check=True,
                          capture_output=True, text=True)  # fmt: skip
    assert not leftovers.is_alive(f"{proc.stdout.strip()}-12345")


def test_malformed_token_is_never_reaped() -> None:
    assert leftovers.is_alive("not-a-token")
    assert leftovers.scratch_owner("reprobuild-scratch/x:deadbeef") is None


def test_scratch_tag_carries_the_owner() -> None:
    tag = leftovers.scratch_tag("team/proj", "0123456789abcdef")
    assert tag.startswith("reprobuild-scratch/team-proj:")
    assert leftovers.scratch_owner(tag) == leftovers.owner()


def test_reap_removes_dead_temp_dirs_only(tmp_path: Path) -> None:
    dead = Path(tempfile.mkdtemp(prefix="reprobuild-ctx-999999999-5-"))
    mine = Path(tempfile.mkdtemp(prefix=leftovers.temp_prefix("ctx")))
    notes: list[str] = []
    try:
        leftovers.reap(None, notes.append)
        assert not dead.exists() and mine.is_dir()
        assert len(notes) == 1 and "(pid 999999999" in notes[0], notes
    finally:
        for path in (dead, mine):
            if path.exists():
                path.rmdir()
