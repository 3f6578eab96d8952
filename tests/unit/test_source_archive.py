"""Source pins into deterministic archives (real git, real folders) and the build preflight."""

from __future__ import annotations

import io
import os
import tarfile
import zipfile
from pathlib import Path

import pytest

from helpers import git_in, make_git_package, make_uv_workspace
from reprobuild.errors import LockfileError
from reprobuild.locks.buildneeds import base_tools, check_buildable, needs_of_bytes
from reprobuild.locks.lockfile import load_lock
from reprobuild.locks.records import SourcePin
from reprobuild.locks.sourcearchive import ARCHIVE_MTIME, archive_sources, pack_git, pack_path

SLIM = base_tools("debian-python", {"python": "3.11", "os": "debian-12"}, [], gpu=False)


def _names(data: bytes) -> list[str]:
    with tarfile.open(fileobj=io.BytesIO(data), mode="r:gz") as tar:
        return [m.name for m in tar.getmembers()]


def test_git_archive_is_the_commit_bytes_for_bytes(tmp_path: Path) -> None:
    commit = make_git_package(tmp_path / "repo")
    pin = SourcePin("gitdep", "1.2.0", "git", f"file://{tmp_path}/repo", commit, line=3)
    first = pack_git(pin, tmp_path / "uv.lock")
    # a later commit on the branch changes nothing: the archive is of the pinned commit
    (tmp_path / "repo" / "NEW.txt").write_text("later\n")
    git_in(tmp_path / "repo", "add", "-A")
    git_in(tmp_path / "repo", "commit", "-qm", "later")
    second = pack_git(pin, tmp_path / "uv.lock")
    assert first == second and first.filename == "gitdep-1.2.0.tar.gz"
    assert _names(first.data) == [
        "gitdep-1.2.0/pyproject.toml",
        "gitdep-1.2.0/src",
        "gitdep-1.2.0/src/gitdep",
        "gitdep-1.2.0/src/gitdep/__init__.py",
    ]
    with tarfile.open(fileobj=io.BytesIO(first.data), mode="r:gz") as tar:
        assert {(m.mtime, m.uid, m.gid, m.uname) for m in tar.getmembers()} == {
            (ARCHIVE_MTIME, 0, 0, "")
        }
    assert first.data[4:8] == b"\0\0\0\0"  # gzip mtime 0, and no file name (FLG 0)
    assert first.data[3] == 0


def test_git_commit_missing_or_repo_unreachable_is_one_line(tmp_path: Path) -> None:
    make_git_package(tmp_path / "repo")
    lock = tmp_path / "uv.lock"
    absent = SourcePin("gitdep", "1", "git", f"file://{tmp_path}/repo", "f" * 40, line=7)
    with pytest.raises(LockfileError, match=r"uv\.lock:7: package gitdep: "):
        pack_git(absent, lock)
    gone = SourcePin("gitdep", "1", "git", f"file://{tmp_path}/nothing", "f" * 40, line=7)
    with pytest.raises(LockfileError) as info:
        pack_git(gone, lock)
    assert "\n" not in str(info.value) and "failed" in str(info.value)


def test_path_archive_ignores_mtimes_caches_and_vcs(tmp_path: Path) -> None:
    member = tmp_path / "packages" / "core"
    (member / "src" / "core" / "__pycache__").mkdir(parents=True)
    (member / ".git").mkdir()
    (member / "pyproject.toml").write_text('[project]\nname = "core"\nversion = "0.3.0"\n')
    (member / "src" / "core" / "__init__.py").write_text("")
    (member / "src" / "core" / "__pycache__" / "x.pyc").write_bytes(b"junk")
    (member / "run.sh").write_text("#!/bin/sh\n")
    (member / "run.sh").chmod(0o755)
    (member / "link.py").symlink_to("src/core/__init__.py")
    (member / "build").mkdir()  # a build folder at the top is left out, a subpackage kept
    (member / "build" / "lib.txt").write_text("left over\n")
    (member / "src" / "core" / "build").mkdir()
    (member / "src" / "core" / "build" / "__init__.py").write_text("")
    pin = SourcePin("core", "0.3.0", "path", "packages/core", editable=True)
    first = pack_path(pin, tmp_path, tmp_path / "uv.lock")
    os.utime(member / "pyproject.toml", (1, 1))
    (member / ".git" / "HEAD").write_text("ref: x\n")
    assert pack_path(pin, tmp_path, tmp_path / "uv.lock") == first
    with tarfile.open(fileobj=io.BytesIO(first.data), mode="r:gz") as tar:
        modes = {m.name.split("/", 1)[1]: m.mode for m in tar.getmembers() if m.isfile()}
        link = tar.getmember("core-0.3.0/link.py")
    assert modes == {
        "pyproject.toml": 0o644,
        "run.sh": 0o755,
        "src/core/__init__.py": 0o644,
        "src/core/build/__init__.py": 0o644,
    }
    assert link.issym() and link.linkname == "src/core/__init__.py"


@pytest.mark.parametrize("where", ["member", "inner"])
def test_symlink_out_of_the_project_is_refused_and_nothing_written(
    tmp_path: Path, where: str
) -> None:
    project, _commit = make_uv_workspace(tmp_path)
    core = project / "packages" / "core"
    if where == "member":  # the member folder itself is a link to a folder outside
        outside = tmp_path / "outside"
        core.rename(outside)
        core.symlink_to(outside)
    else:
        (core / "src" / "core" / "secrets.py").symlink_to("/etc/passwd")
    dest = tmp_path / "cache"
    with pytest.raises(LockfileError) as info:
        archive_sources(load_lock(project / "uv.lock"), project, dest, SLIM)
    message = str(info.value)
    assert "\n" not in message and "package core: path 'packages/core'" in message
    assert "outside the project" in message
    assert not dest.exists()


def test_archive_sources_writes_content_addressed_records(tmp_path: Path) -> None:
    project, commit = make_uv_workspace(tmp_path)
    lock = archive_sources(load_lock(project / "uv.lock"), project, tmp_path / "cache", SLIM)
    assert lock.source_pins == ()
    records = {r.name: r.source for r in lock.sources}
    assert set(records) == {"core", "gitdep"}
    for req in lock.sources:
        assert req.source is not None and req.source.local is not None
        assert req.source.local.parent.name == req.source.hex
        assert req.hashes == (req.source.sha256,)
    git = records["gitdep"]
    assert git is not None and git.origin == f"git file://{tmp_path}/gitdep@{commit}"
    assert "built from gitdep-1.2.0.tar.gz sha256:" in lock.render(index_options=False)
    # the commit is packed once: with its repository gone, the archive comes from the cache
    (tmp_path / "gitdep").rename(tmp_path / "gone")
    again = archive_sources(load_lock(project / "uv.lock"), project, tmp_path / "cache", SLIM)
    assert again.sources == lock.sources


def _tar(files: dict[str, str]) -> bytes:
    raw = io.BytesIO()
    with tarfile.open(fileobj=raw, mode="w:gz") as tar:
        for name, text in files.items():
            data = text.encode()
            info = tarfile.TarInfo(f"pkg-1.0/{name}")
            info.size = len(data)
            tar.addfile(info, io.BytesIO(data))
    return raw.getvalue()


_EXT = "from setuptools import Extension, setup\nsetup(ext_modules=[Extension('m', ['m.c'])])\n"
_CUDA = "from torch.utils.cpp_extension import CUDAExtension\nsetup(ext_modules=[CUDAExtension()])"


@pytest.mark.parametrize(
    ("files", "tools"),
    [
        ({"setup.py": "from setuptools import setup\nsetup()", "vendored/x.c": ""}, set()),
        ({"setup.py": _EXT, "m.c": ""}, {"c", "headers"}),
        ({"setup.py": _EXT.replace("m.c", "m.pyx"), "m.pyx": ""}, {"c", "headers"}),
        ({"setup.py": _EXT, "m.cpp": ""}, {"c++", "headers"}),
        ({"setup.py": _CUDA, "csrc/adam.cu": "", "csrc/a.cpp": ""}, {"cuda", "c++", "headers"}),
        ({"setup.py": _CUDA}, {"cuda", "c++", "headers"}),
        (
            {"pyproject.toml": '[build-system]\nrequires = ["maturin>=1"]\n', "Cargo.toml": ""},
            {"rust", "headers"},
        ),
        (
            {"pyproject.toml": '[build-system]\nrequires = ["scikit-build-core"]\n'},
            {"c", "headers"},
        ),
        ({"pyproject.toml": '[build-system]\nrequires = ["hatchling"]\n', "a.c": ""}, set()),
    ],
)
def test_needs_of_an_archive(files: dict[str, str], tools: set[str]) -> None:
    assert set(needs_of_bytes("pkg-1.0.tar.gz", _tar(files)).tools) == tools


def test_needs_of_a_zip_sdist() -> None:
    raw = io.BytesIO()
    with zipfile.ZipFile(raw, "w") as zf:
        zf.writestr("pkg-1.0/setup.py", _EXT)
        zf.writestr("pkg-1.0/m.c", "")
    assert set(needs_of_bytes("pkg-1.0.zip", raw.getvalue()).tools) == {"c", "headers"}


def test_preflight_names_package_need_and_fix(tmp_path: Path) -> None:
    """A workspace member with a C extension on a slim base: one line, nothing written; with
    the compiler and headers in `apt:` it passes; a CUDA build needs a CUDA base."""
    project, _commit = make_uv_workspace(tmp_path)
    core = project / "packages" / "core"
    (core / "setup.py").write_text(_EXT)
    (core / "m.c").write_text("int x;\n")
    lock = load_lock(project / "uv.lock")
    dest = tmp_path / "cache"
    with pytest.raises(LockfileError) as info:
        archive_sources(lock, project, dest, SLIM)
    err = info.value
    assert str(err).startswith(f"{project / 'uv.lock'}:11: package core 0.3.0 cannot be built")
    assert "it needs a C compiler (gcc), CPython's headers (Python.h) (m.c)" in str(err)
    assert err.hint is not None and "gcc=<version>, libc6-dev=<version>, python3-dev" in err.hint
    assert "from debian-12" in err.hint
    assert not dest.exists()
    apt = ["gcc=4:12.2.0-3", "libc6-dev=2.36-9", "python3-dev=3.11.2-1+b1"]
    fixed = base_tools("debian-python", {"os": "debian-12"}, apt, gpu=False)
    archived = archive_sources(lock, project, dest, fixed)
    (core / "k.cu").write_text("")
    (core / "setup.py").write_text(_CUDA)
    cuda_lock = archive_sources(lock, project, tmp_path / "cache2")  # no base: no preflight
    with pytest.raises(
        LockfileError, match=r"needs a C\+\+ compiler \(g\+\+\), CUDA's compiler \(nvcc\) \(k\.cu\)"
    ) as cuda:
        check_buildable(cuda_lock, fixed)
    assert cuda.value.hint is not None and "CUDA development base" in cuda.value.hint
    ngc = {"cuda": "12.8.0", "ngc_release": "25.01", "os": "ubuntu-24.04"}
    check_buildable(cuda_lock, base_tools("ngc-pytorch-25.01", ngc, [], gpu=True))
    check_buildable(archived, fixed)
