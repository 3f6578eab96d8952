"""``reprobuild verify --cpu native,Haswell,Nehalem``: each run (a *leg*) on another CPU,
emulated by qemu-user (issue 31: the same bits on another machine, proved without owning it).

A leg other than ``native`` runs in its container with Debian's static ``qemu-x86_64-static``
(package ``qemu-user-static``) mounted read-only at
:data:`~reprobuild_entrypoint.contract.EMULATOR_DIR`. Under qemu-user an ``exec`` leaves
emulation, so the emulated process must be the interpreter itself: the container's entrypoint
becomes ``qemu -cpu MODEL <the image's entrypoint>`` (the runtime reads the emulated CPU and
refuses a pinned level above it), and the runtime, told the emulator by
:data:`~reprobuild_entrypoint.contract.EMULATOR_VAR`, starts the command under it too.
"""

from __future__ import annotations

import functools
import json
import re
import shutil
import subprocess
from collections.abc import Sequence

from reprobuild.errors import VerifyError, VerifyUsageError
from reprobuild_entrypoint.contract import EMULATOR_DIR

QEMU = "qemu-x86_64-static"
NATIVE = "native"
"""The leg that runs on this machine's own CPU, not emulated."""
EMULATOR_IN_CONTAINER = f"{EMULATOR_DIR}/{QEMU}"
_MODEL_LINE = re.compile(r"^x86\s+(\S+)")  # qemu 7.2 (Debian 12): "x86 Haswell  ..."
_INDENTED = re.compile(r"^\s+(\S+)")  # qemu 8 and later (Debian 13's 10.0): "  Haswell  ..."
_VERSIONED = re.compile(r"-v\d+$")


def find_qemu() -> str:
    """The host's ``qemu-x86_64-static``; one clear line when it is not installed."""
    found = shutil.which(QEMU)
    if found is None:
        raise VerifyError(
            f"--cpu needs {QEMU} to emulate other CPUs, and it is not installed",
            hint="apt-get install qemu-user-static (Debian/Ubuntu), or give --cpu native only",
        )
    return found


@functools.cache
def cpu_models(qemu: str) -> tuple[str, ...]:
    """The CPU models ``qemu -cpu help`` lists (``Haswell``, ``Nehalem-v1``, ``max``...)."""
    try:
        done = subprocess.run(
            [qemu, "-cpu", "help"], capture_output=True, text=True, timeout=60, check=False
        )
    except (OSError, subprocess.TimeoutExpired) as exc:
        raise VerifyError(f"cannot run {qemu} -cpu help: {exc}") from None
    models = parse_cpu_help(done.stdout)
    if not models:  # qemu lists them and exits with status 1
        raise VerifyError(f"{qemu} -cpu help listed no CPU models (exit status {done.returncode})")
    return models


def parse_cpu_help(text: str) -> tuple[str, ...]:
    """The models in ``qemu-x86_64 -cpu help``: qemu 7.2 starts each model's line with
    ``x86``; qemu 8 and later list them indented under ``Available CPUs:``, up to the blank
    line before ``Recognized CPUID flags:`` (whose indented lines are flags, not models)."""
    models: list[str] = []
    listing = False
    for line in text.splitlines():
        if match := _MODEL_LINE.match(line):
            models.append(match.group(1))
        elif line.strip() == "Available CPUs:":
            listing = True
        elif not line.strip() or not line[0].isspace():
            listing = False
        elif listing and (match := _INDENTED.match(line)):
            models.append(match.group(1))
    return tuple(models)


def parse_cpus(text: str) -> tuple[str, ...]:
    """``--cpu native,Haswell,Nehalem``: the legs in order (names checked by
    :func:`check_models`)."""
    legs = tuple(part.strip() for part in text.split(","))
    if not all(legs):
        raise VerifyUsageError(
            f"--cpu {text!r}: an empty CPU name",
            hint="a comma-separated list, e.g. --cpu native,Haswell,Nehalem",
        )
    return legs


def check_models(legs: Sequence[str]) -> str | None:
    """The host's qemu when a leg is emulated (None when every leg is native); an unknown
    model is one error line naming it and the models allowed."""
    emulated = [leg for leg in legs if leg != NATIVE]
    if not emulated:
        return None
    qemu = find_qemu()
    models = cpu_models(qemu)
    for leg in emulated:
        if leg not in models:
            names = [m for m in models if not _VERSIONED.search(m)]
            raise VerifyUsageError(
                f"--cpu {leg!r}: not a CPU model {QEMU} emulates; use {NATIVE} or one of "
                f"{', '.join(names)} (or a versioned one: {QEMU} -cpu help)"
            )
    return qemu


def emulator_argv(model: str) -> list[str]:
    """How a leg's container starts a program on ``model``: the emulator's argv."""
    return [EMULATOR_IN_CONTAINER, "-cpu", model]


def emulator_env(model: str) -> str:
    """The value of ``REPROBUILD_EMULATOR`` for a leg on ``model``."""
    return json.dumps(emulator_argv(model))
