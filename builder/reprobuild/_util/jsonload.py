"""The one JSON reader for untrusted input: files, images, registries, the engine.

``json.loads`` alone lets a hostile document cost unbounded memory (a huge file), a
RecursionError traceback (``[[[[...``) or seconds of CPU (a 100,000-digit number). This module
bounds all three and turns every failure into one line naming what was read:

- size: the bytes are refused above ``max_bytes`` (files are read at most that far);
- depth: containers nested deeper than ``MAX_DEPTH`` are refused;
- numbers: a number literal longer than ``MAX_NUMBER_CHARS`` is refused, as are NaN and
  Infinity (not JSON);
- text: bytes that are not UTF-8 are refused;
- keys: an object giving one key twice is refused (json.loads would keep the last).

Callers pass the error class to raise (a :class:`~reprobuild.errors.ReprobuildError`
subclass taking one message), so each command keeps its exit code.
"""

from __future__ import annotations

import json
import os
import stat
from pathlib import Path
from typing import Any

from reprobuild.errors import ReprobuildError, shorten

__all__ = [
    "MAX_DEPTH",
    "MAX_DOCUMENT_BYTES",
    "MAX_NUMBER_CHARS",
    "JSONLimitError",
    "loads",
    "read_file",
    "read_json_file",
]

MAX_DOCUMENT_BYTES = 16 * 1024 * 1024
MAX_DEPTH = 64
MAX_NUMBER_CHARS = 100


class JSONLimitError(ValueError):
    """Internal: a limit was passed while parsing (turned into the caller's error)."""


def _parse_int(text: str) -> int:
    if len(text) > MAX_NUMBER_CHARS:
        raise JSONLimitError(f"a number {len(text)} characters long (at most {MAX_NUMBER_CHARS})")
    return int(text)


def _parse_float(text: str) -> float:
    if len(text) > MAX_NUMBER_CHARS:
        raise JSONLimitError(f"a number {len(text)} characters long (at most {MAX_NUMBER_CHARS})")
    return float(text)


def _parse_constant(text: str) -> Any:
    raise JSONLimitError(f"{text} is not a JSON value")


def _no_duplicate_keys(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    # json keeps the last of two equal keys; a document saying two things is refused instead.
    out: dict[str, Any] = {}
    for key, value in pairs:
        if key in out:
            raise JSONLimitError(f"key {shorten(key, 60)} is given twice in one object")
        out[key] = value
    return out


def _depth(document: Any) -> int:
    """How deep containers nest in ``document`` (a scalar is 0), walked without recursion."""
    deepest = 0
    stack: list[tuple[Any, int]] = [(document, 0)]
    while stack:
        node, level = stack.pop()
        if isinstance(node, dict):
            children: Any = node.values()
        elif isinstance(node, list):
            children = node
        else:
            continue
        level += 1
        if level > MAX_DEPTH:
            return level
        deepest = max(deepest, level)
        stack.extend((child, level) for child in children)
    return deepest


def loads(
    raw: bytes | str,
    what: str,
    *,
    error: type[ReprobuildError] = ReprobuildError,
    max_bytes: int = MAX_DOCUMENT_BYTES,
) -> Any:
    """Parse ``raw`` within the limits; ``error(f"{what} ...")`` on any failure."""
    size = len(raw)
    if size > max_bytes:
        raise error(f"{what} is larger than {max_bytes} bytes; refusing it")
    if isinstance(raw, bytes):
        try:
            text = raw.decode("utf-8-sig")
        except UnicodeDecodeError as exc:
            raise error(
                f"{what} is not valid JSON: not UTF-8 text (bad byte at offset {exc.start})"
            ) from None
    else:
        text = raw
    try:
        document = json.loads(
            text,
            parse_int=_parse_int,
            parse_float=_parse_float,
            parse_constant=_parse_constant,
            object_pairs_hook=_no_duplicate_keys,
        )
    except RecursionError:
        raise error(f"{what} nests deeper than {MAX_DEPTH} levels; refusing it") from None
    except JSONLimitError as exc:
        raise error(f"{what} holds {exc}; refusing it") from None
    except json.JSONDecodeError as exc:
        raise error(f"{what} is not valid JSON: {exc.msg} (line {exc.lineno})") from None
    except ValueError as exc:  # e.g. int() limits
        raise error(f"{what} is not valid JSON: {str(exc)[:80]}") from None
    if _depth(document) > MAX_DEPTH:
        raise error(f"{what} nests deeper than {MAX_DEPTH} levels; refusing it")
    return document


def read_file(
    path: Path,
    what: str,
    *,
    error: type[ReprobuildError] = ReprobuildError,
    max_bytes: int = MAX_DOCUMENT_BYTES,
    nofollow: bool = False,
) -> bytes:
    """The bytes of the regular file ``path``, at most ``max_bytes`` of them.

    A FIFO, device or other non-regular file is refused before it is read (``/dev/zero``
    never ends); a file that grows past the cap while read is refused too. OSErrors
    (missing file, directory, no permission) propagate for the caller to word. ``nofollow``:
    a symbolic link at ``path`` is refused too (OSError ELOOP), for files an untrusted
    program wrote."""
    flags = os.O_RDONLY | getattr(os, "O_NONBLOCK", 0) | getattr(os, "O_CLOEXEC", 0)
    fd = os.open(path, flags | (os.O_NOFOLLOW if nofollow else 0))
    try:
        info = os.fstat(fd)
        if stat.S_ISDIR(info.st_mode):
            raise IsADirectoryError(21, "Is a directory", str(path))
        if not stat.S_ISREG(info.st_mode):
            raise error(f"{what} is not a regular file; refusing it")
        if info.st_size > max_bytes:
            raise error(f"{what} is larger than {max_bytes} bytes; refusing it")
        chunks: list[bytes] = []
        size = 0
        while chunk := os.read(fd, 1 << 20):
            size += len(chunk)
            if size > max_bytes:
                raise error(f"{what} is larger than {max_bytes} bytes; refusing it")
            chunks.append(chunk)
        return b"".join(chunks)
    finally:
        os.close(fd)


def read_json_file(
    path: Path,
    what: str,
    *,
    error: type[ReprobuildError] = ReprobuildError,
    max_bytes: int = MAX_DOCUMENT_BYTES,
) -> Any:
    """:func:`read_file` then :func:`loads`."""
    raw = read_file(path, what, error=error, max_bytes=max_bytes)
    return loads(raw, what, error=error, max_bytes=max_bytes)
