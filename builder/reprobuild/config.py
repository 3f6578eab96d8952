"""Load and validate a project's ``reprobuild.yaml`` into a typed, immutable record."""

from __future__ import annotations

import re
import shlex
from dataclasses import dataclass, field
from pathlib import Path, PurePosixPath
from typing import Any, Literal

import yaml

from reprobuild.errors import ConfigError

CONFIG_NAME = "reprobuild.yaml"
Mode = Literal["strict", "warn", "off"]
MODES: tuple[Mode, ...] = ("strict", "warn", "off")
KEYS = ("name", "lock", "gpu_lock", "base", "seed", "determinism", "include", "command", "apt")
BASE_KEYS = ("cpu", "gpu")

# Docker repository path: lowercase components separated by '/', each [a-z0-9] with . _ __ - inside.
_NAME_RE = re.compile(
    r"^[a-z0-9]+(?:(?:[._]|__|-+)[a-z0-9]+)*(?:/[a-z0-9]+(?:(?:[._]|__|-+)[a-z0-9]+)*)*$"
)
# Debian package and version (policy 5.6.1 / 5.6.12): the value goes into an apt-get line.
_APT_RE = re.compile(r"^[a-z0-9][a-z0-9+.-]+=(?:[0-9]+:)?[A-Za-z0-9.+~-]+(?:-[A-Za-z0-9.+~]+)?$")
# Paths and command words reach COPY/CMD lines: printable, no control characters.
_SAFE_PATH_RE = re.compile(r"^[A-Za-z0-9._+@%=,-][A-Za-z0-9._+@%=, /-]*$")
SEED_MAX = 2**32 - 1


@dataclass(frozen=True)
class ProjectConfig:
    """What a user wrote in reprobuild.yaml, validated. Paths are absolute."""

    root: Path
    name: str
    lock: Path
    gpu_lock: Path | None = None
    base_cpu: str | None = None
    base_gpu: str | None = None
    seed: int = 0
    determinism: Mode = "strict"
    include: tuple[str, ...] = ()
    command: tuple[str, ...] = ()
    apt: tuple[str, ...] = field(default_factory=tuple)

    @property
    def config_path(self) -> Path:
        return self.root / CONFIG_NAME


def load_config(directory: Path) -> ProjectConfig:
    """Read ``directory/reprobuild.yaml``; raise ConfigError naming the first bad value."""
    root = directory.resolve()
    path = root / CONFIG_NAME
    if not root.is_dir():
        raise ConfigError(directory, "no such project directory")
    try:
        raw = path.read_bytes()
    except FileNotFoundError:
        raise ConfigError(
            path, "not found", hint="create it; see the README's project format"
        ) from None
    except OSError as exc:
        raise ConfigError(path, f"cannot read: {exc.strerror}") from exc
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        line = raw[: exc.start].count(b"\n") + 1
        raise ConfigError(f"{path}:{line}", "is not UTF-8") from None
    try:
        data = yaml.safe_load(text)
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        where = f"{path}:{mark.line + 1}" if mark is not None else str(path)
        problem = getattr(exc, "problem", None) or "invalid YAML"
        raise ConfigError(where, f"invalid YAML: {problem}") from None
    if not isinstance(data, dict):
        raise ConfigError(path, "must be a mapping of keys (name, lock, base, ...)")
    return _validate(root, path, data)


def _validate(root: Path, path: Path, data: dict[Any, Any]) -> ProjectConfig:
    unknown = [str(k) for k in data if k not in KEYS]
    if unknown:
        raise ConfigError(path, f"unknown key {unknown[0]!r}; allowed keys: {', '.join(KEYS)}")
    name = data.get("name")
    if not isinstance(name, str) or not _NAME_RE.fullmatch(name) or len(name) > 128:
        raise ConfigError(
            path,
            f"name {name!r} is not a valid image name: lowercase letters, digits, "
            "and . _ - / between them",
        )
    lock = _lock_path(root, path, "lock", data.get("lock"), required=True)
    assert lock is not None
    gpu_lock = _lock_path(root, path, "gpu_lock", data.get("gpu_lock"), required=False)

    base = data.get("base")
    if not isinstance(base, dict) or not base:
        raise ConfigError(
            path, "base must be a mapping with 'cpu' and/or 'gpu' set to a pinned image"
        )
    bad = [str(k) for k in base if k not in BASE_KEYS]
    if bad:
        raise ConfigError(path, f"unknown key base.{bad[0]}; allowed: base.cpu, base.gpu")
    for key in BASE_KEYS:
        value = base.get(key)
        if value is not None and (not isinstance(value, str) or not value.strip()):
            raise ConfigError(path, f"base.{key} must be a catalog name or NAME@sha256:<64 hex>")

    seed = data.get("seed", 0)
    if isinstance(seed, bool) or not isinstance(seed, int) or not 0 <= seed <= SEED_MAX:
        raise ConfigError(path, f"seed {seed!r} must be an integer from 0 to {SEED_MAX}")
    mode = data.get("determinism", "strict")
    if mode not in MODES:
        raise ConfigError(path, f"determinism {mode!r} must be one of: {', '.join(MODES)}")

    include = _includes(root, path, data.get("include", []))
    command = _command(path, data.get("command"))
    apt = data.get("apt", [])
    if not isinstance(apt, list) or not all(isinstance(a, str) for a in apt):
        raise ConfigError(path, "apt must be a list of 'package=version' strings")
    for item in apt:
        if not _APT_RE.fullmatch(item):
            raise ConfigError(
                path, f"apt entry {item!r} must be 'package=version' (pinned; no spaces or shell)"
            )
    return ProjectConfig(
        root=root,
        name=name,
        lock=lock,
        gpu_lock=gpu_lock,
        base_cpu=base.get("cpu"),
        base_gpu=base.get("gpu"),
        seed=seed,
        determinism=mode,
        include=include,
        command=command,
        apt=tuple(apt),
    )


def _inside(root: Path, path: Path, key: str, value: str) -> Path:
    rel = PurePosixPath(value)
    if rel.is_absolute() or ".." in rel.parts or not _SAFE_PATH_RE.fullmatch(value):
        raise ConfigError(
            path,
            f"{key} {value!r} must be a relative path inside the project "
            "(letters, digits, . _ - / only; no '..')",
        )
    target = (root / rel).resolve()
    if not target.is_relative_to(root):
        raise ConfigError(path, f"{key} {value!r} leaves the project directory")
    return target


def _lock_path(root: Path, path: Path, key: str, value: object, *, required: bool) -> Path | None:
    if value is None:
        if required:
            raise ConfigError(path, f"{key} is required: the path of the hashed lockfile")
        return None
    if not isinstance(value, str) or not value:
        raise ConfigError(path, f"{key} must be a path to a lockfile, got {value!r}")
    target = _inside(root, path, key, value)
    if not target.is_file():
        raise ConfigError(path, f"{key} {value!r} does not exist")
    return target


def _includes(root: Path, path: Path, value: object) -> tuple[str, ...]:
    if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
        raise ConfigError(path, "include must be a list of relative paths")
    out: list[str] = []
    for item in value:
        target = _inside(root, path, "include", item)
        if not target.exists():
            raise ConfigError(path, f"include {item!r} does not exist")
        if target == root:
            raise ConfigError(path, "include '.' would copy the whole project; list files or dirs")
        norm = str(PurePosixPath(item))
        if norm in out:
            raise ConfigError(path, f"include {item!r} is listed twice")
        out.append(norm)
    return tuple(out)


def _command(path: Path, value: object) -> tuple[str, ...]:
    if value is None:
        return ()
    if isinstance(value, str):
        try:
            words = shlex.split(value)
        except ValueError as exc:
            raise ConfigError(
                path, f"command {value!r} cannot be split into words: {exc}"
            ) from None
    elif isinstance(value, list) and all(isinstance(v, str) for v in value):
        words = list(value)
    else:
        raise ConfigError(path, "command must be a string or a list of strings")
    if not words:
        raise ConfigError(path, "command is empty")
    for word in words:
        if any(ord(c) < 32 or ord(c) == 127 for c in word):
            raise ConfigError(path, f"command word {word!r} contains a control character")
    return tuple(words)
