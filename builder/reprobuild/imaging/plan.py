"""Gather what a render needs from disk and git: the I/O half of ``render``."""

from __future__ import annotations

import hashlib
import json
import os
import stat
import subprocess
import time
import tomllib
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from packaging.utils import canonicalize_name

from reprobuild import __version__
from reprobuild.bases.baselock import LockedBase, pin, record, record_platform
from reprobuild.bases.baselock import lock_path as lock_path_of
from reprobuild.bases.catalog import (
    Catalog,
    eol_warning,
    is_catalog_name,
    load_catalog,
    python_eol,
)
from reprobuild.bases.refs import ImageRef, parse_pinned
from reprobuild.errors import ConfigError, ImageRefError, ReprobuildError, UnknownBaseError
from reprobuild.imaging.baseprobe import cached_base_probe
from reprobuild.imaging.render import FileEntry, Kind, RenderSpec
from reprobuild.imaging.runtimefiles import runtime_package
from reprobuild.locks.buildlock import load_build_lock, with_located_sdists
from reprobuild.locks.buildneeds import base_tools, check_buildable
from reprobuild.locks.lockfile import (
    NATIVE_NAMES,
    Lock,
    LockChoice,
    Selection,
    format_of_file,
    load_lock,
)
from reprobuild.locks.records import SourceArchive
from reprobuild.locks.sourcearchive import with_archives
from reprobuild.locks.wheels import cache_root
from reprobuild.project.config import ProjectConfig, load_config, select_variant
from reprobuild_entrypoint.envplan import AARCH64_LEVELS, PORTABLE_LEVELS

_SKIP_DIRS = {"__pycache__", ".git", ".hg", ".svn", ".mypy_cache", ".pytest_cache", ".reprobuild"}


def variant_of(gpu: bool) -> Kind:
    return "gpu" if gpu else "cpu"


def lock_path_for(config: ProjectConfig, *, gpu: bool) -> Path:
    """The lock a variant is built from: ``lock``, or ``gpu_lock`` with ``--gpu``."""
    lock_path = config.gpu_lock if gpu else config.lock
    if lock_path is None:
        raise ConfigError(
            config.config_path, "--gpu needs a gpu_lock: the hashed lock for the GPU image"
        )
    return lock_path


def lock_selection(
    config: ProjectConfig, lock_path: Path, base_python: str | None, machine: str | None = None
) -> Selection:
    """What a native lock is read for: `select:`'s extras and groups, the image's CPython
    (select.python, else the catalog base's, else 3.11) and its machine (``--platform``'s:
    x86_64 unless given). Refuses `select:` choices a lock of
    another format cannot honour, and a select.python the catalog base does not carry."""
    chosen = config.select
    base_xy = ".".join(base_python.split(".")[:2]) if base_python else None
    check_base_python(config, base_xy)
    if chosen.chooses and format_of_file(lock_path) not in NATIVE_NAMES.values():
        raise ConfigError(
            config.where("select"),
            f"select chooses extras or groups, but {lock_path.name} is not a native lock "
            f"({', '.join(NATIVE_NAMES)}): its pins are already chosen",
            hint="drop select's extras/groups/default_groups, or name the native lock in `lock`",
        )
    return Selection(
        python=chosen.python or base_xy or Selection.python,
        machine=machine or Selection.machine,
        extras=chosen.extras,
        groups=chosen.groups,
        default_groups=chosen.default_groups,
    )


def check_base_python(config: ProjectConfig, base_python: str | None, base: str = "") -> None:
    """select.python must be the base's CPython (``X.Y[.Z]``; None: not known yet). A catalog
    base's is known when planning; a base given by digest shows it when the build runs it,
    before anything is fetched for the lock's Python."""
    chosen = config.select.python
    base_xy = ".".join(base_python.split(".")[:2]) if base_python else None
    if chosen and base_xy and chosen != base_xy:
        raise ConfigError(
            config.where("select", "python"),
            f"select.python {chosen} is not the base's CPython {base_xy}"
            + (f" ({base})" if base else ""),
            hint=f"set select.python to {base_xy}, or choose a base with CPython {chosen}",
        )


def read_lock(
    config: ProjectConfig, lock_path: Path, base_python: str | None, machine: str | None = None
) -> Lock:
    """The project's lock read for its selection (:func:`lock_selection`)."""
    return load_lock(lock_path, lock_selection(config, lock_path, base_python, machine))


def catalog_python(config: ProjectConfig, base: str | None, catalog: Catalog | None) -> str | None:
    """The CPython a catalog base carries (as the project locked it); None when unknown."""
    if not base or not is_catalog_name(base):
        return None
    try:
        locked, _new, _note = pin(config.root, base, catalog or load_catalog())
    except ReprobuildError:
        return None
    return locked.versions.get("python")


def catalog_python_by_digest(
    config: ProjectConfig, base: str | None, digest: str | None, catalog: Catalog
) -> str | None:
    """The CPython of the project's catalog base ``base`` when ``digest`` is the one the
    project locked for it (a --base naming that very image); None otherwise."""
    if not base or not digest or not is_catalog_name(base):
        return None
    try:
        locked, _new, _note = pin(config.root, base, catalog)
    except ReprobuildError:
        return None
    return locked.versions.get("python") if locked.ref.digest == digest else None


def default_tag(name: str, variant: str, lock_sha256: str, choice: LockChoice | None = None) -> str:
    """The tag ``reprobuild image`` gives when no ``--tag`` is given:
    ``NAME:<variant>-<first 12 hex of the lock's sha256>``, the variant being cpu|gpu, or
    the matrix variant's name with ``--variant``. Distinct per variant even when two
    variants share a lock, and per selection (``select:`` extras or groups) when one lock
    is read for several: ``-<first 8 hex of the selection's sha256>`` follows."""
    tag = f"{name}:{variant}-{lock_sha256[:12]}"
    if choice is not None and choice != LockChoice():
        canonical = json.dumps(choice.to_dict(), sort_keys=True, separators=(",", ":"))
        tag += "-" + hashlib.sha256(canonical.encode()).hexdigest()[:8]
    return tag


def spec_tag(spec: RenderSpec, variant_name: str | None = None) -> str:
    """The default tag of the image a spec builds (what ``reprobuild image`` tags it with)."""
    return default_tag(spec.name, variant_name or spec.variant, spec.lock.sha256, spec.lock.choice)


def project_tag(config: ProjectConfig, *, gpu: bool, variant_name: str | None = None) -> str:
    """The default tag of a project's image, from its config and lock alone (no base, no
    engine): what ``reprobuild image DIR [--gpu | --variant NAME]`` tags its build with."""
    if variant_name is not None:
        config, gpu = select_variant(config, variant_name, gpu=gpu)
    gpu = gpu or config.gpu_only
    base = config.base_gpu if gpu else config.base_cpu
    lock = read_lock(config, lock_path_for(config, gpu=gpu), catalog_python(config, base, None))
    return default_tag(config.name, variant_name or variant_of(gpu), lock.sha256, lock.choice)


def _base_where(config: ProjectConfig, kind: str, variant_name: str | None) -> str:
    """reprobuild.yaml:LINE of the base a build uses (the variant's, or base.cpu/base.gpu)."""
    if variant_name:
        return config.where_base(config.variant(variant_name))
    return config.where("base", kind)


@dataclass(frozen=True)
class Plan:
    """What a render or a build will use, computed without writing anything."""

    config: ProjectConfig
    spec: RenderSpec
    new_base: LockedBase | None = None
    """A catalog base this project has not locked yet: the command records it
    (:func:`record_new_base`); planning never writes."""
    notes: tuple[str, ...] = ()
    """What the user should hear (a locked base the catalog has moved past)."""
    warnings: tuple[str, ...] = ()
    """What the user should be warned of (a CPython past its upstream end of life)."""
    base_name: str | None = None
    """The catalog name the base is locked under, where the project names one (no --base)."""


@dataclass(frozen=True)
class _Base:
    """The base a build is for, with what is known of it before it is pulled."""

    ref: ImageRef
    entrypoint: tuple[str, ...] | None = None
    python: str | None = None
    new_base: LockedBase | None = None
    notes: tuple[str, ...] = ()
    locked_versions: dict[str, str] = field(default_factory=dict)
    name: str | None = None
    """The catalog name it is locked under (the project's own base, not --base)."""


def _resolve_base(
    config: ProjectConfig,
    base: str | None,
    base_value: str,
    *,
    gpu: bool,
    catalog: Catalog,
    where: Callable[[], str],
) -> _Base:
    """``--base`` (by digest; the project's own catalog base given so names its CPython), a
    catalog name (through the project's base lock; one not locked yet is ``new_base``), or the
    project's base by digest (a bad one named at ``where()``, the line that sets it)."""
    if base:
        ref = parse_pinned(base, what="--base")
        # the project's own catalog base given by digest (rebuild does so): its Python is known
        own_base = config.base_gpu if gpu else config.base_cpu
        return _Base(ref, python=catalog_python_by_digest(config, own_base, ref.digest, catalog))
    if is_catalog_name(base_value):  # the project's lock of that name
        try:
            locked, is_new, note = pin(config.root, base_value, catalog)
        except UnknownBaseError as exc:  # named at the line that sets it
            raise UnknownBaseError(f"{where()}: {exc.message}", hint=exc.hint) from None
        return _Base(
            locked.ref,
            entrypoint=locked.entrypoint,
            python=locked.versions.get("python"),
            new_base=locked if is_new else None,
            notes=(note,) if note else (),
            locked_versions=dict(locked.versions),
            name=base_value,
        )
    try:
        return _Base(parse_pinned(base_value, what=f"base.{variant_of(gpu)}"))
    except ImageRefError as exc:  # named at the line that sets it
        raise ImageRefError(f"{where()}: {exc.message}", hint=exc.hint) from None


def plan_build(
    directory: Path,
    *,
    gpu: bool = False,
    base: str | None = None,
    online: bool = False,
    ca_cert: Path | None = None,
    catalog: Catalog | None = None,
    variant_name: str | None = None,
    machine: str = "x86_64",
) -> Plan:
    """Everything a render needs, read from the project, its locks and git. A catalog base
    resolves through the project's base lock; one not locked yet is returned as
    ``new_base`` for the command to record. ``machine``: the image's (``--platform``'s),
    which the lock's markers and wheel tags are read for; x86_64 unless given."""
    config = load_config(directory)
    if variant_name is not None:
        config, gpu = select_variant(config, variant_name, gpu=gpu)
    else:  # a project that builds only a GPU image needs no --gpu (--base replaces its base)
        gpu = gpu or config.gpu_only
    variant = variant_of(gpu)
    lock_path = lock_path_for(config, gpu=gpu)
    base_value = base or (config.base_gpu if gpu else config.base_cpu)
    if not base_value:
        raise ConfigError(config.config_path, f"base.{variant} is not set and no --base was given")
    catalog = catalog or load_catalog()

    def where() -> str:
        return _base_where(config, variant, variant_name)

    chosen = _resolve_base(config, base, base_value, gpu=gpu, catalog=catalog, where=where)
    base_ref, known_entrypoint, base_python = chosen.ref, chosen.entrypoint, chosen.python
    new_base, notes, locked_versions = chosen.new_base, chosen.notes, chosen.locked_versions
    if ca_cert is not None and not online:
        raise ReprobuildError(
            "--ca-cert is only used with --online (hermetic builds need no network)"
        )
    ca_bytes = _read_ca(ca_cert) if ca_cert is not None else None
    if base_python is None:  # a base given by digest: its CPython, where it was probed here
        probed = cached_base_probe(base_ref)
        base_python = str(probed["python"].get("version", "")) or None if probed else None
        check_base_python(config, base_python, str(base_ref))
    check_cpu_level(config, machine)
    lock = read_lock(config, lock_path, base_python, machine)
    # a requirements file or Pipfile.lock gives hashes only: the sdists among them were found
    # on the index when the build lock was written, which records them (no network here)
    lock = with_located_sdists(lock, config.build_lock, config.root)
    # git commits and project folders the lock installs, packed on the host into source
    # archives; each archive, and each sdist already in the host's cache, checked against what
    # the base can build before anything is fetched or built (reprobuild.locks.buildneeds).
    tools = base_tools(
        base_value if base is None else base,
        locked_versions,
        config.apt,
        gpu=gpu,
    )
    lock = with_archives(lock, tools)
    check_buildable(lock, tools, cached_source)
    # The sdists the lock builds need their pinned build requirements (one line if missing or
    # stale; render never resolves anything itself).
    image_python = lock_selection(config, lock_path, base_python, machine).python
    build_lock = load_build_lock(config.build_lock, lock, image_python, config.root)
    spec = RenderSpec(
        name=config.name,
        variant=variant,
        base=base_ref,
        lock=lock,
        seed=config.seed,
        determinism=config.determinism,
        cpu=config.cpu,
        machine=machine,
        builder_version=__version__,
        command=config.command,
        apt=config.apt,
        online=online,
        ca_cert=ca_bytes,
        epoch=source_date_epoch(config.root),
        revision=git_revision(config.root),
        version=git_version(config.root),
        base_entrypoint=known_entrypoint,
        build_lock=build_lock,
        build_timeout=config.build_timeout,
        app_files=(files := app_files(config)),
        runtime_files=runtime_files(),
        app_import_path=own_src_path(config.root, lock, files),
    )
    python = base_python or config.select.python
    warning = None
    if python:
        python = ".".join(python.split(".")[:2])
        warning = eol_warning(python, python_eol(catalog, python), time.strftime("%Y-%m"))
    return Plan(
        config=config,
        spec=spec,
        new_base=new_base,
        notes=notes,
        warnings=(warning,) if warning else (),
        base_name=chosen.name,
    )


def project_base(config: ProjectConfig, base: str | None = None) -> ImageRef:
    """The pinned base ``base`` (a ``--base`` value) names, else the project's own: its CPU
    base, or its GPU base where it has no CPU one; a catalog name through the project's base
    lock (read only: the catalog's digest where it is not locked yet)."""
    if base is not None:
        return parse_pinned(base, what="--base")
    gpu = not config.base_cpu
    value = config.base_gpu if gpu else config.base_cpu
    if not value:
        raise ConfigError(config.config_path, "base.cpu is not set and no --base was given")
    if is_catalog_name(value):
        try:
            return pin(config.root, value, load_catalog())[0].ref
        except UnknownBaseError as exc:
            where = _base_where(config, variant_of(gpu), None)
            raise UnknownBaseError(f"{where}: {exc.message}", hint=exc.hint) from None
    return parse_pinned(value, what=f"base.{variant_of(gpu)}")


def cached_source(source: SourceArchive) -> Path | None:
    """Where the host's cache keeps a fetched sdist (``fetch_sources``'s name), if it does."""
    cached = cache_root() / "sources" / f"{source.hex}-{source.filename}"
    return cached if cached.is_file() else None


def check_cpu_level(config: ProjectConfig, machine: str) -> None:
    """``cpu:`` names a level of another machine than the image's (``x86-64-v3`` for an arm64
    image): the runtime would refuse every run of it, so the build is refused first."""
    for levels, its in ((PORTABLE_LEVELS, "x86_64"), (AARCH64_LEVELS, "aarch64")):
        if config.cpu in levels and machine != its:
            raise ConfigError(
                config.where("cpu"),
                f"cpu: {config.cpu} is a level of {its}, and this image is for {machine}",
                hint="use cpu: portable (the baseline of each machine) or native",
            )


def record_base_platform(
    plan: Plan, platform: str, digest: str, log: Callable[[str], None]
) -> None:
    """A catalog base built for ``platform``: its image for it (``digest``) in the project's
    base lock, once (:func:`reprobuild.bases.baselock.record_platform`)."""
    if plan.base_name is None:
        return
    try:
        note = record_platform(plan.config.root, plan.base_name, platform, digest)
    except OSError as exc:
        raise ConfigError(
            lock_path_of(plan.config.root),
            f"cannot record base {plan.base_name!r}'s {platform} image: {exc.strerror or exc}",
            hint="make the project writable once, or build with --base REF@DIGEST",
        ) from None
    if note is not None:
        log(f"note: {note}")


def record_new_base(plan: Plan, log: Callable[[str], None]) -> None:
    """The command's side of a plan: say its notes, and record a catalog base used for the
    first time in the project's base lock (``reprobuild.bases.lock``)."""
    for note in plan.notes:
        log(f"note: {note}")
    for warning in plan.warnings:
        log(f"warning: {warning}")
    if plan.new_base is None:
        return
    root = plan.config.root
    try:
        recorded = record(root, plan.new_base)
    except OSError as exc:  # a read-only project cannot record its base on first use
        raise ConfigError(
            lock_path_of(root),
            f"cannot record base {plan.new_base.name!r}: {exc.strerror or exc}",
            hint="make the project writable once, or build with --base REF@DIGEST",
        ) from None
    if recorded is not None:
        log(f"note: {recorded}")


def _read_ca(path: Path) -> bytes:
    try:
        data = path.read_bytes()
    except OSError as exc:
        raise ReprobuildError(f"--ca-cert {str(path)!r}: cannot read: {exc.strerror}") from None
    if b"-----BEGIN CERTIFICATE-----" not in data:
        raise ReprobuildError(f"--ca-cert {str(path)!r} is not a PEM certificate bundle")
    return data


# What `include:` may copy into a build context, in all: the files are held in memory and
# sent to the engine, so a stray disk image or dataset must fail early and clearly.
MAX_INCLUDE_BYTES = 2 << 30


def _kind(mode: int) -> str:
    if stat.S_ISFIFO(mode):
        return "a FIFO"
    if stat.S_ISSOCK(mode):
        return "a socket"
    if stat.S_ISCHR(mode) or stat.S_ISBLK(mode):
        return "a device file"
    return "not a regular file"


def own_src_path(root: Path, lock: Lock, files: dict[str, FileEntry]) -> str | None:
    """Where the project's own package lies, when the lock does not install the project itself
    (uv's and Poetry's editable or virtual root, left to ``include``): ``/app/src`` for a src/
    layout (``src/<name>/__init__.py`` is included, its name the one pyproject.toml gives the
    project), ``/app`` for a flat one (``<name>/__init__.py`` at the top, as flax lays itself
    out). A script run from a subfolder (``python examples/train.py``, whose own folder is the
    first on ``sys.path``) then imports it as ``uv run`` would find the editable install. Else
    None."""
    try:
        data = tomllib.loads((root / "pyproject.toml").read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, tomllib.TOMLDecodeError):
        return None
    name = data.get("project", {}).get("name") or data.get("tool", {}).get("poetry", {}).get("name")
    if not isinstance(name, str) or not name:
        return None
    project = canonicalize_name(name)
    if any(r.name == project for r in lock.requirements):
        return None  # installed by the lock (a workspace member or a built project folder)
    package = project.replace("-", "_")
    if f"src/{package}/__init__.py" in files:
        return "/app/src"
    return "/app" if f"{package}/__init__.py" in files else None


def app_files(config: ProjectConfig) -> dict[str, FileEntry]:
    """The include list expanded to files, relative to the project root, sorted. Only regular
    files and directories are copied: every entry is lstat'ed first, so a FIFO or a device is
    refused (never opened) and a symlink is refused (never followed)."""
    out: dict[str, FileEntry] = {}
    total = 0
    for item in config.include:
        top = config.root / item
        try:
            top_mode = top.lstat().st_mode
            paths = _walk(top) if stat.S_ISDIR(top_mode) else [top]
            for path in paths:
                rel = path.relative_to(config.root).as_posix()
                mode = path.lstat().st_mode
                if stat.S_ISLNK(mode):
                    raise ConfigError(
                        config.config_path,
                        f"include {item!r} contains a symlink ({rel}); "
                        "symlinks are not copied: list the real file",
                    )
                if not stat.S_ISREG(mode):
                    raise ConfigError(
                        config.config_path,
                        f"include {item!r}: {rel} is {_kind(mode)}; only regular files and "
                        "directories are copied",
                    )
                data = _read_regular(path)
                total += len(data)
                if total > MAX_INCLUDE_BYTES:
                    raise ConfigError(
                        config.config_path,
                        f"include {item!r}: the included files pass {MAX_INCLUDE_BYTES >> 20} MiB "
                        f"(at {rel}); a build context is not the place for data",
                        hint="mount data at run time (/data) instead of including it",
                    )
                out[rel] = FileEntry(data, 0o755 if mode & stat.S_IXUSR else 0o644)
        except OSError as exc:
            where = Path(exc.filename).relative_to(config.root) if exc.filename else item
            raise ConfigError(
                config.config_path, f"include {item!r}: cannot read {str(where)!r}: {exc.strerror}"
            ) from None
    return dict(sorted(out.items()))


def _read_regular(path: Path) -> bytes:
    """Read a file that lstat said is regular, refusing it if it was swapped for something
    else since (no following a symlink, no blocking on a FIFO)."""
    fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | getattr(os, "O_CLOEXEC", 0))
    with os.fdopen(fd, "rb") as fh:
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            raise OSError(0, "not a regular file", str(path))
        return fh.read()


def _walk(top: Path) -> list[Path]:
    """Entries under ``top`` that are not directories (files, symlinks, FIFOs...), sorted. A
    symlinked directory is returned as an entry (not followed), so the caller refuses it like
    a symlinked file instead of dropping it."""
    found: list[Path] = []

    def fail(exc: OSError) -> None:
        raise exc

    for dirpath, dirnames, filenames in os.walk(top, onerror=fail):
        dirnames[:] = sorted(d for d in dirnames if d not in _SKIP_DIRS)
        found.extend(Path(dirpath) / d for d in dirnames if (Path(dirpath) / d).is_symlink())
        found.extend(Path(dirpath) / n for n in filenames if not n.endswith((".pyc", ".pyo")))
    return sorted(found)


def runtime_files() -> dict[str, FileEntry]:
    """The in-image runtime package, as shipped inside this reprobuild."""
    return {rel: FileEntry(data, mode) for rel, (data, mode) in runtime_package().items()}


MAX_EPOCH = 253402300799  # 9999-12-31T23:59:59Z, the last second a timestamp label can hold


def source_date_epoch(root: Path) -> int:
    """The fixed time stamped into the image: SOURCE_DATE_EPOCH, else the project's last
    commit time, else 0. Never the wall clock."""
    env = os.environ.get("SOURCE_DATE_EPOCH")
    if env is not None:
        shown = env if len(env) <= 40 else env[:37] + "..."
        if not (env.isascii() and env.isdigit()) or len(env) > 12 or int(env) > MAX_EPOCH:
            raise ReprobuildError(
                f"SOURCE_DATE_EPOCH {shown!r} must be a non-negative integer up to {MAX_EPOCH} "
                "(seconds since 1970, up to the year 9999)"
            )
        return int(env)
    out = _git(root, "log", "-1", "--format=%ct")
    return int(out) if out and out.isdigit() and int(out) <= MAX_EPOCH else 0


def git_revision(root: Path) -> str | None:
    """HEAD's commit when the project has no uncommitted changes (else it is not that revision)."""
    head = _git(root, "rev-parse", "HEAD")
    if head is None or _git(root, "status", "--porcelain", "--", ".") != "":
        return None
    return head


def git_version(root: Path) -> str | None:
    return _git(root, "describe", "--tags", "--exact-match")


def _git(root: Path, *args: str) -> str | None:
    try:
        proc = subprocess.run(
            ["git", "-C", str(root), *args], capture_output=True, text=True, check=False, timeout=20
        )
    except (OSError, subprocess.TimeoutExpired):
        return None
    return proc.stdout.strip() if proc.returncode == 0 else None
