"""Hostile git dependencies and project folders (issue 39), through `reprobuild render` as a
user runs it: a branch without a commit, a path that leaves the project, a git URL that would
run code, a workspace member that is a symlink out of the project, and a C extension the base
cannot compile. Each: exit 1, one ``error:`` line, nothing written to the project, the output
folder, the source cache or the temp dir. No engine: render refuses before it is needed."""

from __future__ import annotations

import re
import shutil
from collections.abc import Callable
from pathlib import Path

import pytest

from helpers import DATA, make_uv_workspace, run_cli
from hostile_harness import Snapshot, assert_clean_failure

COMMIT_RE = re.compile(r"#[0-9a-f]{40}\"")


def _project(tmp_path: Path) -> Path:
    project, _commit = make_uv_workspace(tmp_path)
    (project / "train.py").write_text("import core, gitdep\n")
    (project / "reprobuild.yaml").write_text(
        "name: reprobuild-test/hostile-sources\nlock: uv.lock\nbase:\n"
        "  cpu: python-3.11-slim-bookworm\nseed: 7\ninclude:\n  - train.py\n"
        'command: ["python", "train.py"]\nselect:\n  python: "3.11"\n'
    )
    shutil.copy(DATA / "projects" / "sdist" / "reprobuild.bases.lock", project)
    return project


def _edit_lock(old: str, new: str) -> Callable[[Path, Path], None]:
    def edit(project: Path, _tmp: Path) -> None:
        lock = project / "uv.lock"
        text = lock.read_text()
        assert re.search(old, text), old
        lock.write_text(re.sub(old, new, text))

    return edit


def _member_links_out(project: Path, tmp: Path) -> None:
    core = project / "packages" / "core"
    core.rename(tmp / "outside")
    core.symlink_to(tmp / "outside")


def _c_extension(project: Path, _tmp: Path) -> None:
    core = project / "packages" / "core"
    (core / "setup.py").write_text(
        "from setuptools import Extension, setup\nsetup(ext_modules=[Extension('m', ['m.c'])])\n"
    )
    (core / "m.c").write_text("int x;\n")


@pytest.mark.parametrize(
    ("change", "expected"),
    [
        (
            _edit_lock(r"\?rev=[0-9a-f]{40}#[0-9a-f]{40}", "?branch=main"),
            r"uv\.lock:\d+: package gitdep comes from git .* at 'main': a full 40-hex commit",
        ),
        (
            _edit_lock(r'editable = "packages/core"', 'editable = "../../etc"'),
            r"uv\.lock:\d+: package core: path '\.\./\.\./etc' leaves the project",
        ),
        (
            _edit_lock(r'git = "file://[^"?]*', 'git = "ext::sh -c touch% /tmp/pwned'),
            r"uv\.lock:\d+: package gitdep: git URL .* names a git transport helper",
        ),
        (_member_links_out, r"uv\.lock:\d+: package core: path 'packages/core' resolves to"),
        (
            _c_extension,
            r"uv\.lock:\d+: package core 0\.3\.0 cannot be built on python-3\.11-slim-bookworm: "
            r"it needs a C compiler \(gcc\), CPython's headers \(Python\.h\) \(m\.c\)",
        ),
    ],
    ids=["branch", "dotdot", "ext-url", "symlink-out", "c-extension"],
)
def test_render_refuses_in_one_line_and_writes_nothing(
    tmp_path: Path, change: Callable[[Path, Path], None], expected: str
) -> None:
    project = _project(tmp_path)
    change(project, tmp_path)
    cache = tmp_path / "cache"
    out = tmp_path / "ctx"
    snap = Snapshot.take([project, cache, out])
    proc = run_cli("render", str(project), "-o", str(out), env={"XDG_CACHE_HOME": str(cache)})
    line = assert_clean_failure(proc, "")
    assert re.search(expected, line), line
    snap.assert_unchanged()
    assert not Path("/tmp/pwned").exists()
