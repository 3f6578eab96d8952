"""Load and validate a project's ``reprobuild.yaml`` into a typed, immutable record."""

from __future__ import annotations

import re
import shlex
from dataclasses import dataclass, field, replace
from pathlib import Path, PurePosixPath
from typing import Any, Literal, cast

from reprobuild._util.boundedread import read_small_file
from reprobuild._util.yamlload import Marks, load_yaml_marked, undecodable_at
from reprobuild.errors import ConfigError, ReprobuildError, shorten

# The runtime owns the determinism modes and the seed range (it enforces them in every run);
# re-exported here, where reprobuild.yaml is checked against them.
from reprobuild_entrypoint.settings import CPU_MODES as CPU_MODES
from reprobuild_entrypoint.settings import MODES as MODES
from reprobuild_entrypoint.settings import SEED_MAX as SEED_MAX

CONFIG_NAME = "reprobuild.yaml"
# A project config is a few hundred bytes; anything near this is not one.
CONFIG_MAX_BYTES = 1 << 20
Mode = Literal["strict", "warn", "off"]
KEYS = (
    "name",
    "lock",
    "gpu_lock",
    "base",
    "seed",
    "determinism",
    "cpu",
    "include",
    "command",
    "apt",
    "matrix",
    "max_world_size",
    "select",
    "build_lock",
    "build_timeout",
)
BASE_KEYS = ("cpu", "gpu")
SELECT_KEYS = ("python", "extras", "groups", "default_groups")
VARIANT_KEYS = ("name", "gpu", "lock", "base", "runner")
# Where a variant's CI job runs when its `runner` is not given: GitHub-hosted Ubuntu for CPU,
# a self-hosted runner carrying a `gpu` label for GPU (`runs-on` needs every label to match).
DEFAULT_RUNNER_CPU: tuple[str, ...] = ("ubuntu-24.04",)
DEFAULT_RUNNER_GPU: tuple[str, ...] = ("self-hosted", "linux", "x64", "gpu")
VARIANT_NAME_MAX = 32
# max_world_size: the default keeps a typo from asking for hundreds of processes; the cap is
# what one torchrun c10d rendezvous is meant for (larger jobs need a scheduler of their own).
DEFAULT_MAX_WORLD_SIZE = 64
WORLD_SIZE_CAP = 65536
# build_timeout: how long one sdist's build may run in the wheel-build stage (flash-attn and
# deepspeed compile for hours on a small machine; a hung build must still end).
DEFAULT_BUILD_TIMEOUT = 3600
BUILD_TIMEOUT_CAP = 7 * 24 * 3600
# An image reference is at most this long (refs.parse_ref refuses longer ones too).
BASE_MAX = 512

# Docker repository path: lowercase components separated by '/', each [a-z0-9] with . _ __ - inside.
_NAME_RE = re.compile(
    r"^[a-z0-9]+(?:(?:[._]|__|-+)[a-z0-9]+)*(?:/[a-z0-9]+(?:(?:[._]|__|-+)[a-z0-9]+)*)*$"
)
# Debian package and version (policy 5.6.1 / 5.6.12): the value goes into an apt-get line.
_APT_RE = re.compile(r"^[a-z0-9][a-z0-9+.-]+=(?:[0-9]+:)?[A-Za-z0-9.+~-]+(?:-[A-Za-z0-9.+~]+)?$")
# An extra or dependency group name (PEP 685 / PEP 735 names, as written).
SELECT_NAME_RE = re.compile(r"[A-Za-z0-9](?:[A-Za-z0-9._-]{0,62}[A-Za-z0-9])?")
_SELECT_PYTHON_RE = re.compile(r"3\.[0-9]{1,2}")
# Paths and command words reach COPY/CMD lines: printable, no control characters.
_SAFE_PATH_RE = re.compile(r"^[A-Za-z0-9._+@%=,-][A-Za-z0-9._+@%=, /-]*$")
# A variant name becomes part of an image tag (NAME:<variant>-<12 hex>) and a CI job name.
_VARIANT_RE = re.compile(r"[a-z0-9][a-z0-9._-]*")
# A runs-on label: what GitHub runner labels are made of, nothing a shell or YAML would read.
_RUNNER_RE = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]*")


@dataclass(frozen=True)
class Variant:
    """One image a project builds: a lock on a base, CPU or GPU, and where CI builds it."""

    name: str
    gpu: bool
    lock: Path
    base: str | None
    runner: tuple[str, ...]

    @property
    def kind(self) -> Literal["cpu", "gpu"]:
        return "gpu" if self.gpu else "cpu"


@dataclass(frozen=True)
class LockSelection:
    """`select:`, what to take from a native lock (uv.lock, poetry.lock, pdm.lock,
    Pipfile.lock): the image's CPython (None: the catalog base's, else 3.11), the extras and
    dependency groups, and whether the tool's own default groups come too."""

    python: str | None = None
    extras: tuple[str, ...] = ()
    groups: tuple[str, ...] = ()
    default_groups: bool = False

    @property
    def chooses(self) -> bool:
        """True when it asks for more than a lock's main dependencies."""
        return bool(self.extras or self.groups or self.default_groups)


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
    # The image's default CPU mode (REPRO_CPU overrides it per run): native, portable or a
    # portable level (reprobuild_entrypoint.envplan.PINS).
    cpu: str = "native"
    include: tuple[str, ...] = ()
    command: tuple[str, ...] = ()
    apt: tuple[str, ...] = field(default_factory=tuple)
    # The `matrix:` as written; empty when the file has none (see `variants`).
    matrix: tuple[Variant, ...] = ()
    # The largest world size (nodes x processes per node) a multi-node job may be rendered with.
    max_world_size: int = DEFAULT_MAX_WORLD_SIZE
    # `select:`: the Python, extras and groups a native lock is read for.
    select: LockSelection = field(default_factory=LockSelection)
    # The pinned, hashed build requirements of the sdists the lock builds
    # (reprobuild.locks.buildlock); None when it names none. Checked by render, not here: a
    # missing or stale one is refused with the command that writes it.
    build_lock: Path | None = None
    # Seconds one sdist's build may run in the wheel-build stage before it is stopped.
    build_timeout: int = DEFAULT_BUILD_TIMEOUT
    # Where each value was written (FILE:LINE for a message about it); None: not from a file.
    at: At | None = field(default=None, compare=False, repr=False)

    @property
    def config_path(self) -> Path:
        return self.root / CONFIG_NAME

    @property
    def variants(self) -> tuple[Variant, ...]:
        """The images this project builds: its `matrix:`, else the implicit ones, `cpu`
        (when base.cpu is set) and `gpu` (when gpu_lock and base.gpu are both set)."""
        if self.matrix:
            return self.matrix
        implicit: list[Variant] = []
        if self.base_cpu:
            implicit.append(Variant("cpu", False, self.lock, self.base_cpu, DEFAULT_RUNNER_CPU))
        if self.gpu_lock is not None and self.base_gpu:
            implicit.append(Variant("gpu", True, self.gpu_lock, self.base_gpu, DEFAULT_RUNNER_GPU))
        return tuple(implicit)

    @property
    def gpu_only(self) -> bool:
        """True when the project builds a GPU image and nothing else (``gpu_lock`` and
        ``base.gpu`` set, no ``base.cpu``, no ``matrix:``): what ``reprobuild init`` writes
        for a lock that carries CUDA, so ``render``/``image`` with no flag build that."""
        return not self.matrix and not self.base_cpu and bool(self.gpu_lock and self.base_gpu)

    def where(self, *keys: Any) -> str:
        """``reprobuild.yaml:LINE`` of the value at ``keys`` (e.g. ``"base", "cpu"``)."""
        return self.at(*keys) if self.at is not None else str(self.config_path)

    def where_base(self, variant: Variant) -> str:
        """Where the base of ``variant`` is written: its own `base:` in the matrix, else the
        base.cpu / base.gpu it inherits."""
        if self.at is not None:
            index = next((i for i, v in enumerate(self.matrix) if v is variant), None)
            if index is None:
                index = next((i for i, v in enumerate(self.matrix) if v.name == variant.name), None)
            if index is not None and ("matrix", index, "base") in self.at.marks.values:
                return self.at("matrix", index, "base")
            return self.at("base", variant.kind)
        return str(self.config_path)

    def variant(self, name: str) -> Variant:
        """The variant called ``name``; ConfigError listing the known ones otherwise."""
        for variant in self.variants:
            if variant.name == name:
                return variant
        known = ", ".join(v.name for v in self.variants) or "(none)"
        raise ConfigError(
            self.config_path,
            f"no variant {shorten(name)}; known variants: {known}",
            hint="list them with `reprobuild matrix`; add one under `matrix:`",
        )

    def for_variant(self, variant: Variant) -> ProjectConfig:
        """This config with the variant's lock and base in the slots a CPU or GPU build
        reads (lock/base_cpu, or gpu_lock/base_gpu)."""
        if variant.gpu:
            return replace(self, gpu_lock=variant.lock, base_gpu=variant.base)
        return replace(self, lock=variant.lock, base_cpu=variant.base)


def select_variant(
    config: ProjectConfig, name: str, *, gpu: bool = False
) -> tuple[ProjectConfig, bool]:
    """The config with variant ``name``'s lock and base applied, and whether it is a GPU
    build. ``gpu=True`` (from --gpu) must agree with the variant."""
    chosen = config.variant(name)
    if gpu and not chosen.gpu:
        raise ReprobuildError(
            f"--gpu conflicts with --variant {name}, a CPU variant",
            hint="drop --gpu: the variant says whether it is a GPU build",
        )
    return config.for_variant(chosen), chosen.gpu


def load_config(directory: Path) -> ProjectConfig:
    """Read ``directory/reprobuild.yaml``; raise ConfigError naming the first bad value."""
    root = directory.resolve()
    path = root / CONFIG_NAME
    if not root.is_dir():
        raise ConfigError(directory, "no such project directory")
    try:
        raw = read_small_file(path, CONFIG_MAX_BYTES, lambda problem: ConfigError(path, problem))
    except FileNotFoundError:
        raise ConfigError(
            path,
            "not found",
            hint=f"run `reprobuild init {directory}` to write one from the project's lock, "
            "or see the README's project format",
        ) from None
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise ConfigError(f"{path}:{undecodable_at(raw, exc)}", "is not UTF-8") from None
    data, marks = load_yaml_marked(
        text, lambda where, problem: ConfigError(f"{path}:{where}" if where else path, problem)
    )
    at = At(path, marks)
    if not isinstance(data, dict):
        raise ConfigError(
            at(), f"must be a mapping of keys (name, lock, base, ...), got {type_name(data)}"
        )
    return _validate(root, at, data)


class At:
    """Names where a value of reprobuild.yaml is, ``FILE:LINE``, from the parser's marks
    (:class:`~reprobuild._util.yamlload.Marks`); a value the file leaves out is named at the
    line of what encloses it."""

    def __init__(self, path: Path, marks: Marks) -> None:
        self.path = path
        self.marks = marks

    def __call__(self, *keys: Any) -> str:
        line = self.marks.line(*keys)
        return f"{self.path}:{line}" if line else str(self.path)

    def key(self, *keys: Any) -> str:
        """Where the key of the entry at ``keys`` is (an unknown key is named there)."""
        line = self.marks.key_line(*keys)
        return f"{self.path}:{line}" if line else str(self.path)


def type_name(value: object) -> str:
    """The YAML type of a value, with its article, for 'must be X, got Y' messages."""
    if value is None:
        return "nothing"
    names = {
        bool: "a boolean",
        int: "an integer",
        float: "a number",
        str: "a string",
        list: "a list",
        dict: "a mapping",
    }
    return names.get(type(value), f"a {type(value).__name__}")


def _validate(root: Path, at: At, data: dict[Any, Any]) -> ProjectConfig:
    unknown = [k for k in data if k not in KEYS]
    if unknown:
        raise ConfigError(
            at.key(unknown[0]),
            f"unknown key {shorten(unknown[0])}; allowed keys: {', '.join(KEYS)}",
        )
    name = _name(at, data.get("name"))
    lock = _lock_path(root, at, ("lock",), "lock", data.get("lock"), required=True)
    assert lock is not None
    gpu_lock = _lock_path(root, at, ("gpu_lock",), "gpu_lock", data.get("gpu_lock"), required=False)
    base = _base(at, data.get("base"))
    matrix = _matrix(
        root,
        at,
        data.get("matrix"),
        defaults={False: (lock, base.get("cpu")), True: (gpu_lock, base.get("gpu"))},
    )
    return ProjectConfig(
        root=root,
        name=name,
        lock=lock,
        gpu_lock=gpu_lock,
        base_cpu=base.get("cpu"),
        base_gpu=base.get("gpu"),
        seed=_seed(at, data.get("seed", 0)),
        determinism=_mode(at, data.get("determinism", "strict")),
        cpu=_cpu(at, data.get("cpu", "native")),
        include=_includes(root, at, data.get("include", [])),
        command=_command(at, data.get("command")),
        apt=_apt(at, data.get("apt", [])),
        matrix=matrix,
        max_world_size=_max_world_size(at, data.get("max_world_size", DEFAULT_MAX_WORLD_SIZE)),
        select=_select(at, data.get("select", {})),
        build_lock=_build_lock(root, at, data.get("build_lock")),
        build_timeout=_build_timeout(at, data.get("build_timeout", DEFAULT_BUILD_TIMEOUT)),
        at=at,
    )


def _build_lock(root: Path, at: At, value: object) -> Path | None:
    if value is None:
        return None
    if not isinstance(value, str) or not value:
        raise ConfigError(
            at("build_lock"),
            "build_lock must be a path to the build requirements lock, got "
            + (type_name(value) if value else "an empty string"),
        )
    return _inside(root, at("build_lock"), "build_lock", value)


def _select(at: At, value: object) -> LockSelection:
    if not isinstance(value, dict):
        raise ConfigError(
            at("select"),
            "select must be a mapping (python, extras, groups, default_groups)"
            + _given(value, dict),
        )
    bad = [k for k in value if k not in SELECT_KEYS]
    if bad:
        raise ConfigError(
            at.key("select", bad[0]),
            f"unknown key select.{shorten(str(bad[0]))[1:-1]}; allowed: "
            + ", ".join(f"select.{k}" for k in SELECT_KEYS),
        )
    python = value.get("python")
    if python is not None and (
        not isinstance(python, str) or not _SELECT_PYTHON_RE.fullmatch(python)
    ):
        raise ConfigError(
            at("select", "python"),
            f'select.python {shorten(python)} must be a CPython version like "3.11" (quoted)'
            + _given(python, str),
        )
    names: dict[str, tuple[str, ...]] = {}
    for key in ("extras", "groups"):
        items = value.get(key, [])
        if not isinstance(items, list):
            raise ConfigError(
                at("select", key), f"select.{key} must be a list of names" + _given(items, list)
            )
        for index, item in enumerate(items):
            if not isinstance(item, str) or not SELECT_NAME_RE.fullmatch(item):
                raise ConfigError(
                    at("select", key, index),
                    f"select.{key} entry {shorten(item)} must be a name: letters, digits and "
                    "'.', '_', '-' inside" + _given(item, str),
                )
        if len(set(items)) != len(items):
            raise ConfigError(at("select", key), f"select.{key} lists a name twice")
        names[key] = tuple(items)
    default_groups = value.get("default_groups", False)
    if not isinstance(default_groups, bool):
        raise ConfigError(
            at("select", "default_groups"),
            f"select.default_groups {shorten(default_groups)} must be true or false"
            + _given(default_groups, bool),
        )
    return LockSelection(python, names["extras"], names["groups"], default_groups)


def _build_timeout(at: At, value: object) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or not 1 <= value <= BUILD_TIMEOUT_CAP:
        raise ConfigError(
            at("build_timeout"),
            f"build_timeout {shorten(value)} must be a whole number of seconds from 1 to "
            f"{BUILD_TIMEOUT_CAP} (7 days)" + _given(value, int),
        )
    return value


def _max_world_size(at: At, value: object) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or not 1 <= value <= WORLD_SIZE_CAP:
        raise ConfigError(
            at("max_world_size"),
            f"max_world_size {shorten(value)} must be an integer from 1 to {WORLD_SIZE_CAP}"
            + _given(value, int),
        )
    return value


def _given(value: object, expected: type) -> str:
    """', got a string' when ``value`` is not of the ``expected`` type (bool is no int)."""
    if isinstance(value, expected) and not (expected is int and isinstance(value, bool)):
        return ""
    return f", got {type_name(value)}"


def _name(at: At, name: object) -> str:
    if not isinstance(name, str) or not _NAME_RE.fullmatch(name) or len(name) > 128:
        raise ConfigError(
            at("name"),
            f"name {shorten(name)} is not a valid image name: lowercase letters, digits, "
            "and . _ - / between them" + _given(name, str),
        )
    return name


def _base(at: At, base: object) -> dict[str, str]:
    if not isinstance(base, dict) or not base:
        raise ConfigError(
            at("base"),
            "base must be a mapping with 'cpu' and/or 'gpu' set to a pinned image"
            + (", got an empty mapping" if isinstance(base, dict) else _given(base, dict)),
        )
    bad = [k for k in base if k not in BASE_KEYS]
    if bad:
        raise ConfigError(
            at.key("base", bad[0]),
            f"unknown key base.{shorten(str(bad[0]))[1:-1]}; allowed: base.cpu, base.gpu",
        )
    for key in BASE_KEYS:
        value = base.get(key)
        if value is not None and (not isinstance(value, str) or not value.strip()):
            raise ConfigError(
                at("base", key),
                f"base.{key} must be a catalog name or NAME@sha256:<64 hex>" + _given(value, str),
            )
        if value is not None and len(value) > BASE_MAX:
            raise ConfigError(
                at("base", key),
                f"base.{key} {shorten(value)} is longer than {BASE_MAX} characters",
            )
    return base


def _seed(at: At, seed: object) -> int:
    if isinstance(seed, bool) or not isinstance(seed, int) or not 0 <= seed <= SEED_MAX:
        raise ConfigError(
            at("seed"),
            f"seed {shorten(seed)} must be an integer from 0 to {SEED_MAX}" + _given(seed, int),
        )
    return seed


def _mode(at: At, mode: object) -> Mode:
    if isinstance(mode, str) and mode in MODES:
        return cast(Mode, mode)
    raise ConfigError(
        at("determinism"),
        f"determinism {shorten(mode)} must be one of: {', '.join(MODES)}" + _given(mode, str),
    )


def _cpu(at: At, cpu: object) -> str:
    if isinstance(cpu, str) and cpu in CPU_MODES:
        return cpu
    raise ConfigError(
        at("cpu"), f"cpu {shorten(cpu)} must be one of: {', '.join(CPU_MODES)}" + _given(cpu, str)
    )


def _apt(at: At, apt: object) -> tuple[str, ...]:
    if not isinstance(apt, list):
        raise ConfigError(
            at("apt"), "apt must be a list of 'package=version' strings" + _given(apt, list)
        )
    for index, item in enumerate(apt):
        if not isinstance(item, str):
            raise ConfigError(
                at("apt", index),
                f"apt entry {shorten(item)} must be a 'package=version' string" + _given(item, str),
            )
        if not _APT_RE.fullmatch(item):
            raise ConfigError(
                at("apt", index),
                f"apt entry {shorten(item)} must be 'package=version' (pinned; no spaces or shell)",
            )
    return tuple(apt)


def _matrix(
    root: Path,
    at: At,
    value: object,
    *,
    defaults: dict[bool, tuple[Path | None, str | None]],
) -> tuple[Variant, ...]:
    """The `matrix:` list. ``defaults`` maps gpu -> (lock, base) a variant inherits."""
    if value is None:
        return ()
    if not isinstance(value, list) or not value:
        raise ConfigError(
            at("matrix"),
            "matrix must be a non-empty list of variants, each a mapping with a name"
            + (", got an empty list" if isinstance(value, list) else _given(value, list)),
        )
    variants: list[Variant] = []
    for index, item in enumerate(value):
        variant = _variant(root, at, index, item, defaults)
        if any(v.name == variant.name for v in variants):
            raise ConfigError(
                at("matrix", index, "name"),
                f"matrix variant {shorten(variant.name)} is listed twice",
            )
        variants.append(variant)
    return tuple(variants)


def _variant(
    root: Path,
    at: At,
    index: int,
    item: object,
    defaults: dict[bool, tuple[Path | None, str | None]],
) -> Variant:
    where = f"matrix[{index}]"
    if not isinstance(item, dict):
        raise ConfigError(
            at("matrix", index),
            f"{where} must be a mapping with a name (got {type_name(item)}, {shorten(item)})",
        )
    name = item.get("name")
    if not isinstance(name, str) or not _VARIANT_RE.fullmatch(name) or len(name) > VARIANT_NAME_MAX:
        raise ConfigError(
            at("matrix", index, "name"),
            f"{where}: name {shorten(name)} is not a valid variant name: lowercase letters and "
            f"digits, then also . _ - (at most {VARIANT_NAME_MAX} characters; it becomes part "
            "of a tag)" + _given(name, str),
        )
    where = f"matrix variant {name!r}"
    unknown = [k for k in item if k not in VARIANT_KEYS]
    if unknown:
        raise ConfigError(
            at.key("matrix", index, unknown[0]),
            f"{where}: unknown key {shorten(str(unknown[0]))}; allowed keys: "
            f"{', '.join(VARIANT_KEYS)}",
        )
    gpu = item.get("gpu", False)
    if not isinstance(gpu, bool):
        raise ConfigError(
            at("matrix", index, "gpu"),
            f"{where}: gpu {shorten(gpu)} must be true or false, got {type_name(gpu)}",
        )
    default_lock, default_base = defaults[gpu]
    kind = "gpu" if gpu else "cpu"
    lock = _lock_path(
        root, at, ("matrix", index, "lock"), f"{where}: lock", item.get("lock"), required=False
    )
    if lock is None:
        lock = default_lock
    if lock is None:
        raise ConfigError(
            at("matrix", index),
            f"{where}: no lock: give the variant a lock, or set the top-level gpu_lock",
        )
    base = item.get("base", default_base)
    if base is None:
        raise ConfigError(
            at("matrix", index), f"{where}: no base: give the variant a base, or set base.{kind}"
        )
    if not isinstance(base, str) or not base.strip():
        raise ConfigError(
            at("matrix", index, "base"),
            f"{where}: base {shorten(base)} must be a catalog name or NAME@sha256:<64 hex>"
            + _given(base, str),
        )
    if len(base) > BASE_MAX:
        raise ConfigError(
            at("matrix", index, "base"),
            f"{where}: base {shorten(base)} is longer than {BASE_MAX} characters",
        )
    runner = _runner(at, ("matrix", index, "runner"), where, item.get("runner"), gpu)
    return Variant(name=name, gpu=gpu, lock=lock, base=base, runner=runner)


def _runner(at: At, keys: tuple[Any, ...], where: str, value: object, gpu: bool) -> tuple[str, ...]:
    if value is None:
        return DEFAULT_RUNNER_GPU if gpu else DEFAULT_RUNNER_CPU
    labels = [value] if isinstance(value, str) else value
    if not isinstance(labels, list) or not labels:
        raise ConfigError(
            at(*keys),
            f"{where}: runner must be a runner label or a non-empty list of labels"
            + (", got an empty list" if isinstance(labels, list) else _given(labels, list)),
        )
    for number, label in enumerate(labels):
        spot = at(*keys) if isinstance(value, str) else at(*keys, number)
        if not isinstance(label, str):
            raise ConfigError(
                spot,
                f"{where}: runner label {shorten(label)} must be a string" + _given(label, str),
            )
        if not _RUNNER_RE.fullmatch(label):
            raise ConfigError(
                spot,
                f"{where}: runner label {shorten(label)} must be letters, digits and . _ - "
                "(e.g. ubuntu-24.04, or [self-hosted, linux, x64, gpu])",
            )
    if len(set(labels)) != len(labels):
        raise ConfigError(at(*keys), f"{where}: runner lists a label twice: {shorten(labels)}")
    return tuple(labels)


def _inside(root: Path, spot: str, key: str, value: str) -> Path:
    rel = PurePosixPath(value)
    if rel.is_absolute() or ".." in rel.parts or not _SAFE_PATH_RE.fullmatch(value):
        raise ConfigError(
            spot,
            f"{key} {shorten(value)} must be a relative path inside the project "
            "(letters, digits, . _ - / only; no '..')",
        )
    target = (root / rel).resolve()
    if not target.is_relative_to(root):
        raise ConfigError(spot, f"{key} {shorten(value)} leaves the project directory")
    return target


def _lock_path(
    root: Path, at: At, keys: tuple[Any, ...], key: str, value: object, *, required: bool
) -> Path | None:
    spot = at(*keys)
    if value is None:
        if required:
            raise ConfigError(spot, f"{key} is required: the path of the hashed lockfile")
        return None
    if not isinstance(value, str) or not value:
        raise ConfigError(
            spot,
            f"{key} must be a path to a lockfile, got "
            + (type_name(value) if value else "an empty string"),
        )
    target = _inside(root, spot, key, value)
    if not target.exists():
        raise ConfigError(spot, f"{key} {shorten(value)} does not exist")
    if not target.is_file():
        raise ConfigError(spot, f"{key} {shorten(value)} is not a regular file")
    return target


def _includes(root: Path, at: At, value: object) -> tuple[str, ...]:
    if not isinstance(value, list):
        raise ConfigError(
            at("include"), "include must be a list of relative paths" + _given(value, list)
        )
    out: list[str] = []
    for index, item in enumerate(value):
        spot = at("include", index)
        if not isinstance(item, str):
            raise ConfigError(
                spot, f"include entry {shorten(item)} must be a relative path" + _given(item, str)
            )
        target = _inside(root, spot, "include", item)
        if not target.exists():
            raise ConfigError(spot, f"include {shorten(item)} does not exist")
        if target == root:
            raise ConfigError(spot, "include '.' would copy the whole project; list files or dirs")
        norm = str(PurePosixPath(item))
        if norm in out:
            raise ConfigError(spot, f"include {shorten(item)} is listed twice")
        out.append(norm)
    return tuple(out)


def _command(at: At, value: object) -> tuple[str, ...]:
    if value is None:
        return ()
    spots: list[str]
    if isinstance(value, str):
        try:
            words = shlex.split(value)
        except ValueError as exc:
            raise ConfigError(
                at("command"), f"command {shorten(value)} cannot be split into words: {exc}"
            ) from None
        spots = [at("command")] * len(words)
    elif isinstance(value, list):
        for index, word in enumerate(value):
            if not isinstance(word, str):
                raise ConfigError(
                    at("command", index),
                    f"command word {shorten(word)} must be a string" + _given(word, str),
                )
        words = list(value)
        spots = [at("command", index) for index in range(len(words))]
    else:
        raise ConfigError(
            at("command"), "command must be a string or a list of strings" + _given(value, list)
        )
    if not words:
        raise ConfigError(at("command"), "command is empty")
    for word, spot in zip(words, spots, strict=True):
        if any(ord(c) < 32 or ord(c) == 127 for c in word):
            raise ConfigError(spot, f"command word {shorten(word)} contains a control character")
    return tuple(words)
