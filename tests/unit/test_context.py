"""Writing a build context (all or nothing, fixed mtimes, kept modes) and gathering app files."""

from __future__ import annotations

import os
import stat
from pathlib import Path

import pytest

from reprobuild._util.fsutil import replace_dir, write_atomic
from reprobuild.errors import ConfigError, OutputError, ReprobuildError
from reprobuild.imaging.context import MARKER, clamp_times, write_context, write_tree
from reprobuild.imaging.plan import app_files, source_date_epoch
from reprobuild.imaging.render import FileEntry
from reprobuild.project.config import load_config

EPOCH = 1234567890
FILES = {
    "Dockerfile": FileEntry(b"FROM scratch\n"),
    "bin/run.sh": FileEntry(b"#!/bin/sh\n", 0o755),
    "deep/er/still/data.bin": FileEntry(bytes(range(256)), 0o600),
    "empty": FileEntry(b""),
}


def tree(root: Path) -> dict[str, tuple[bytes | None, int, int]]:
    out: dict[str, tuple[bytes | None, int, int]] = {}
    for path in sorted(root.rglob("*")):
        st = path.lstat()
        data = path.read_bytes() if stat.S_ISREG(st.st_mode) else None
        out[path.relative_to(root).as_posix()] = (data, stat.S_IMODE(st.st_mode), st.st_mtime_ns)
    return out


def leftovers(parent: Path, name: str) -> list[str]:
    return sorted(p.name for p in parent.iterdir() if p.name.startswith(f".{name}."))


# --------------------------------------------------------------------------- write_context


def test_write_context_success(tmp_path: Path) -> None:
    out = tmp_path / "ctx"
    write_context(FILES, out, epoch=EPOCH)
    assert leftovers(tmp_path, "ctx") == []
    assert sorted(p.name for p in tmp_path.iterdir()) == ["ctx"]
    got = tree(out)
    files = {rel: v for rel, v in got.items() if v[0] is not None}
    assert set(files) == {*FILES, MARKER}
    for rel, entry in FILES.items():
        data, mode, _ = files[rel]
        assert data == entry.data, rel
        assert mode == entry.mode, rel
    # Every file and directory, the root included, carries the epoch as its mtime.
    assert {mtime for *_, mtime in got.values()} == {EPOCH * 10**9}
    assert out.stat().st_mtime_ns == EPOCH * 10**9
    assert stat.S_IMODE(out.stat().st_mode) == 0o755
    assert {rel for rel, v in got.items() if v[0] is None} == {
        "bin",
        "deep",
        "deep/er",
        "deep/er/still",
    }


def test_write_context_replaces_existing_dir(tmp_path: Path) -> None:
    out = tmp_path / "ctx"
    out.mkdir()
    (out / MARKER).write_text("an earlier render\n")
    (out / "old.txt").write_text("old\n")
    (out / "Dockerfile").write_text("FROM old\n")
    write_context(FILES, out, epoch=EPOCH)
    assert not (out / "old.txt").exists()
    assert (out / "Dockerfile").read_bytes() == b"FROM scratch\n"
    assert leftovers(tmp_path, "ctx") == []


def test_write_context_creates_parents(tmp_path: Path) -> None:
    out = tmp_path / "a" / "b" / "ctx"
    write_context(FILES, out, epoch=0)
    assert (out / "Dockerfile").is_file()
    assert (out / "Dockerfile").stat().st_mtime_ns == 0


def test_write_context_relative_path(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    write_context(FILES, Path("ctx"), epoch=EPOCH)
    assert (tmp_path / "ctx" / "Dockerfile").is_file()
    assert leftovers(tmp_path, "ctx") == []


def test_write_context_same_input_same_tree(tmp_path: Path) -> None:
    write_context(FILES, tmp_path / "a", epoch=EPOCH)
    write_context(FILES, tmp_path / "b", epoch=EPOCH)
    assert tree(tmp_path / "a") == tree(tmp_path / "b")


@pytest.mark.parametrize(
    "files",
    [
        {"a": FileEntry(b"file"), "a/b": FileEntry(b"under a file")},
        {"a/b": FileEntry(b"x"), "a": FileEntry(b"dir is in the way")},
    ],
)
def test_write_context_failure_leaves_nothing(tmp_path: Path, files: dict[str, FileEntry]) -> None:
    out = tmp_path / "ctx"
    with pytest.raises((OSError, OutputError)):
        write_context(files, out, epoch=EPOCH)
    assert not out.exists()
    assert list(tmp_path.iterdir()) == []


def test_write_context_failure_keeps_old_output(tmp_path: Path) -> None:
    out = tmp_path / "ctx"
    write_context(FILES, out, epoch=EPOCH)
    before = tree(out)
    bad = {**FILES, "Dockerfile/x": FileEntry(b"collides with the Dockerfile")}
    with pytest.raises((OSError, OutputError)):
        write_context(bad, out, epoch=EPOCH + 1)
    assert tree(out) == before
    assert sorted(p.name for p in tmp_path.iterdir()) == ["ctx"]


def test_write_context_output_is_a_file(tmp_path: Path) -> None:
    out = tmp_path / "ctx"
    out.write_text("precious\n")
    with pytest.raises(OutputError, match="exists and is not a directory"):
        write_context(FILES, out, epoch=EPOCH)
    assert out.read_text() == "precious\n"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["ctx"]


def test_write_context_parent_is_a_file(tmp_path: Path) -> None:
    (tmp_path / "file").write_text("x")
    with pytest.raises(OutputError, match=r"cannot write the build context .*: cannot create"):
        write_context(FILES, tmp_path / "file" / "ctx", epoch=EPOCH)


def test_write_tree_fixes_mtimes(tmp_path: Path) -> None:
    write_tree(FILES, tmp_path, epoch=EPOCH)
    assert {mtime for *_, mtime in tree(tmp_path).values()} == {EPOCH * 10**9}
    assert tmp_path.stat().st_mtime_ns == EPOCH * 10**9


# --------------------------------------------------------------------------- fsutil


def test_clamp_times_keeps_links_at_the_caches_time(tmp_path: Path) -> None:
    """A link into the wheel cache already at the cache's one fixed time is used as it is:
    no copy of gigabytes of CUDA wheels per build; anything else linked is still copied."""
    cache = tmp_path / "cache"
    cache.mkdir()
    kept, other = cache / "a-1.0-py3-none-any.whl", cache / "b-1.0-py3-none-any.whl"
    for path in (kept, other):
        path.write_bytes(b"wheel")
    os.utime(kept, ns=(0, 0))
    os.utime(other, ns=(5, 5))
    ctx = tmp_path / "ctx"
    (ctx / "wheels").mkdir(parents=True)
    for path in (kept, other):
        os.link(path, ctx / "wheels" / path.name)
    clamp_times(ctx, EPOCH, linked_at=0)
    assert (ctx / "wheels" / kept.name).stat().st_ino == kept.stat().st_ino
    assert kept.stat().st_mtime_ns == 0
    assert (ctx / "wheels" / other.name).stat().st_ino != other.stat().st_ino
    assert other.stat().st_mtime_ns == 5
    assert (ctx / "wheels" / other.name).stat().st_mtime == EPOCH
    assert (ctx / "wheels").stat().st_mtime == EPOCH


def test_clamp_times_gives_linked_files_their_own_copy(tmp_path: Path) -> None:
    """The context's wheels are hard links into the wheel cache, whose index trusts size and
    mtime: clamping the context must not change the cached file's time (issue 29)."""
    cache = tmp_path / "cache"
    cache.mkdir()
    cached = cache / "six-1.16.0-py2.py3-none-any.whl"
    cached.write_bytes(b"wheel bytes" * 1000)
    os.chmod(cached, 0o640)
    os.utime(cached, ns=(1_600_000_000_000_000_000, 1_600_000_000_000_000_000))
    before = (cached.stat().st_ino, cached.stat().st_mtime_ns)
    ctx = tmp_path / "ctx"
    (ctx / "wheels").mkdir(parents=True)
    os.link(cached, ctx / "wheels" / cached.name)
    clamp_times(ctx, EPOCH)
    assert (cached.stat().st_ino, cached.stat().st_mtime_ns) == before
    assert cached.stat().st_nlink == 1
    copy = ctx / "wheels" / cached.name
    assert copy.read_bytes() == cached.read_bytes()
    assert stat.S_IMODE(copy.stat().st_mode) == 0o640
    assert copy.stat().st_ino != before[0]
    assert {p.relative_to(ctx).as_posix(): p.lstat().st_mtime for p in ctx.rglob("*")} == {
        "wheels": EPOCH,
        f"wheels/{cached.name}": EPOCH,
    }
    assert ctx.stat().st_mtime == EPOCH


def test_write_atomic_replaces_and_leaves_no_temp(tmp_path: Path) -> None:
    target = tmp_path / "sub" / "f.json"
    write_atomic(target, "one", mode=0o600)
    write_atomic(target, b"two")
    assert target.read_bytes() == b"two"
    assert stat.S_IMODE(target.stat().st_mode) == 0o644
    assert [p.name for p in target.parent.iterdir()] == ["f.json"]


def test_replace_dir_into_new_and_existing(tmp_path: Path) -> None:
    target = tmp_path / "t"
    for content in ("first", "second"):
        staged = tmp_path / f"s-{content}"
        staged.mkdir()
        (staged / "f").write_text(content)
        replace_dir(staged, target)
        assert (target / "f").read_text() == content
        assert not staged.exists()
    assert sorted(p.name for p in tmp_path.iterdir()) == ["t"]


def test_replace_dir_failure_restores_old(tmp_path: Path) -> None:
    target = tmp_path / "t"
    target.mkdir()
    (target / "f").write_text("old")
    with pytest.raises(OSError):
        replace_dir(tmp_path / "does-not-exist", target)
    assert (target / "f").read_text() == "old"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["t"]


# --------------------------------------------------------------------------- plan.app_files

MINIMAL = "name: demo\nlock: requirements.lock\nbase:\n  cpu: python-3.11-slim-bookworm\n"


def app_project(tmp_path: Path, include: list[str]) -> Path:
    root = tmp_path / "proj"
    (root / "pkg" / "sub").mkdir(parents=True)
    (root / "requirements.lock").write_text("x\n")
    (root / "main.py").write_text("print(1)\n")
    (root / "pkg" / "__init__.py").write_text("")
    (root / "pkg" / "mod.py").write_text("X = 1\n")
    (root / "pkg" / "sub" / "deep.py").write_text("Y = 2\n")
    lines = "".join(f"  - {item}\n" for item in include)
    (root / "reprobuild.yaml").write_text(MINIMAL + "include:\n" + lines)
    return root


def test_app_files_expands_dirs_sorted(tmp_path: Path) -> None:
    root = app_project(tmp_path, ["pkg", "main.py"])
    files = app_files(load_config(root))
    assert list(files) == ["main.py", "pkg/__init__.py", "pkg/mod.py", "pkg/sub/deep.py"]
    assert files["pkg/mod.py"] == FileEntry(b"X = 1\n", 0o644)


def test_app_files_skips_caches_and_bytecode(tmp_path: Path) -> None:
    root = app_project(tmp_path, ["pkg"])
    for rel in (
        "pkg/__pycache__/mod.cpython-311.pyc",
        "pkg/sub/__pycache__/x.txt",
        "pkg/stray.pyc",
        "pkg/stray.pyo",
        "pkg/.git/config",
        "pkg/.mypy_cache/x.json",
        "pkg/.pytest_cache/v",
        "pkg/.reprobuild/context-cpu/Dockerfile",
    ):
        (root / rel).parent.mkdir(parents=True, exist_ok=True)
        (root / rel).write_bytes(b"junk")
    files = app_files(load_config(root))
    assert list(files) == ["pkg/__init__.py", "pkg/mod.py", "pkg/sub/deep.py"]


def test_app_files_keeps_dotfiles_that_are_not_caches(tmp_path: Path) -> None:
    root = app_project(tmp_path, ["pkg"])
    (root / "pkg" / ".config.toml").write_text("a = 1\n")
    assert "pkg/.config.toml" in app_files(load_config(root))


def test_app_files_executable_bit(tmp_path: Path) -> None:
    root = app_project(tmp_path, ["pkg", "main.py"])
    (root / "main.py").chmod(0o700)
    (root / "pkg" / "mod.py").chmod(0o600)
    (root / "pkg" / "sub" / "deep.py").chmod(0o775)
    files = app_files(load_config(root))
    assert files["main.py"].mode == 0o755
    assert files["pkg/mod.py"].mode == 0o644
    assert files["pkg/sub/deep.py"].mode == 0o755
    assert files["pkg/__init__.py"].mode == 0o644


def test_app_files_symlink_to_file_in_include_dir_refused(tmp_path: Path) -> None:
    root = app_project(tmp_path, ["pkg"])
    os.symlink("mod.py", root / "pkg" / "alias.py")
    config = load_config(root)
    with pytest.raises(ConfigError) as info:
        app_files(config)
    assert "include 'pkg' contains a symlink (pkg/alias.py)" in info.value.message
    assert info.value.message.startswith(str(config.config_path))


def test_app_files_dangling_symlink_refused(tmp_path: Path) -> None:
    root = app_project(tmp_path, ["pkg"])
    os.symlink("missing.py", root / "pkg" / "broken.py")
    with pytest.raises(ConfigError, match=r"contains a symlink \(pkg/broken.py\)"):
        app_files(load_config(root))


def test_app_files_symlink_to_dir_in_include_dir_refused(tmp_path: Path) -> None:
    # A symlinked directory must be refused like a symlinked file, not silently left out
    # of the image (os.walk lists it among the directories and does not follow it).
    root = app_project(tmp_path, ["pkg"])
    os.symlink("sub", root / "pkg" / "linked")
    with pytest.raises(ConfigError, match=r"contains a symlink \(pkg/linked\)"):
        app_files(load_config(root))


def test_app_files_top_level_symlink_refused(tmp_path: Path) -> None:
    root = app_project(tmp_path, ["alias.py"])
    os.symlink("main.py", root / "alias.py")
    with pytest.raises(ConfigError, match=r"include 'alias.py' contains a symlink \(alias.py\)"):
        app_files(load_config(root))


def test_app_files_none_when_no_include(tmp_path: Path) -> None:
    root = app_project(tmp_path, [])
    (root / "reprobuild.yaml").write_text(MINIMAL)
    assert app_files(load_config(root)) == {}


# --------------------------------------------------------------------------- source_date_epoch


@pytest.mark.parametrize(("value", "epoch"), [("0", 0), ("1700000000", 1700000000)])
def test_source_date_epoch_from_env(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, value: str, epoch: int
) -> None:
    monkeypatch.setenv("SOURCE_DATE_EPOCH", value)
    assert source_date_epoch(tmp_path) == epoch


@pytest.mark.parametrize("value", ["", "-1", "1.5", "abc", " 1"])
def test_source_date_epoch_bad_env(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, value: str
) -> None:
    monkeypatch.setenv("SOURCE_DATE_EPOCH", value)
    with pytest.raises(ReprobuildError, match=r"SOURCE_DATE_EPOCH .* must be a non-negative"):
        source_date_epoch(tmp_path)


def test_source_date_epoch_outside_git_is_zero(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("SOURCE_DATE_EPOCH", raising=False)
    monkeypatch.setenv("GIT_CEILING_DIRECTORIES", str(tmp_path.parent))
    assert source_date_epoch(tmp_path) == 0
