"""Hostile environment, a read-only project (issue #30).

Every command that writes into the project, or beside it, gives one ``error:`` line naming the
path and what it tried to write, never an ``OSError: [Errno 30]`` traceback, and leaves
nothing behind. Root writes through file modes, so the project is made read-only the way a
CI cache or a mounted checkout is: a read-only bind mount, in a mount namespace of the test's
own (``unshare -m``), over the folder that holds the project (so "beside it" is read-only too).
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import pytest

from helpers import DATA
from hostile_harness import assert_clean_failure, tree_state

DIGEST_REF = "127.0.0.1:5000/reprobuild/none@sha256:" + "ab" * 32


def _can_mount_read_only(tmp: Path) -> bool:
    if os.geteuid() != 0 or shutil.which("unshare") is None:
        return False
    probe = tmp / "probe"
    probe.mkdir()
    script = 'mount --bind -o ro "$1" "$1" && ! touch "$1/x" 2>/dev/null'
    done = subprocess.run(
        ["unshare", "-m", "sh", "-c", script, "sh", str(probe)], capture_output=True, check=False
    )
    probe.rmdir()
    return done.returncode == 0


def run_read_only(
    folder: Path, *args: str, cwd: Path, env: dict[str, str]
) -> subprocess.CompletedProcess[str]:
    """``reprobuild ARGS`` in ``cwd`` with ``folder`` bind-mounted read-only over itself (the
    mount lives only in the child's mount namespace, and goes with it)."""
    script = 'mount --bind -o ro "$1" "$1" && shift && exec "$@"'
    command = [sys.executable, "-m", "reprobuild", *args]
    return subprocess.run(
        ["unshare", "-m", "sh", "-c", script, "sh", str(folder), *command],
        capture_output=True,
        text=True,
        cwd=cwd,
        env={**os.environ, "SOURCE_DATE_EPOCH": "0", **env},
        timeout=300,
        check=False,
    )


@dataclass(frozen=True)
class Case:
    id: str
    # argv after `reprobuild`; {root} is the project, {ro} the read-only folder holding it.
    argv: tuple[str, ...]
    expected: str
    # The path the error line must name ({root}/{ro} filled in).
    names: str
    # Remove the project's base lock first (a catalog base used for the first time).
    unlocked: bool = False
    marks: tuple[pytest.MarkDecorator, ...] = ()


CASES = [
    Case(
        "render-into-project",
        ("render", "-o", "{root}/ctx", "{root}"),
        "cannot write the build context",
        "{root}/ctx",
    ),
    Case(
        "render-beside-project",
        ("render", "-o", "{ro}/ctx", "{root}"),
        "cannot write the build context",
        "{ro}/ctx",
    ),
    Case(
        "render-records-base",
        ("render", "-o", "{ro}/ctx", "{root}"),
        "cannot record base 'python-3.11-slim-bookworm'",
        "{root}/reprobuild.bases.lock",
        unlocked=True,
    ),
    Case(
        "bases-update-all",
        ("bases", "{root}", "--update"),
        "cannot write the re-pinned bases to",
        "{root}/reprobuild.bases.lock",
    ),
    Case(
        "bases-update-one",
        ("bases", "{root}", "--update", "python-3.11-slim-bookworm"),
        "cannot write the re-pinned bases to",
        "{root}/reprobuild.bases.lock",
    ),
    Case(
        "bases-update-unlocked",
        ("bases", "{root}", "--update"),
        "cannot write the re-pinned bases to",
        "{root}/reprobuild.bases.lock",
        unlocked=True,
    ),
    Case(
        "compose-into-project",
        ("compose", "--image", DIGEST_REF, "-o", "{root}/compose.yml", "{root}"),
        "cannot write",
        "{root}/compose.yml",
    ),
    Case(
        "verify-report-into-project",
        ("verify", "--local", "--report", "{root}/report.json", "--", "true"),
        "cannot write the report",
        "{root}/",  # a long path is shortened with "..."
    ),
    Case(
        "verify-default-report",
        ("verify", "--local", "--", "true"),
        "cannot write the report",
        "{root}/",  # the default report dir, shortened with "..."
    ),
    Case(
        "verify-resume-report",
        ("verify", "--local", "--resume-at", "1", "--report", "{root}/r.json", "--", "true"),
        "cannot write the report",
        "{root}/",
    ),
    Case(
        "image-records-base",
        ("image", "--tag", "reprobuild-test/readonly:never", "{root}"),
        "cannot record base 'python-3.11-slim-bookworm'",
        "{root}/reprobuild.bases.lock",
        unlocked=True,
        marks=(pytest.mark.engine,),
    ),
]


@pytest.fixture
def read_only_project(tmp_path: Path) -> Callable[[bool], tuple[Path, Path]]:
    if not _can_mount_read_only(tmp_path):
        pytest.skip("needs root and unshare -m to make a read-only bind mount")

    def make(unlocked: bool) -> tuple[Path, Path]:
        ro = tmp_path / "ro"
        root = ro / "tiny"
        shutil.copytree(DATA / "projects" / "tiny", root)
        if unlocked:
            (root / "reprobuild.bases.lock").unlink()
        return ro, root

    return make


@pytest.mark.parametrize("case", [pytest.param(c, id=c.id, marks=c.marks) for c in CASES])
def test_read_only_project_gives_one_error_line(
    case: Case, read_only_project: Callable[[bool], tuple[Path, Path]], tmp_path: Path
) -> None:
    ro, root = read_only_project(case.unlocked)
    fill = {"root": str(root), "ro": str(ro)}
    cache = tmp_path / "xdg-cache"
    temp = tmp_path / "tmp"  # the run's own TMPDIR: other runs on the machine use /tmp
    cache.mkdir()
    temp.mkdir()
    before = {str(p): tree_state(p) for p in (ro, cache)}
    proc = run_read_only(
        ro,
        *(a.format(**fill) for a in case.argv),
        cwd=root,
        env={"XDG_CACHE_HOME": str(cache), "TMPDIR": str(temp)},
    )
    assert "Errno 30" not in proc.stderr, proc.stderr[-2000:]
    line = assert_clean_failure(proc, case.expected)
    named = case.names.format(**fill)
    # the path is named; a long one is cut with '...' (its tail or its head kept), so on a deep
    # temp dir only part of it may be there
    assert named in line or ("..." in line and (named[:48] in line or named[-40:] in line)), line
    assert {str(p): tree_state(p) for p in (ro, cache)} == before
    assert list(temp.iterdir()) == [], "temp files left behind"
