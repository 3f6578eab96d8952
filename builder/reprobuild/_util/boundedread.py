"""Read a small input file (config, lock, catalog) without trusting what the path is.

A FIFO, socket or device named ``reprobuild.yaml`` must not hang the command, and a huge file
must not be read into memory: :func:`read_small_file` stats the path first, refuses anything
but a regular file, and reads at most ``limit`` bytes (checked again on the open descriptor).
"""

from __future__ import annotations

import os
import stat
from collections.abc import Callable
from pathlib import Path

from reprobuild.errors import ReprobuildError

Fail = Callable[[str], ReprobuildError]


def _mib(size: int) -> str:
    return f"{size / (1 << 20):.1f} MiB" if size >= 1 << 20 else f"{size} bytes"


def _check(mode: int, size: int, limit: int, fail: Fail) -> None:
    if stat.S_ISDIR(mode):
        raise fail("is a directory, not a file")
    if not stat.S_ISREG(mode):
        raise fail("is not a regular file (a FIFO, socket or device?): refusing to read it")
    if size > limit:
        raise fail(f"is {_mib(size)}, over the {_mib(limit)} limit for this file")


def read_small_file(path: Path, limit: int, fail: Fail) -> bytes:
    """The bytes of the regular file ``path`` (at most ``limit``); ``fail(problem)`` builds the
    error otherwise. FileNotFoundError is left to the caller, which knows what missing means."""
    try:
        before = os.stat(path)
    except FileNotFoundError:
        raise
    except OSError as exc:
        raise fail(f"cannot read: {exc.strerror or type(exc).__name__}") from None
    _check(before.st_mode, before.st_size, limit, fail)
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | getattr(os, "O_CLOEXEC", 0))
    except FileNotFoundError:
        raise
    except OSError as exc:
        raise fail(f"cannot read: {exc.strerror or type(exc).__name__}") from None
    with os.fdopen(fd, "rb") as fh:
        opened = os.fstat(fh.fileno())  # the path may have been swapped since the stat
        _check(opened.st_mode, opened.st_size, limit, fail)
        data = fh.read(limit + 1)
    if len(data) > limit:
        raise fail(f"grew past the {_mib(limit)} limit for this file while being read")
    return data
