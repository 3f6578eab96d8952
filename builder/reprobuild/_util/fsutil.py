"""Atomic writes: a reader sees the old file or the new one, never half of either."""

from __future__ import annotations

import errno
import hashlib
import os
import shutil
import tempfile
from pathlib import Path

from reprobuild.errors import WriteError


def write_atomic(
    path: Path, data: bytes | str, *, mode: int = 0o644, what: str | None = None
) -> None:
    """Write ``data`` to ``path`` through a temp file in the same directory, then rename.

    ``what`` (e.g. "the base lock"): an OSError (a read-only project, a full disk) becomes one
    :class:`~reprobuild.errors.WriteError` naming it and ``path``; without it the OSError is
    raised for the caller to word."""
    if what is None:
        _write_atomic(path, data, mode)
        return
    try:
        _write_atomic(path, data, mode)
    except OSError as exc:
        raise WriteError(
            what,
            path,
            exc.strerror or str(exc),
            hint=READ_ONLY_HINT if exc.errno == errno.EROFS else None,
        ) from None


READ_ONLY_HINT = "the file system is read-only: run it where the project is writable"


def _write_atomic(path: Path, data: bytes | str, mode: int) -> None:
    payload = data.encode("utf-8") if isinstance(data, str) else data
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    try:
        with os.fdopen(fd, "wb") as fh:
            fh.write(payload)
            fh.flush()
            os.fsync(fh.fileno())
        os.chmod(tmp, mode)
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def replace_dir(staged: Path, target: Path) -> None:
    """Swap a fully written directory ``staged`` into place at ``target``.

    The old ``target`` (if any) is moved aside first and removed only after the swap, so a
    failure leaves either the old directory or the new one, never a mix.
    """
    target.parent.mkdir(parents=True, exist_ok=True)
    aside: Path | None = None
    if target.exists():
        aside = Path(tempfile.mkdtemp(prefix=f".{target.name}.old.", dir=target.parent))
        aside.rmdir()
        os.replace(target, aside)
    try:
        os.replace(staged, target)
    except BaseException:
        if aside is not None:
            os.replace(aside, target)
        raise
    if aside is not None:
        shutil.rmtree(aside, ignore_errors=True)


def sha256_file(path: Path) -> str:
    """The hex sha256 of a file's bytes, read a MiB at a time."""
    digest = hashlib.sha256()
    with path.open("rb") as fh:
        for block in iter(lambda: fh.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()
