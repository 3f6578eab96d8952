"""Source pins into deterministic source archives on the host.

A :class:`~reprobuild.locks.records.SourcePin` (a git commit, or a directory of the project)
becomes a ``<name>-<version>.tar.gz`` whose bytes depend only on the files' paths, contents
and executable bits: entries sorted by path under one ``<name>-<version>/`` folder, every
mtime :data:`ARCHIVE_MTIME`, owner ``0:0`` with no names, modes ``0644``/``0755`` (files by
their executable bit) and ``0755`` for folders, a POSIX (ustar/pax) tar, gzip with mtime 0 and
no file name. Its sha256 and, for git, the commit go into the
:class:`~reprobuild.locks.records.SourceArchive` record the wheel-build stage builds from, as
it builds an sdist.

git: the repository is fetched (once per commit: an archive made before is reused from the
cache, its sha256 checked) into a temporary bare repository with ``git fetch --depth 1 --
URL COMMIT`` (a full fetch when the server refuses a commit by id), checked to hold exactly
that commit, and the tree is read with ``git archive`` (submodules are not fetched). git runs
with no system or global configuration, no terminal prompt, and only the https, ssh and file
protocols allowed; the URL comes after ``--``.

path: the folder is walked with no symlink followed; a symlink whose target resolves outside
the project, or the folder itself resolving outside it, is refused. Version-control folders,
caches, virtual environments, ``build/``, ``dist/``, ``*.egg-info`` and ``*.pyc`` are left
out (:data:`SKIPPED` anywhere, :data:`SKIPPED_AT_TOP` at the top of the folder).
"""

from __future__ import annotations

import gzip
import hashlib
import io
import os
import stat
import subprocess
import tarfile
import tempfile
from collections.abc import Iterable
from dataclasses import replace
from pathlib import Path
from typing import NamedTuple

from reprobuild.errors import LockfileError
from reprobuild.locks.buildneeds import BaseTools, check_needs, needs_of_bytes
from reprobuild.locks.records import Lock, Requirement, SourceArchive, SourcePin, quoted
from reprobuild.locks.wheels import cache_root

__all__ = [
    "ARCHIVE_MTIME",
    "SKIPPED",
    "Packed",
    "archive_git",
    "archive_name",
    "archive_path",
    "archive_sources",
    "pack_git",
    "pack_path",
    "with_archives",
]

# 1980-01-01T00:00:00Z: the earliest time a zip (and so a wheel) can hold.
ARCHIVE_MTIME = 315532800
SKIPPED = frozenset(
    {
        ".git",
        ".hg",
        ".svn",
        "__pycache__",
        ".tox",
        ".nox",
        ".mypy_cache",
        ".pytest_cache",
        ".ruff_cache",
    }
)
# Left out only at the top of the package's folder (a subpackage may be named `build`).
SKIPPED_AT_TOP = frozenset({".venv", "venv", "node_modules", "build", "dist"})
# The largest archive made (a project folder with data in it is not a package).
MAX_ARCHIVE_BYTES = 512 << 20
_GIT_TIMEOUT_S = 600


def archive_name(pin: SourcePin) -> str:
    """``<name>-<version>.tar.gz``, the name as PEP 625 spells an sdist's."""
    return f"{pin.name.replace('-', '_')}-{pin.version}.tar.gz"


class Packed(NamedTuple):
    """A source archive made in memory: its file name and bytes (nothing written yet)."""

    filename: str
    data: bytes

    @property
    def sha256(self) -> str:
        return "sha256:" + hashlib.sha256(self.data).hexdigest()


def archive_sources(lock: Lock, project: Path, dest: Path, base: BaseTools | None = None) -> Lock:
    """``lock`` with each of its source pins packed into ``dest`` (as ``<sha256 hex>/<file>``,
    so the same bytes land once) and added to its requirements as one built from a
    :class:`SourceArchive` (``local``), the pins cleared. ``project`` is the folder paths are
    relative to (the lock's). With ``base``, each archive is first checked against what the
    base can build (:func:`~reprobuild.locks.buildneeds.check_needs`). Every archive is made
    and checked in memory before the first is written: a refusal leaves nothing behind."""
    if not lock.source_pins:
        return lock
    packed: list[tuple[SourcePin, Packed]] = []
    for pin in lock.source_pins:
        if pin.kind == "git":
            # a commit never changes: one packed before is taken from dest, with no fetch
            packed.append((pin, _packed_before(pin, dest) or pack_git(pin, lock.path)))
        else:
            packed.append((pin, pack_path(pin, project, lock.path)))
    if base is not None:
        for pin, archive in packed:
            check_needs(
                needs_of_bytes(archive.filename, archive.data),
                base,
                lock.path,
                pin.line,
                f"{pin.name} {pin.version}",
            )
    added: list[Requirement] = []
    for pin, archive in packed:
        source = _write(archive, dest)
        if pin.kind == "git":
            _remember(pin, source, dest)
        added.append(
            Requirement(
                name=pin.name,
                version=pin.version,
                hashes=(source.sha256,),
                line=pin.line,
                source=replace(source, origin=pin.describe()),
            )
        )
    requirements = sorted([*lock.requirements, *added], key=lambda r: (r.name, r.marker or ""))
    return replace(lock, requirements=tuple(requirements), source_pins=())


def _git_key(pin: SourcePin) -> str:
    text = "\n".join((pin.location, pin.commit or "", pin.subdirectory or "", archive_name(pin)))
    return hashlib.sha256(text.encode()).hexdigest()


def _packed_before(pin: SourcePin, dest: Path) -> Packed | None:
    """The archive of ``pin``'s commit made earlier into ``dest`` (its bytes checked against
    the sha256 recorded then), or None."""
    index = dest / "git" / _git_key(pin)
    try:
        hexdigest = index.read_text(encoding="ascii").strip()
        data = (dest / hexdigest / archive_name(pin)).read_bytes()
    except (OSError, UnicodeDecodeError):
        return None
    found = Packed(archive_name(pin), data)
    return found if found.sha256 == f"sha256:{hexdigest}" else None


def _remember(pin: SourcePin, source: SourceArchive, dest: Path) -> None:
    index = dest / "git" / _git_key(pin)
    index.parent.mkdir(parents=True, exist_ok=True)
    partial = index.with_name(f".{index.name}.partial")
    partial.write_text(source.hex + "\n", encoding="ascii")
    partial.replace(index)


def with_archives(lock: Lock, base: BaseTools | None = None) -> Lock:
    """:func:`archive_sources` into the host's cache (``packed/`` beside the wheels'), paths
    relative to the lock's folder: what ``init``, ``build-lock``, ``render`` and ``image`` do."""
    return archive_sources(lock, lock.path.parent, cache_root() / "packed", base)


def archive_git(pin: SourcePin, dest: Path, lock_path: Path) -> SourceArchive:
    """:func:`pack_git`, written into ``dest``."""
    return replace(_write(pack_git(pin, lock_path), dest), origin=pin.describe())


def archive_path(pin: SourcePin, project: Path, dest: Path, lock_path: Path) -> SourceArchive:
    """:func:`pack_path`, written into ``dest``."""
    return replace(_write(pack_path(pin, project, lock_path), dest), origin=pin.describe())


def pack_git(pin: SourcePin, lock_path: Path) -> Packed:
    """Fetch ``pin``'s repository at its commit and pack that tree."""
    if pin.kind != "git" or pin.commit is None:
        raise ValueError(f"{pin.name} is not a git pin")
    line = pin.line or None
    with tempfile.TemporaryDirectory(prefix="reprobuild-git-") as tmp:
        repo = Path(tmp) / "repo.git"
        _git(("init", "--quiet", "--bare", str(repo)), None, pin, lock_path)
        fetched = _git_ok(
            ("fetch", "--quiet", "--depth", "1", "--no-tags", "--", pin.location, pin.commit),
            repo,
        )
        if not fetched:  # a server that refuses a commit by id: fetch its branches and tags
            _git(
                (
                    "fetch",
                    "--quiet",
                    "--no-tags",
                    "--",
                    pin.location,
                    "+refs/heads/*:refs/remotes/origin/*",
                    "+refs/tags/*:refs/tags/*",
                ),
                repo,
                pin,
                lock_path,
            )
        kind = _git_ok(("cat-file", "-t", pin.commit), repo, capture=True)
        if kind != "commit":
            raise LockfileError(
                lock_path,
                line,
                f"package {pin.name}: commit {pin.commit} is not in git {quoted(pin.location)}",
                hint="relock: the commit was rewritten away or the URL changed",
            )
        tree = pin.commit + (f":{pin.subdirectory}" if pin.subdirectory else "")
        tar_bytes = _git(("archive", "--format=tar", tree), repo, pin, lock_path, raw=True)
    members = _members_of_tar(tar_bytes)
    if not members:
        raise LockfileError(
            lock_path, line, f"package {pin.name}: git {pin.describe()} holds no files"
        )
    return _pack(pin, members, lock_path)


def pack_path(pin: SourcePin, project: Path, lock_path: Path) -> Packed:
    """Pack the project folder ``pin.location`` (relative to ``project``)."""
    line = pin.line or None
    root = project.resolve()
    top = project / pin.location
    label = f"package {pin.name}: path {quoted(pin.location)}"
    try:
        resolved = top.resolve(strict=True)
    except OSError:
        raise LockfileError(lock_path, line, f"{label} does not exist") from None
    if resolved != root and root not in resolved.parents:
        raise LockfileError(
            lock_path,
            line,
            f"{label} resolves to {quoted(str(resolved))}, outside the project: only a folder "
            "inside it",
            hint="move the package into the project, or publish it and lock it from an index",
        )
    if not resolved.is_dir():
        raise LockfileError(lock_path, line, f"{label} is not a folder")
    members: list[tuple[str, bytes | None, bool, str | None]] = []
    for entry in _walk(resolved):
        rel = entry.relative_to(resolved).as_posix()
        info = entry.lstat()
        if stat.S_ISLNK(info.st_mode):
            target = os.readlink(entry)
            where = (entry.parent / target).resolve()
            if where != root and root not in where.parents:
                raise LockfileError(
                    lock_path,
                    line,
                    f"{label}: symlink {quoted(rel)} leads outside the project "
                    f"({quoted(target)}): only links inside it",
                )
            if where != resolved and resolved not in where.parents:
                raise LockfileError(
                    lock_path,
                    line,
                    f"{label}: symlink {quoted(rel)} leads outside the package's folder "
                    f"({quoted(target)}): the archive would miss its target",
                )
            members.append((rel, None, False, os.path.relpath(where, entry.parent)))
        elif stat.S_ISREG(info.st_mode):
            members.append((rel, _read_regular(entry), bool(info.st_mode & 0o111), None))
        else:
            raise LockfileError(
                lock_path, line, f"{label}: {quoted(rel)} is not a regular file or a symlink"
            )
    if not members:
        raise LockfileError(lock_path, line, f"{label} holds no files")
    return _pack(pin, members, lock_path)


def _walk(top: Path) -> list[Path]:
    found: list[Path] = []

    def fail(exc: OSError) -> None:
        raise exc

    for dirpath, dirnames, filenames in os.walk(top, onerror=fail):
        here = Path(dirpath)
        top_level = here == top
        dirnames[:] = sorted(
            d
            for d in dirnames
            if d not in SKIPPED
            and not (top_level and (d in SKIPPED_AT_TOP or d.endswith(".egg-info")))
        )
        found.extend(here / d for d in dirnames if (here / d).is_symlink())
        found.extend(here / n for n in filenames if not n.endswith((".pyc", ".pyo")))
    return sorted(found)


def _read_regular(path: Path) -> bytes:
    fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | getattr(os, "O_CLOEXEC", 0))
    with os.fdopen(fd, "rb") as fh:
        return fh.read()


def _members_of_tar(data: bytes) -> list[tuple[str, bytes | None, bool, str | None]]:
    """``git archive``'s tar as (path, content, executable, symlink target) entries."""
    out: list[tuple[str, bytes | None, bool, str | None]] = []
    with tarfile.open(fileobj=io.BytesIO(data), mode="r:") as tar:
        for info in tar.getmembers():
            if info.isdir():
                continue
            name = info.name.removeprefix("./")
            if name.startswith("/") or ".." in name.split("/"):
                continue  # git never writes these; nothing outside the archive's folder
            if info.issym():
                out.append((name, None, False, info.linkname))
            elif info.isfile():
                handle = tar.extractfile(info)
                content = handle.read() if handle is not None else b""
                out.append((name, content, bool(info.mode & 0o111), None))
    return sorted(out)


def _pack(
    pin: SourcePin,
    members: Iterable[tuple[str, bytes | None, bool, str | None]],
    lock_path: Path,
) -> Packed:
    """The deterministic ``.tar.gz`` of ``members`` under ``<name>-<version>/``."""
    filename = archive_name(pin)
    prefix = filename.removesuffix(".tar.gz")
    raw = io.BytesIO()
    with tarfile.open(fileobj=raw, mode="w", format=tarfile.PAX_FORMAT) as tar:
        folders: set[str] = set()
        for rel, content, executable, link in sorted(members):
            parts = rel.split("/")
            for depth in range(1, len(parts)):
                folder = "/".join(parts[:depth])
                if folder not in folders:
                    folders.add(folder)
                    tar.addfile(_info(f"{prefix}/{folder}", tarfile.DIRTYPE, 0o755))
            if link is not None:
                info = _info(f"{prefix}/{rel}", tarfile.SYMTYPE, 0o777)
                info.linkname = link
                tar.addfile(info)
            else:
                data = content or b""
                info = _info(f"{prefix}/{rel}", tarfile.REGTYPE, 0o755 if executable else 0o644)
                info.size = len(data)
                tar.addfile(info, io.BytesIO(data))
    packed = io.BytesIO()
    with gzip.GzipFile(filename="", mode="wb", fileobj=packed, mtime=0, compresslevel=9) as gz:
        gz.write(raw.getvalue())
    data = packed.getvalue()
    if len(data) > MAX_ARCHIVE_BYTES:
        raise LockfileError(
            lock_path,
            pin.line or None,
            f"package {pin.name}: {pin.describe()} packs to {len(data)} bytes, over the "
            f"{MAX_ARCHIVE_BYTES >> 20} MiB a source package may have",
        )
    return Packed(filename, data)


def _write(archive: Packed, dest: Path) -> SourceArchive:
    """Write ``archive`` as ``dest/<sha256 hex>/<file name>`` (atomically; kept if there)."""
    sha256 = archive.sha256
    folder = dest / sha256.split(":", 1)[1]
    target = folder / archive.filename
    if not target.is_file() or target.read_bytes() != archive.data:
        folder.mkdir(parents=True, exist_ok=True)
        partial = folder / f".{archive.filename}.partial"
        partial.write_bytes(archive.data)
        partial.replace(target)
    return SourceArchive(filename=archive.filename, sha256=sha256, local=target)


def _info(name: str, kind: bytes, mode: int) -> tarfile.TarInfo:
    info = tarfile.TarInfo(name)
    info.type = kind
    info.mode = mode
    info.mtime = ARCHIVE_MTIME
    info.uid = info.gid = 0
    info.uname = info.gname = ""
    return info


def _git_env() -> dict[str, str]:
    """git with no configuration but its own, no prompt, and only https, ssh and file."""
    env = {
        key: value
        for key, value in os.environ.items()
        if key in ("PATH", "HOME", "SSH_AUTH_SOCK", "LANG", "LC_ALL", "TMPDIR")
    }
    env.update(
        {
            "GIT_CONFIG_NOSYSTEM": "1",
            "GIT_CONFIG_GLOBAL": os.devnull,
            "GIT_TERMINAL_PROMPT": "0",
            "GIT_ALLOW_PROTOCOL": "https:ssh:file",
            "GIT_PROTOCOL_FROM_USER": "0",
        }
    )
    return env


def _run(args: tuple[str, ...], repo: Path | None) -> subprocess.CompletedProcess[bytes]:
    prefix = ["git", "-c", "protocol.allow=never"]
    prefix += ["-c", "protocol.https.allow=always"]
    prefix += ["-c", "protocol.ssh.allow=always", "-c", "protocol.file.allow=always"]
    if repo is not None:
        prefix += ["-C", str(repo)]
    return subprocess.run(
        [*prefix, *args],
        capture_output=True,
        env=_git_env(),
        timeout=_GIT_TIMEOUT_S,
        check=False,
        stdin=subprocess.DEVNULL,
    )


def _git_ok(args: tuple[str, ...], repo: Path, *, capture: bool = False) -> str | None:
    """Run git; its stdout stripped (``capture``) or ``"ok"``, None when it failed."""
    try:
        proc = _run(args, repo)
    except (OSError, subprocess.TimeoutExpired):
        return None
    if proc.returncode != 0:
        return None
    return proc.stdout.decode("utf-8", "replace").strip() if capture else "ok"


def _git(
    args: tuple[str, ...],
    repo: Path | None,
    pin: SourcePin,
    lock_path: Path,
    *,
    raw: bool = False,
) -> bytes:
    """Run git or refuse in one line naming the package and git's last line of complaint."""
    try:
        proc = _run(args, repo)
    except FileNotFoundError:
        raise LockfileError(
            lock_path,
            pin.line or None,
            f"package {pin.name} comes from git, and git is not installed on this host",
            hint="install git (apt-get install git)",
        ) from None
    except subprocess.TimeoutExpired:
        raise LockfileError(
            lock_path,
            pin.line or None,
            f"package {pin.name}: git {args[0]} of {quoted(pin.location)} took over "
            f"{_GIT_TIMEOUT_S} s",
        ) from None
    if proc.returncode != 0:
        said = proc.stderr.decode("utf-8", "replace").strip().splitlines()
        last = said[-1] if said else f"exit status {proc.returncode}"
        raise LockfileError(
            lock_path,
            pin.line or None,
            f"package {pin.name}: git {args[0]} of {quoted(pin.location)} failed: "
            f"{quoted(last, 120)}",
            hint="check the URL is reachable from this host (and your ssh key or netrc)",
        )
    return proc.stdout if raw else b""
