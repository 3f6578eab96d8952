"""Broken images in buildah's storage: a record without its manifest, which a pull stopped at
the wrong moment leaves (containers/storage writes the record, then its data items) and on
which every later ``buildah images`` fails. A pull that reprobuild stops removes the one it
left; a run killed while pulling has it removed by the next run's reaping; one that is not
ours is left alone with a warning line that names the fix. A stand-in ``buildah`` on PATH
keeps the storage's broken images in a JSON file; the engine suite's signal tests stop real
pulls (tests/hostile/test_signals_buildah.py)."""

from __future__ import annotations

import json
import os
import stat
import sys
import tempfile
from pathlib import Path

import pytest

from reprobuild._util import leftovers
from reprobuild.backends import buildah
from reprobuild.bases.refs import parse_pinned
from reprobuild.errors import EngineError

OLD, NEW = "a" * 64, "b" * 64
FAKE = """#!{python}
import json, os, sys
state_file = os.environ["FAKE_STATE"]
with open(state_file) as fh:
    state = json.load(fh)
args = sys.argv[1:]
def save():
    with open(state_file, "w") as fh:
        json.dump(state, fh)
if args[0] == "images":
    if state["broken"] and state["tolerant"]:  # a listing that only logs them
        for image in state["broken"]:
            sys.stderr.write('level=error msg="Image %s exists in local storage but may be '
                             'corrupted (remove the image to resolve the issue): locating '
                             'item named \\\\"manifest\\\\" for image with ID \\\\"%s\\\\" '
                             '(consider removing the image to resolve the issue): file does '
                             'not exist"\\n' % (image[:12], image))
        sys.exit(0)
    if state["broken"]:
        sys.stderr.write('Error: locating item named "manifest" for image with ID "%s" '
                         '(consider removing the image to resolve the issue): file does not '
                         'exist\\n' % state["broken"][0])
        sys.exit(125)
    sys.exit(0)
if args[0] == "rmi":
    if args[1] not in state["broken"]:
        sys.exit(1)
    state["broken"].remove(args[1]); state["removed"].append(args[1]); save()
    sys.exit(0)
if args[0] == "pull":
    where = 0 if state["pull"] == "first" else len(state["broken"])
    state["broken"].insert(where, "{new}"); save()
    sys.stderr.write("Error: copying system image from manifest list: interrupted\\n")
    sys.exit(1)
if args[0] == "containers":
    sys.exit(0)  # no working containers
sys.exit(125)  # inspect: no such image
"""


@pytest.fixture
def store(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    tool = tmp_path / "bin" / "buildah"
    tool.parent.mkdir()
    tool.write_text(FAKE.replace("{python}", sys.executable).replace("{new}", NEW))
    tool.chmod(tool.stat().st_mode | stat.S_IXUSR)
    monkeypatch.setenv("PATH", f"{tool.parent}{os.pathsep}{os.environ['PATH']}")
    state = tmp_path / "state.json"
    monkeypatch.setenv("FAKE_STATE", str(state))
    temp = tmp_path / "tmp"
    temp.mkdir()
    monkeypatch.setattr(tempfile, "tempdir", str(temp))
    monkeypatch.setattr(buildah, "BROKEN_SETTLE_S", 0.0)
    return state


def _state(path: Path, broken: list[str], pull: str = "first", tolerant: bool = False) -> None:
    state = {"broken": broken, "removed": [], "pull": pull, "tolerant": tolerant}
    path.write_text(json.dumps(state))


def _read(path: Path) -> dict[str, list[str]]:
    return json.loads(path.read_text())  # type: ignore[no-any-return]


BASE = parse_pinned("127.0.0.1:5000/reprobuild/base@sha256:" + "c" * 64)


@pytest.mark.parametrize("tolerant", [False, True], ids=["listing-fails", "listing-logs"])
def test_a_stopped_pull_removes_the_broken_image_it_left(store: Path, tolerant: bool) -> None:
    """Whether buildah's listing fails on a broken image or only logs it depends on what else
    the storage holds: either way it is found."""
    _state(store, [], tolerant=tolerant)
    with pytest.raises(EngineError, match="interrupted"):
        buildah.pull(BASE)
    assert _read(store)["broken"] == [] and _read(store)["removed"] == [NEW]
    assert list(Path(tempfile.gettempdir()).iterdir()) == []  # the pull's temp dir went too


def test_a_broken_image_there_before_the_pull_is_not_its(store: Path) -> None:
    """The one the listing stopped at before the pull is someone else's: kept. The listing
    cannot see past it, so an image the pull broke behind it is left too (the warning at the
    next build names the first)."""
    _state(store, [OLD], pull="first")
    with pytest.raises(EngineError):
        buildah.pull(BASE)
    assert _read(store)["broken"] == [OLD] and _read(store)["removed"] == [NEW]
    _state(store, [OLD], pull="after")
    with pytest.raises(EngineError):
        buildah.pull(BASE)
    assert _read(store)["broken"] == [OLD, NEW] and _read(store)["removed"] == []


def _pull_dir(token: str, before: str | None) -> Path:
    folder = Path(tempfile.gettempdir()) / f"reprobuild-pull-{token}-x1y2"
    folder.mkdir()
    if before is not None:
        (folder / buildah.BROKEN_BEFORE).write_text(before)
    return folder


DEAD = f"{2**22 + 17}-1"  # no such pid


def test_the_next_run_removes_what_a_killed_runs_pull_left(store: Path) -> None:
    _state(store, [NEW, OLD])
    folder = _pull_dir(DEAD, OLD)
    notes: list[str] = []
    removed = leftovers.reap(None, notes.append, also=[buildah.Storage(notes.append)])
    assert removed == 2 and not folder.exists()  # the broken image and the temp dir
    assert _read(store)["removed"] == [NEW] and _read(store)["broken"] == [OLD]
    # the listing still fails, on the image that is not ours: one warning with the fix first
    warning, note = notes
    assert warning.startswith(f"warning: buildah's storage holds a broken image {OLD[:12]} ")
    assert note == f"note: removed 2 leftovers of an earlier run that was killed (pid {DEAD[:-2]})"


@pytest.mark.parametrize("case", ["live run", "no record"])
def test_a_pull_that_cannot_be_blamed_is_left_alone(store: Path, case: str) -> None:
    """A live run's pull (its image is broken until it finishes) and a dead run's pull dir
    without the record of what was broken before it (killed before it wrote it)."""
    _state(store, [NEW])
    folder = _pull_dir(leftovers.owner(), "") if case == "live run" else _pull_dir(DEAD, None)
    notes: list[str] = []
    leftovers.reap(None, notes.append, also=[buildah.Storage(notes.append)])
    assert _read(store)["removed"] == []
    assert folder.exists() is (case == "live run")


def test_a_broken_image_not_ours_gets_one_warning_that_names_the_fix(store: Path) -> None:
    _state(store, [OLD])
    notes: list[str] = []
    assert leftovers.reap(None, notes.append, also=[buildah.Storage(notes.append)]) == 0
    assert len(notes) == 1, notes
    assert notes[0].startswith(f"warning: buildah's storage holds a broken image {OLD[:12]} ")
    assert notes[0].endswith(f"until `buildah rmi {OLD}` removes it")
    assert _read(store)["removed"] == []
