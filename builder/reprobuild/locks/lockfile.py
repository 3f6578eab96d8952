"""Lockfiles: hashed requirements files and PEP 751 ``pylock.toml`` in, pinned records out.

Every :class:`Requirement` that leaves this module is pinned to one exact version, carries at
least one sha256 hash (sha384/sha512 may be given beside it: hermetic builds match cached
wheels by sha256), and is made only of
characters that cannot break out of a requirements file, a Dockerfile or a shell word.
Anything else is refused with a one-line :class:`~reprobuild.errors.LockfileError` that names
``file:line``, quotes the offending text, and says what is allowed instead.

These formats are read, chosen by the file's name:

* the requirements format that ``pip-compile --generate-hashes``,
  ``uv pip compile --generate-hashes`` and ``uv export`` write (any other name);
* PEP 751 ``pylock.toml`` / ``pylock.<name>.toml`` (``lock-version = "1.0"``), wheels only;
* the native locks ``uv.lock``, ``poetry.lock``, ``Pipfile.lock`` and ``pdm.lock``, read for
  one platform and one choice of extras and groups (a
  :class:`~reprobuild.locks.native.Selection`; by default CPython 3.11 on linux x86_64 and the
  main dependencies only).

:meth:`Lock.render` writes either back as one canonical requirements text for pip's
hash-checking mode.
"""

from __future__ import annotations

import hashlib
from pathlib import Path

from reprobuild._util.boundedread import read_small_file
from reprobuild.errors import LockfileError
from reprobuild.locks.native import Selection
from reprobuild.locks.pdmlock import parse_pdmlock
from reprobuild.locks.pipfilelock import parse_pipfilelock
from reprobuild.locks.poetrylock import parse_poetrylock
from reprobuild.locks.pylock import parse_pylock
from reprobuild.locks.records import (
    REGENERATE_HINT,
    IndexOptions,
    Lock,
    LockChoice,
    LockFormat,
    Requirement,
    decode_lock,
)
from reprobuild.locks.requirements import parse_requirements
from reprobuild.locks.uvlock import parse_uvlock

__all__ = [
    "IndexOptions",
    "Lock",
    "LockChoice",
    "LockFormat",
    "Requirement",
    "Selection",
    "format_of",
    "is_pylock_name",
    "load_lock",
    "parse_lock_bytes",
    "parse_pylock",
    "parse_requirements",
]


# The largest real locks are a few hundred KiB; a file past this is not a lock.
LOCK_MAX_BYTES = 16 << 20


def is_pylock_name(path: Path) -> bool:
    """True for ``pylock.toml`` and ``pylock.<name>.toml`` (PEP 751 file names)."""
    name = path.name
    return name == "pylock.toml" or (
        name.startswith("pylock.") and name.endswith(".toml") and len(name) > len("pylock..toml")
    )


# The native locks, by the file name their tool writes.
NATIVE_NAMES: dict[str, LockFormat] = {
    "uv.lock": "uv",
    "poetry.lock": "poetry",
    "Pipfile.lock": "pipfile",
    "pdm.lock": "pdm",
}


def format_of(path: Path) -> LockFormat:
    """The lock format a file name stands for (a hashed requirements file by default)."""
    path = Path(path)
    if is_pylock_name(path):
        return "pylock"
    return NATIVE_NAMES.get(path.name, "requirements")


def load_lock(path: Path, selection: Selection | None = None) -> Lock:
    """Read and validate the lockfile at ``path`` (format chosen by its file name; a native
    lock is read for ``selection``, by default CPython 3.11 on linux x86_64, main only)."""
    path = Path(path)

    def fail(problem: str) -> LockfileError:
        if problem.startswith("is a directory"):
            return LockfileError(
                path, None, "is a directory, not a lockfile", hint="point at the lockfile itself"
            )
        return LockfileError(path, None, problem)

    try:
        data = read_small_file(path, LOCK_MAX_BYTES, fail)
    except FileNotFoundError as exc:
        raise LockfileError(path, None, "lockfile not found", hint=REGENERATE_HINT) from exc
    return parse_lock_bytes(data, path, selection=selection)


def parse_lock_bytes(
    data: bytes, path: Path, fmt: LockFormat | None = None, selection: Selection | None = None
) -> Lock:
    """Validate ``data`` as the lockfile named ``path`` (``fmt`` defaults from the name).

    A poetry.lock is checked against the ``pyproject.toml`` beside ``path`` (its roots, and
    its content-hash to refuse a stale lock)."""
    path = Path(path)
    if fmt is None:
        fmt = format_of(path)
    text = decode_lock(data, path)
    notes: tuple[str, ...] = ()
    choice: LockChoice | None = None
    if fmt in NATIVE_NAMES.values():
        chosen = selection or Selection()
        choice = LockChoice(chosen.extras, chosen.groups, chosen.default_groups)
    if fmt == "pylock":
        requirements, options = parse_pylock(text, path)
    elif fmt == "uv":
        requirements, options, notes = parse_uvlock(text, path, selection)
    elif fmt == "poetry":
        requirements, options, notes = parse_poetrylock(text, path, selection)
    elif fmt == "pipfile":
        requirements, options, notes = parse_pipfilelock(text, path, selection)
    elif fmt == "pdm":
        requirements, options, notes = parse_pdmlock(text, path, selection)
    else:
        requirements, options = parse_requirements(text, path)
    return Lock(
        path=path,
        sha256=hashlib.sha256(data).hexdigest(),
        format=fmt,
        requirements=requirements,
        options=options,
        notes=notes,
        choice=choice,
    )
