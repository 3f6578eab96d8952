"""Owner tokens: what decides that a scratch tag, container or temp dir is a leftover."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest

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


def test_container_name_carries_the_owner() -> None:
    name = leftovers.container_name("0123456789abcdef")
    assert leftovers.container_owner(name) == leftovers.owner()
    assert leftovers.container_owner("127.0.0.1-working-container") is None
    assert leftovers.container_owner("reprobuild-x-1-ab") is None


class _Store:
    """A store (buildah's) holding one container of a dead run and one of this run."""

    def __init__(self) -> None:
        self.held = {"reprobuild-999999998-5-ab": "999999998-5", "mine": leftovers.owner()}

    def owned_containers(self) -> list[tuple[str, str]]:
        return list(self.held.items())

    def remove_container(self, container_id: str) -> bool:
        return self.held.pop(container_id, None) is not None

    def tags_under(self, prefix: str) -> list[str]:
        return []

    def untag(self, ref: str) -> None:
        raise AssertionError(ref)


def test_reap_counts_every_store_in_one_note(tmp_path: Path) -> None:
    """The engine's leftovers and buildah's in one note line; a store's are removed before
    the dead run's temp dirs (which may say what it left there)."""
    dead = Path(tempfile.mkdtemp(prefix="reprobuild-iid-999999998-5-"))
    store = _Store()
    notes: list[str] = []
    try:
        # (other dead runs' temp dirs on this machine may be counted too)
        assert leftovers.reap(None, notes.append, also=[store]) >= 2
        assert list(store.held) == ["mine"]
        assert not dead.exists()
        assert len(notes) == 1 and "999999998" in notes[0], notes
    finally:
        if dead.exists():
            dead.rmdir()


def test_mounts_left_under_a_folder_are_unmounted_so_it_can_be_removed(tmp_path: Path) -> None:
    """buildah 1.39, stopped in a RUN step, leaves the step's bind mounts in its TMPDIR; the
    folder could not be removed. A real mount (root, as CI and the builders run)."""
    if os.geteuid() != 0:
        pytest.skip("mounting needs root (CI runs the suite as root)")
    outside = tmp_path / "outside"
    outside.mkdir()
    folder = tmp_path / "buildah tmp"  # a space: mountinfo writes it as \040
    (folder / "a" / "b").mkdir(parents=True)
    subprocess.run(["mount", "-t", "tmpfs", "none", str(folder / "a")], check=True)
    (folder / "a" / "b").mkdir()
    subprocess.run(["mount", "--bind", str(outside), str(folder / "a" / "b")], check=True)
    leftovers.unmount_under(folder)
    shutil.rmtree(folder)  # nothing mounted under it any more
    assert not folder.exists() and outside.is_dir()
    leftovers.unmount_under(tmp_path / "gone")  # a folder that is not there: nothing happens
