"""Replace this process with the command (``exec``), mapping failures to shell exit codes."""

from __future__ import annotations

import errno
import json
import os
import shutil
import sys
from collections.abc import Sequence

from reprobuild_entrypoint.settings import SettingsError

NOT_FOUND = 127
NOT_EXECUTABLE = 126


def _json_argv(name: str, text: str | None, rule: str, *, items_nonempty: bool) -> list[str] | None:
    """``text``, a variable's value, as a JSON list of strings (an argv): None when unset,
    empty, or ``[]`` where the items must be non-empty (``items_nonempty``: a list of words,
    each a word; otherwise the list must have items, which may be empty strings). A malformed
    value is a :class:`SettingsError` naming the variable, the value and ``rule``."""
    if text is None or not text.strip():
        return None
    try:
        value = json.loads(text)
    except json.JSONDecodeError:
        value = None
    if (
        not isinstance(value, list)
        or not (value or items_nonempty)
        or not all(isinstance(v, str) and (v or not items_nonempty) for v in value)
    ):
        raise SettingsError(f"{name}={text!r} is {rule}")
    return value or None


def parse_base_entrypoint(text: str | None) -> list[str] | None:
    """``REPROBUILD_BASE_ENTRYPOINT``: the base image's own ENTRYPOINT as a JSON list (baked by
    the build when the base has one, e.g. NGC's ``["/opt/nvidia/nvidia_entrypoint.sh"]``).
    None when unset or empty; a malformed value is a :class:`SettingsError`."""
    return _json_argv(
        "REPROBUILD_BASE_ENTRYPOINT",
        text,
        "not a JSON list of non-empty strings (the build bakes it: rebuild the image)",
        items_nonempty=True,
    )


def parse_emulator(text: str | None) -> list[str] | None:
    """``REPROBUILD_EMULATOR`` (set by ``reprobuild verify --cpu`` for an emulated leg): the
    emulator's argv as a JSON list, e.g. ``["/reprobuild-emulator/qemu-x86_64-static", "-cpu",
    "Haswell"]``. None when unset or empty; a malformed value is a :class:`SettingsError`."""
    return _json_argv(
        "REPROBUILD_EMULATOR",
        text,
        "not a JSON list of strings (reprobuild verify --cpu sets it)",
        items_nonempty=False,
    )


def under_emulator(emulator: Sequence[str], command: Sequence[str], path: str | None) -> list[str]:
    """``command`` started by ``emulator``: qemu-user opens the program by its path (no PATH
    search) and loads ELF files only, so a bare name is resolved here the way ``execvp`` would,
    and a ``#!`` script is started as its interpreter with the script's path, as the kernel
    does. A name not found is left as it is: the emulator then says it cannot open it."""
    program = command[0]
    if "/" not in program:
        program = shutil.which(program, path=path) or program
    script = _interpreter(program)
    if script:
        return [*emulator, *script, program, *command[1:]]
    return [*emulator, program, *command[1:]]


def _interpreter(program: str) -> list[str]:
    """The ``#!`` line of a script (interpreter and its one argument), or [] for a binary."""
    try:
        with open(program, "rb") as fh:
            head = fh.readline(256)
    except OSError:
        return []
    if not head.startswith(b"#!"):
        return []
    words = head[2:].decode("utf-8", "replace").strip().split(None, 1)
    return words


def exec_command(command: Sequence[str]) -> int:
    """``execvp`` the command with ``os.environ``; returns only on failure, with the status a
    shell would give: 127 when not found, 126 when found but not executable."""
    try:
        os.execvp(command[0], list(command))
    except (FileNotFoundError, NotADirectoryError):
        status, why = NOT_FOUND, "command not found"
    except PermissionError:
        status, why = NOT_EXECUTABLE, "command not executable (permission denied)"
    except IsADirectoryError:
        status, why = NOT_EXECUTABLE, "command is a directory"
    except OSError as exc:
        if exc.errno == errno.ENOEXEC:
            status, why = NOT_EXECUTABLE, "command not executable (exec format error)"
        else:
            status, why = NOT_EXECUTABLE, f"cannot run the command ({exc.strerror})"
    sys.stderr.write(f"reprobuild: {why}: {command[0]!r}\n")
    sys.stderr.flush()
    return status
