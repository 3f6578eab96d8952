"""The build-dependency lock: what the source archives a lock selects need to build, pinned.

Neither uv.lock nor poetry.lock locks build dependencies, and pip cannot hash-check a build
environment; so for the packages a lock builds from an sdist
(:attr:`~reprobuild.locks.records.Lock.sources`), ``reprobuild init`` (and
``reprobuild build-lock``) reads each archive's ``[build-system] requires`` (setuptools'
legacy default, ``setuptools>=40.8.0`` and ``wheel``, where it has none), resolves them all
with the pinned ``uv pip compile --generate-hashes --only-binary :all:`` for the image's Python
and platform, asks each archive's build backend what more it builds with (PEP 517
``get_requires_for_build_wheel``, in a container from the pinned base: ``ask``,
:mod:`reprobuild.imaging.backendask`) with that resolution installed, and resolves again
until the answers bring nothing new; it writes the result beside the project's lock. The
image's wheel-build stage installs exactly those wheels with ``--require-hashes
--no-index``; nothing floats at build time.

The file's header records the sha256 of what it was made for (the image's Python and every
source archive's name, version and sha256; a project folder's by its build requirements, so
editing a workspace member's code keeps the lock): :func:`load_build_lock` refuses a lock made
for other inputs (stale) or none at all, without any network, so ``render`` stays pure.
"""

from __future__ import annotations

import hashlib
import os
import re
import subprocess
import tarfile
import tempfile
import tomllib
import zipfile
from collections.abc import Callable, Iterable
from dataclasses import replace
from pathlib import Path
from typing import Protocol

from packaging.requirements import InvalidRequirement
from packaging.requirements import Requirement as PackagingRequirement
from packaging.utils import canonicalize_name

from reprobuild._util.resolver import failure_reason
from reprobuild.errors import ReprobuildError
from reprobuild.locks import fetchnet
from reprobuild.locks.lockfile import Lock, load_lock
from reprobuild.locks.records import HASH_ONLY_FORMATS, SourceArchive, quoted
from reprobuild.locks.wheels import PYPI_SIMPLE

BUILD_LOCK_NAME = "build-requirements.lock"
# What pip and build assume for an sdist whose pyproject.toml names no build system.
LEGACY_REQUIRES = ("setuptools>=40.8.0", "wheel")
UV_PLATFORM = "x86_64-manylinux_2_28"
_KEY_LINE = "# reprobuild build lock for: "
# One line per sdist found on the index for a lock that gives hashes only (requirements,
# Pipfile.lock): what render reads to know the package is built, with no network.
_SDIST_LINE = "# reprobuild sdist: "
_SDIST_RE = re.compile(
    r"^# reprobuild sdist: (?P<name>\S+)==(?P<version>\S+) (?P<file>\S+) "
    r"(?P<sha>sha256:[0-9a-f]{64})[ \t]*\r?$",
    re.M,
)
_KEY_RE = re.compile(r"^# reprobuild build lock for: (sha256:[0-9a-f]{64})[ \t]*\r?$", re.M)
# A pyproject.toml is a few kB: anything near this is not one.
_MAX_PYPROJECT = 1 << 20


class BuildLockError(ReprobuildError):
    """The build-dependency lock is missing, stale or cannot be made."""


def refresh_hint(directory: Path | str) -> str:
    return f"write it: reprobuild build-lock {directory}"


def inputs_key(lock: Lock, python: str) -> str:
    """The sha256 of what a build lock is made for: the image's Python (X.Y) and each source
    archive (name, version, and its sha256, or for one packed from a project folder its
    ``[build-system] requires``), sorted."""
    python = ".".join(python.split(".")[:2])
    lines = [f"python {python}", f"platform {UV_PLATFORM}"]
    lines += sorted(_input_line(r.name, r.version, r.source) for r in lock.sources if r.source)
    return "sha256:" + hashlib.sha256("\n".join(lines).encode()).hexdigest()


def _input_line(name: str, version: str, source: SourceArchive) -> str:
    """An sdist or a git commit by its bytes (they never change); a workspace member or path
    source by what it builds with: its code is edited every day, and an edit that leaves its
    build requirements alone must not make the build lock stale."""
    if source.local is not None and (source.origin or "").startswith("path "):
        requires = ", ".join(sorted(build_requires(source.local)))
        return f"{name}=={version} {source.origin} builds with {requires}"
    return f"{name}=={version} {source.sha256}"


def build_requires(archive: Path) -> tuple[str, ...]:
    """The ``[build-system] requires`` of the sdist (``.tar.gz`` or ``.zip``) at ``archive``,
    read from its top folder's ``pyproject.toml``; the legacy default where it has none."""
    data = sdist_member(archive, "pyproject.toml")
    if data is None:
        return LEGACY_REQUIRES
    try:
        doc = tomllib.loads(data.decode("utf-8-sig"))
    except (UnicodeDecodeError, tomllib.TOMLDecodeError) as exc:
        raise BuildLockError(
            f"{archive.name}: its pyproject.toml is not valid TOML ({str(exc)[:80]})"
        ) from None
    system = doc.get("build-system")
    if not isinstance(system, dict) or "requires" not in system:
        return LEGACY_REQUIRES
    requires = system["requires"]
    if not isinstance(requires, list) or not all(isinstance(r, str) for r in requires):
        raise BuildLockError(f"{archive.name}: [build-system] requires is not a list of strings")
    for text in requires:
        try:
            PackagingRequirement(text)
        except InvalidRequirement:
            raise BuildLockError(
                f"{archive.name}: build requirement {quoted(text)} is not a valid requirement"
            ) from None
    return tuple(requires)


def sdist_member(archive: Path, name: str) -> bytes | None:
    """The bytes of ``<top folder>/name`` in an sdist; None when it has none."""
    try:
        if archive.name.endswith(".zip"):
            with zipfile.ZipFile(archive) as zf:
                for info in zf.infolist():
                    parts = info.filename.split("/")
                    if len(parts) == 2 and parts[1] == name and info.file_size <= _MAX_PYPROJECT:
                        return zf.read(info)
            return None
        with tarfile.open(archive, "r:gz") as tf:
            for member in tf:
                parts = member.name.lstrip("./").split("/")
                if len(parts) == 2 and parts[1] == name and member.isfile():
                    if member.size > _MAX_PYPROJECT:
                        return None
                    handle = tf.extractfile(member)
                    return handle.read() if handle is not None else None
        return None
    except (OSError, tarfile.TarError, zipfile.BadZipFile) as exc:
        raise BuildLockError(f"{archive.name}: cannot read the source archive: {exc}") from None


class Ask(Protocol):
    """What a sdist's build backend asks for at build time (PEP 517
    ``get_requires_for_build_wheel``), asked with the hashed pins of ``pins`` installed:
    :class:`reprobuild.imaging.backendask.BackendAsker`."""

    def __call__(self, archive: Path, pins: Path) -> tuple[str, ...]: ...


# Rounds of resolve-then-ask before a backend that keeps asking for more is refused.
MAX_ROUNDS = 4


def compile_build_lock(
    lock: Lock,
    python: str,
    archives: dict[str, Path],
    uv: str,
    *,
    ask: Ask,
    log: Callable[[str], None] = print,
) -> str:
    """The build lock's text for ``lock``'s source archives (``archives``: name -> the fetched,
    hash-checked file) on CPython ``python``: the header, then ``uv pip compile``'s pins of
    each archive's ``[build-system] requires`` and of what its backend asks for (``ask``),
    asked again with each new resolution installed until the answers bring nothing new."""
    python = ".".join(python.split(".")[:2])
    static = {r.name: build_requires(archives[r.name]) for r in lock.sources}
    wanted = _union(static.values())
    asked: dict[str, tuple[str, ...]] = {}
    count = len(lock.sources)
    log(
        f"resolving the build requirements of {count} sdist{'' if count == 1 else 's'} "
        f"for CPython {python}"
    )
    with tempfile.TemporaryDirectory(prefix="reprobuild-buildlock-") as tmp:
        pins_path = Path(tmp) / BUILD_LOCK_NAME
        for _round in range(MAX_ROUNDS):
            pins = _compile(lock, python, uv, wanted, Path(tmp), asked)
            pins_path.write_text(pins)
            asked = {r.name: ask(archives[r.name], pins_path) for r in lock.sources}
            more = _union(asked.values()) - wanted
            if not more:
                break
            log(f"the build backends ask for {', '.join(sorted(more))}: resolving again")
            wanted |= more
        else:
            raise BuildLockError(
                f"the build backends of {_askers(lock, asked, more)} still ask for "
                f"{', '.join(sorted(more))} after {MAX_ROUNDS} rounds of resolving what they "
                "asked for"
            )
    notes = []
    for req in lock.sources:
        notes.append(f"# {req.name}=={req.version} builds with: {', '.join(static[req.name])}")
        if asked[req.name]:
            notes.append(
                f"# {req.name}=={req.version}'s build backend asks for: "
                + ", ".join(asked[req.name])
            )
    header = [
        f"# Build dependencies of the sdists {lock.path.name} selects, for CPython {python} "
        f"on {UV_PLATFORM}.",
        "# Written by reprobuild (init, `reprobuild build-lock`) with uv pip compile "
        "--generate-hashes; do not edit.",
        f"{_KEY_LINE}{inputs_key(lock, python)}",
        *_sdist_lines(lock),
        *notes,
    ]
    return "\n".join(header) + "\n" + pins.rstrip("\n") + "\n"


def _union(groups: Iterable[Iterable[str]]) -> set[str]:
    return {text for group in groups for text in group}


def _askers(lock: Lock, asked: dict[str, tuple[str, ...]], wanted: set[str]) -> str:
    """The sdists (file names) whose backends asked for any of ``wanted``."""
    names = [
        r.source.filename
        for r in lock.sources
        if r.source is not None and wanted & set(asked.get(r.name, ()))
    ]
    return ", ".join(names) or "the sdists"


def _compile(
    lock: Lock,
    python: str,
    uv: str,
    wanted: set[str],
    tmp: Path,
    asked: dict[str, tuple[str, ...]],
) -> str:
    """``uv pip compile``'s hashed pins of ``wanted``; one line when they cannot be resolved,
    naming what a backend asked for (``asked``) and its sdist where that is what failed."""
    argv = [
        uv, "pip", "compile", "--generate-hashes", "--no-header", "--no-annotate",
        "--only-binary", ":all:", "--python-version", python, "--python-platform", UV_PLATFORM,
    ]  # fmt: skip
    argv += _build_sources(lock)
    source = tmp / "build-requirements.in"
    source.write_text("\n".join(sorted(wanted)) + "\n")
    try:
        proc = subprocess.run(
            [*argv, str(source)],
            capture_output=True,
            text=True,
            check=False,
            timeout=600,
            env=fetchnet.isolated_env(),
        )
    except FileNotFoundError:
        raise BuildLockError(f"cannot run the resolver {uv!r}: not found") from None
    except subprocess.TimeoutExpired:
        raise BuildLockError("resolving the build requirements took over 10 minutes") from None
    if proc.returncode == 0:
        return proc.stdout
    reason = failure_reason(proc.stderr, proc.returncode).removeprefix("error: ")
    dynamic = _union(asked.values())
    if dynamic:
        failing = {t for t in dynamic if _named_in(t, reason)} or dynamic
        raise BuildLockError(
            f"cannot resolve {', '.join(sorted(failing))}, which the build backend of "
            f"{_askers(lock, asked, failing)} asks for (get_requires_for_build_wheel), for "
            f"CPython {python} on {UV_PLATFORM}: {reason}",
            hint="the backend asks for what the lock's index does not have as a wheel",
        )
    raise BuildLockError(
        f"cannot resolve the build requirements {', '.join(sorted(wanted))} for CPython "
        f"{python} on {UV_PLATFORM}: {reason}",
        hint="check the sdists' [build-system] requires are on the lock's index as wheels",
    )


def _named_in(requirement: str, text: str) -> bool:
    """Whether uv's reason names the requirement's project (PEP 503 names compared)."""
    name = canonicalize_name(PackagingRequirement(requirement).name)
    words = {canonicalize_name(w) for w in re.findall(r"[A-Za-z0-9][A-Za-z0-9._-]*", text)}
    return name in words


def _build_sources(lock: Lock) -> list[str]:
    """Where the build requirements are resolved from: a native lock's default index alone
    (PyPI where any package comes from it): an index its packages are pinned to, such as
    PyTorch's (uv's `explicit = true`, Poetry's `priority = "explicit"`), serves those only,
    not setuptools or wheel. Other locks: every index the lock names, as pip reads them. Then
    the lock's --find-links and ``REPROBUILD_FIND_LINKS`` folders."""
    options = lock.options
    native = any(r.index is not None for r in lock.requirements)
    argv: list[str] = []
    if options.index_url is not None:
        argv += ["--index-url", options.index_url]
    for url in () if native else options.extra_index_urls:
        argv += ["--extra-index-url", url]
    for link in (*options.find_links, *fetchnet.find_links()):
        argv += ["--find-links", link]
    return argv


def _sdist_lines(lock: Lock) -> list[str]:
    """The header's record of the sdists found on the index for a hash-only lock."""
    if lock.format not in HASH_ONLY_FORMATS:
        return []
    return [
        f"{_SDIST_LINE}{r.name}=={r.version} {r.source.filename} {r.source.sha256}"
        for r in lock.sources
        if r.source is not None and r.source.index is not None
    ]


def with_located_sdists(lock: Lock, path: Path | None, directory: Path) -> Lock:
    """``lock`` with the sdists its build lock ``path`` records (a requirements file or a
    Pipfile.lock gives hashes only: which of them is an sdist was found on the index when the
    build lock was written) made the packages to build, with no network. A record the lock
    no longer matches (another version, the hash gone) is a stale build lock, in one line.
    Other formats, and a missing build lock, come back as they are."""
    if lock.format not in HASH_ONLY_FORMATS or path is None:
        return lock
    try:
        text = path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError):
        return lock  # load_build_lock says why, where the lock needs one
    records = {m["name"]: m for m in _SDIST_RE.finditer(text)}
    if not records:
        return lock
    index = lock.options.index_url or PYPI_SIMPLE
    out = []
    for req in lock.requirements:
        record = records.pop(req.name, None)
        if record is None or req.source is not None:
            out.append(req)
            continue
        if record["version"] != req.version or record["sha"] not in req.hashes:
            raise BuildLockError(
                f"build_lock {path.name} is stale: it builds {req.name} {record['version']} "
                f"from {record['file']} ({record['sha']}), which {lock.path.name} does not lock",
                hint=refresh_hint(directory),
            )
        try:
            source = SourceArchive(filename=record["file"], sha256=record["sha"], index=index)
        except ValueError as exc:
            raise BuildLockError(f"build_lock {path.name}: {exc}") from None
        out.append(replace(req, hashes=(source.sha256,), source=source))
    if records:
        name = sorted(records)[0]
        raise BuildLockError(
            f"build_lock {path.name} is stale: it builds {name}, which {lock.path.name} does "
            "not lock",
            hint=refresh_hint(directory),
        )
    return replace(lock, requirements=tuple(out))


def load_build_lock(path: Path | None, lock: Lock, python: str, directory: Path) -> Lock | None:
    """The build lock ``path`` for ``lock`` on CPython ``python``, checked to be the one made
    for these inputs; None when ``lock`` builds nothing. One line when missing or stale."""
    if not lock.sources:
        return None
    first = lock.sources[0]
    count = len(lock.sources)
    what = f"{lock.path.name} builds {count} package{'' if count == 1 else 's'} from "
    what += f"{'its sdist' if count == 1 else 'their sdists'} "
    what += f"({first.name} {first.version}{', ...' if len(lock.sources) > 1 else ''})"
    if path is None:
        raise BuildLockError(
            f"{what} and reprobuild.yaml names no build_lock "
            f"({'its' if count == 1 else 'their'} pinned build requirements)",
            hint=refresh_hint(directory),
        )
    try:
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        raise BuildLockError(
            f"{what}, and its build_lock {path.name} does not exist", hint=refresh_hint(directory)
        ) from None
    except (OSError, UnicodeDecodeError) as exc:
        raise BuildLockError(f"build_lock {path}: cannot read it: {exc}") from None
    found = _KEY_RE.search(text)
    want = inputs_key(lock, python)
    if found is None or found.group(1) != want:
        raise BuildLockError(
            f"build_lock {path.name} is stale: it was not made for the sdists {lock.path.name} "
            f"selects on CPython {'.'.join(python.split('.')[:2])}",
            hint=refresh_hint(directory),
        )
    return load_lock(path)


def write_build_lock(path: Path, text: str) -> None:
    """Write ``text`` to ``path`` through a temp file and a rename (never half a file)."""
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as fh:
            fh.write(text)
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
