"""The declared output files of each run (``--output``): found, hashed and compared.

A run's program owns its output directory and may have put anything there: a declared path,
or a directory on the way to it, that is a symbolic link is refused (verify never follows a
link out of the run's own directory, into the host's files); links inside a declared
directory are skipped, never followed; anything but a regular file is left out. Every file is
opened relative to a directory descriptor with ``O_NOFOLLOW``, so a link swapped in after the
check is not followed either."""

from __future__ import annotations

import errno
import hashlib
import os
import stat
from collections.abc import Iterator, Sequence
from dataclasses import replace
from pathlib import Path
from typing import Any

from reprobuild.checks.runrecords import RecordReadError, parse_bounded_json
from reprobuild.checks.streams import (
    Divergence,
    diff_json,
    first_line_difference,
    json_text,
    line_divergence,
)
from reprobuild.checks.verify.report import FileDigest
from reprobuild.errors import VerifyError
from reprobuild_entrypoint.contract import OUT_DIR

TEXT_LIMIT = 32 * 1024 * 1024
"""Output files up to this size are diffed as JSON or text; larger ones byte by byte."""
MAX_OUTPUT_FILES = 100_000
"""More files than this under the declared outputs of one run is refused."""
MAX_FILE_BYTES = 1 << 40
"""A single output file larger than this (1 TiB) is refused rather than hashed for hours."""
_DIR_FLAGS = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC
_FILE_FLAGS = os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC


class UnsafeOutputError(VerifyError):
    """A declared output that verify will not read: a symbolic link, or too much."""


def _digest_fd(fd: int) -> FileDigest:
    digest = hashlib.sha256()
    size = 0
    while chunk := os.read(fd, 1 << 20):
        digest.update(chunk)
        size += len(chunk)
    return FileDigest(digest.hexdigest(), size)


def _is_link(name: str, dir_fd: int) -> bool:
    try:
        return stat.S_ISLNK(os.stat(name, dir_fd=dir_fd, follow_symlinks=False).st_mode)
    except OSError:
        return False


def _open_under(root_fd: int, rel: str, label: str) -> int | None:
    """A descriptor for ``rel`` under ``root_fd`` (a directory or a file), every component
    opened without following links; None when it does not exist."""
    fd = os.dup(root_fd)
    parts = [p for p in rel.split("/") if p and p != "."]
    try:
        for depth, part in enumerate(parts):
            last = depth == len(parts) - 1
            try:
                new = os.open(part, _FILE_FLAGS if last else _DIR_FLAGS, dir_fd=fd)
            except OSError as exc:
                if _is_link(part, fd):
                    where = "/".join(parts[: depth + 1])
                    raise UnsafeOutputError(
                        f"{label}/{where} is a symbolic link: verify does not follow links "
                        "out of a run's output directory",
                        hint="write the output files themselves there, not links to them",
                    ) from None
                if exc.errno in (errno.ENOENT, errno.ENOTDIR):
                    return None
                raise VerifyError(f"cannot read {label}/{rel}: {exc.strerror}") from None
            os.close(fd)
            fd = new
        result, fd = fd, -1
        return result
    finally:
        if fd >= 0:
            os.close(fd)


def _regular_files(top_fd: int, prefix: str) -> Iterator[tuple[str, int]]:
    """(relative path, open descriptor) of every regular file under the directory ``top_fd``,
    sorted; links and special files are skipped, never followed. The caller closes each fd."""
    for dirpath, dirnames, filenames, dir_fd in os.fwalk(".", dir_fd=top_fd):
        dirnames.sort()
        for filename in sorted(filenames):
            try:
                fd = os.open(filename, _FILE_FLAGS, dir_fd=dir_fd)
            except OSError:
                continue  # a link (ELOOP) or gone
            if not stat.S_ISREG(os.fstat(fd).st_mode):
                os.close(fd)
                continue
            rel = os.path.normpath(os.path.join(prefix, dirpath, filename))
            yield rel, fd


def collect_outputs(
    root: Path, outputs: Sequence[str], *, label: str = OUT_DIR
) -> dict[str, FileDigest]:
    """sha256 and size of every declared output file under ``root`` (directories: every
    regular file in them), by path relative to ``root``; missing ones are left out.
    ``label``: how messages name ``root``. Raises :class:`UnsafeOutputError` for a declared
    path through a symbolic link, too many files, or a file too large."""
    found: dict[str, FileDigest] = {}
    root_fd = os.open(root, _DIR_FLAGS)
    try:
        for name in outputs:
            rel = "." if name == "." else name.rstrip("/")
            fd = _open_under(root_fd, rel, label)
            if fd is None:
                continue
            try:
                mode = os.fstat(fd).st_mode
                if stat.S_ISDIR(mode):
                    files: Iterator[tuple[str, int]] = _regular_files(fd, rel)
                elif stat.S_ISREG(mode):
                    files = iter([(rel, os.dup(fd))])
                else:
                    continue
                for path, file_fd in files:
                    try:
                        found[path] = _checked_digest(file_fd, path, label, len(found))
                    finally:
                        os.close(file_fd)
            finally:
                os.close(fd)
    finally:
        os.close(root_fd)
    return dict(sorted(found.items()))


def _checked_digest(fd: int, path: str, label: str, count: int) -> FileDigest:
    if count >= MAX_OUTPUT_FILES:
        raise UnsafeOutputError(
            f"more than {MAX_OUTPUT_FILES} output files under {label}: verify compares at "
            "most that many",
            hint="declare fewer or narrower --output paths",
        )
    size = os.fstat(fd).st_size
    if size > MAX_FILE_BYTES:
        raise UnsafeOutputError(
            f"{label}/{path} holds {size} bytes: verify hashes files up to {MAX_FILE_BYTES} bytes"
        )
    return _digest_fd(fd)


def _first_byte_difference(a: Path, b: Path) -> int | None:
    offset = 0
    with a.open("rb") as fa, b.open("rb") as fb:
        while True:
            ca, cb = fa.read(1 << 20), fb.read(1 << 20)
            if ca != cb:
                for i, (x, y) in enumerate(zip(ca, cb, strict=False)):
                    if x != y:
                        return offset + i
                return offset + min(len(ca), len(cb))
            if not ca:
                return None
            offset += len(ca)


def _as_text(data: bytes) -> str | None:
    if b"\0" in data:
        return None
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError:
        return None


def file_divergence(
    name: str, a: Path, b: Path, runs: tuple[int, int], da: FileDigest, db: FileDigest
) -> Divergence:
    """How two versions of one output file differ: JSON by key path, text by line, anything
    else by the first differing byte."""
    offset = _first_byte_difference(a, b)
    digests = f"sha256 {da.sha256[:12]}... vs {db.sha256[:12]}..."
    if da.size <= TEXT_LIMIT and db.size <= TEXT_LIMIT:
        raw_a, raw_b = a.read_bytes(), b.read_bytes()
        text_a, text_b = _as_text(raw_a), _as_text(raw_b)
        if text_a is not None and text_b is not None:
            if name.lower().endswith(".json"):
                try:
                    doc_a = parse_bounded_json(raw_a, max_bytes=TEXT_LIMIT)
                    doc_b = parse_bounded_json(raw_b, max_bytes=TEXT_LIMIT)
                except RecordReadError:
                    pass  # not JSON, or nested too deep to walk: compared as text
                else:
                    return _json_divergence(name, runs, doc_a, doc_b, offset, digests)
            line, la, lb = first_line_difference(text_a.splitlines(), text_b.splitlines())
            if line:
                found = line_divergence("output", runs, line, la, lb, file=name, offset=offset)
                return replace(found, detail=f"{name}: {found.detail}")
    sizes = f"{da.size} vs {db.size} bytes" if da.size != db.size else f"{da.size} bytes each"
    return Divergence(
        where="output",
        runs=runs,
        file=name,
        offset=offset,
        detail=f"{name} differs between run {runs[0]} and run {runs[1]}: {digests}, {sizes}",
    )


def _json_divergence(
    name: str, runs: tuple[int, int], doc_a: Any, doc_b: Any, offset: int | None, digests: str
) -> Divergence:
    diffs = diff_json(doc_a, doc_b)
    if not diffs:
        return Divergence(
            where="output",
            runs=runs,
            file=name,
            offset=offset,
            detail=f"{name}: the same JSON values in other bytes (key order, spacing or number "
            f"spelling): {digests}",
        )
    first = diffs[0]
    more = f" ({len(diffs)} differences)" if len(diffs) > 1 else ""
    return Divergence(
        where="output",
        runs=runs,
        file=name,
        key=first.where,
        offset=offset,
        a=None if first.kind == "added" else json_text(first.a),
        b=None if first.kind == "removed" else json_text(first.b),
        numeric=first.numeric,
        json_differences=tuple(diffs),
        detail=f"{name}: {first.where} {_JSON_KINDS[first.kind]} between run {runs[0]} and "
        f"run {runs[1]}{more}",
    )


_JSON_KINDS = {
    "changed": "differs",
    "type": "changes type",
    "added": "is only in the later run",
    "removed": "is missing from the later run",
}


def compare_outputs(
    dirs: Sequence[Path], digests: Sequence[dict[str, FileDigest]]
) -> list[Divergence]:
    """Every output file that differs between run 1 and another run (missing counts)."""
    found: list[Divergence] = []
    names = sorted(set().union(*digests))
    for name in names:
        ref = digests[0].get(name)
        for other in range(1, len(digests)):
            theirs = digests[other].get(name)
            runs = (1, other + 1)
            if ref is None and theirs is None:
                continue
            if ref is None or theirs is None:
                missing = runs[0] if ref is None else runs[1]
                found.append(
                    Divergence(
                        where="output",
                        runs=runs,
                        file=name,
                        detail=f"{name}: run {missing} did not write it, run "
                        f"{runs[1] if ref is None else runs[0]} did",
                    )
                )
            elif ref.sha256 != theirs.sha256:
                found.append(
                    file_divergence(name, dirs[0] / name, dirs[other] / name, runs, ref, theirs)
                )
    return found
