"""``--env NAME=VALUE``: a user's own variables for the jobs ``compose`` and ``k8s`` write.

One job: turn the options into checked ``(NAME, VALUE)`` pairs, pure (no engine, no files), so
a bad one is refused before anything is looked up or written. The renderers put the pairs
after reprobuild's own variables, each value escaped for its format (``$`` doubled: compose
interpolates ``${VAR}``, the kubelet expands ``$(VAR)``); the YAML writers do the quoting.

Refused: a NAME that is not ``[A-Za-z_][A-Za-z0-9_]*``, a VALUE with a control character
(one line of text only), a VALUE over 32 KiB, more than 256 options, and the names the
renderings set themselves (:data:`RESERVED`). ``REPRO_THREADS``, ``REPRO_TRIAL`` and
``REPRO_DIST_TIMEOUT_S`` are the user's to set: given, they replace compose's pass-through
from the shell (``${REPRO_THREADS:-}``).
"""

from __future__ import annotations

import re
import unicodedata
from collections.abc import Iterable, Sequence

from reprobuild.cluster.nodes import BACKEND_VAR, JOB_ID_VAR, NODES_VAR
from reprobuild.errors import UsageError, shorten
from reprobuild_entrypoint.contract import (
    IMAGE_VAR,
    MODE_VAR,
    OUTPUT_DIR_VAR,
    RUN_DIR_VAR,
    SEED_VAR,
)

MAX_OPTIONS = 256
MAX_VALUE_BYTES = 32 * 1024
MAX_NAME = 256
INDEX_VAR = "NODE_INDEX"
"""The pod's completion index in ``reprobuild k8s`` (from the downward API)."""

RESERVED: dict[str, str] = {
    SEED_VAR: "set seed: in reprobuild.yaml (compose: REPRO_SEED from the shell)",
    MODE_VAR: "set determinism: in reprobuild.yaml (compose: REPRO_DETERMINISM from the shell)",
    RUN_DIR_VAR: "run records go to the mount reprobuild sets",
    OUTPUT_DIR_VAR: "outputs go to the mount reprobuild sets",
    IMAGE_VAR: "it is the image the file runs (compose: REPRO_IMAGE from the shell names it)",
    BACKEND_VAR: "--gpu picks nccl, else gloo",
    JOB_ID_VAR: "the rendezvous id is --name (k8s) or REPRO_JOB_ID from the shell (compose)",
    INDEX_VAR: "Kubernetes sets it from the pod's completion index",
    NODES_VAR: "reprobuild lists the job's nodes there",
}
"""Names reprobuild sets in the renderings, and what to do instead."""

_NAME_RE = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")

UserEnv = tuple[tuple[str, str], ...]


class EnvOptionError(UsageError):
    """A bad ``--env NAME=VALUE`` (exit code 2, as for other bad usage)."""


def parse_env(options: Sequence[str]) -> UserEnv:
    """``NAME=VALUE`` options, checked, in the order given; a later NAME replaces an earlier
    one's value (in the earlier one's place)."""
    if len(options) > MAX_OPTIONS:
        raise EnvOptionError(f"{len(options)} --env options: at most {MAX_OPTIONS} are allowed")
    pairs: dict[str, str] = {}
    for option in options:
        name, sep, value = option.partition("=")
        if not sep:
            raise EnvOptionError(
                f"--env {shorten(option)} has no '=': use --env NAME=VALUE (VALUE may be empty)"
            )
        check_pair(name, value)
        pairs[name] = value
    return tuple(pairs.items())


def check_env(pairs: Iterable[tuple[str, str]]) -> UserEnv:
    """Pairs built by a caller of the library (``ComposeSpec``, ``KubeSpec``), checked as the
    options are: the names unique, at most :data:`MAX_OPTIONS`."""
    checked = tuple(pairs)
    if len(checked) > MAX_OPTIONS:
        raise EnvOptionError(f"{len(checked)} --env variables: at most {MAX_OPTIONS} are allowed")
    seen: set[str] = set()
    for name, value in checked:
        check_pair(name, value)
        if name in seen:
            raise EnvOptionError(f"--env {name} is given twice")
        seen.add(name)
    return checked


def check_pair(name: str, value: str) -> None:
    if len(name) > MAX_NAME or not _NAME_RE.fullmatch(name):
        raise EnvOptionError(
            f"--env name {shorten(name, 60)} is not allowed: use a letter or '_', then letters, "
            f"digits and '_' ([A-Za-z_][A-Za-z0-9_]*, at most {MAX_NAME} characters)"
        )
    if name in RESERVED:
        raise EnvOptionError(
            f"--env {name} is not allowed: reprobuild sets {name} itself; {RESERVED[name]}"
        )
    size = len(value.encode("utf-8", "surrogatepass"))
    if size > MAX_VALUE_BYTES:
        raise EnvOptionError(
            f"--env {name}: the value is {size} bytes, above the {MAX_VALUE_BYTES // 1024} KiB "
            "allowed"
        )
    for char in value:
        kind = unicodedata.category(char)
        if kind in ("Cc", "Zl", "Zp"):
            raise EnvOptionError(
                f"--env {name}={shorten(value, 60)} is not allowed: the value holds the control "
                f"character U+{ord(char):04X}; use one line of printable text"
            )
        if kind == "Cs":
            raise EnvOptionError(
                f"--env {name}={shorten(value, 60)} is not allowed: the value is not UTF-8 "
                "text; use one line of printable text"
            )


def merged(own: Iterable[tuple[str, str]], user: UserEnv) -> tuple[tuple[str, str], ...]:
    """reprobuild's own variables, less those the user sets (the pass-throughs), then the
    user's in their order."""
    names = {name for name, _ in user}
    return (*((n, v) for n, v in own if n not in names), *user)


def shell_names(names: Sequence[str]) -> str:
    """``A, B and C``: the variables a header says the shell overrides."""
    return names[0] if len(names) == 1 else f"{', '.join(names[:-1])} and {names[-1]}"
