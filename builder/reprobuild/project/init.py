"""``reprobuild init [DIR]``: a commented ``reprobuild.yaml`` from what the project already has.

It finds the lock (a native lock, ``pylock.toml`` or a hashed requirements file is used in
place; unhashed requirements or a lockless ``pyproject.toml`` are resolved with the pinned
``uv`` into ``requirements.lock``), the Python the lock really needs, a catalog base for it, the
command, the files to include and whether the image needs a GPU. It never overwrites: an
existing ``reprobuild.yaml`` or ``requirements.lock`` is refused, and every file is written
through a temp file linked into place (the link fails if the name appeared meanwhile).

This module sits below ``locks`` and ``bases`` in the package's layers, so reading a lock and
finding a catalog base are handed in by the caller (:class:`Services`).
"""

from __future__ import annotations

import datetime
import os
import re
import subprocess
import tempfile
import tomllib
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path

import yaml

from reprobuild._util.resolver import failure_reason
from reprobuild._util.yamlload import load_yaml
from reprobuild.errors import ReprobuildError
from reprobuild.project.config import CONFIG_NAME, SELECT_NAME_RE
from reprobuild.project.imports import canonical, command_imports, distributions_for

RESOLVED_NAME = "requirements.lock"
# Where init writes the sdists' build requirements (reprobuild.locks.buildlock's name for it).
BUILD_LOCK_NAME = "build-requirements.lock"
# The native and hashed locks used in place, in the order they are looked for.
LOCK_NAMES = ("uv.lock", "poetry.lock", "pdm.lock", "Pipfile.lock", "pylock.toml")
NATIVE_NAMES = ("uv.lock", "poetry.lock", "pdm.lock", "Pipfile.lock")
REQUIREMENT_NAMES = ("requirements.lock", "requirements.txt", "requirements.in")
# The Pythons a native lock is read for, newest first: init takes the newest one whose
# requires-python and locked wheels both allow it (--python overrides).
PYTHONS = ("3.13", "3.12", "3.11", "3.10", "3.9", "3.8")
# The Python of a lock that does not say which it was made for (a requirements file whose
# name, header and wheels say none, a pylock.toml), and the one unhashed requirements are
# resolved for.
DEFAULT_PYTHON = "3.11"
COMMAND_FILES = ("train.py", "main.py")
# Never included: data, environments, caches, build outputs, VCS folders.
SKIP = frozenset(
    {
        ".git",
        ".hg",
        ".svn",
        ".venv",
        "venv",
        "env",
        ".env",
        "__pycache__",
        ".mypy_cache",
        ".pytest_cache",
        ".ruff_cache",
        ".tox",
        ".nox",
        ".ipynb_checkpoints",
        ".idea",
        ".vscode",
        ".reprobuild",
        "node_modules",
        "data",
        "datasets",
        "dataset",
        "checkpoints",
        "outputs",
        "output",
        "runs",
        "wandb",
        "mlruns",
        "lightning_logs",
        "logs",
        "build",
        "dist",
        "site",
    }
)
_SKIP_SUFFIXES = (".egg-info", ".pyc", ".ckpt", ".pt", ".pth", ".safetensors", ".npz", ".h5")
_NAME_RE = re.compile(r"[^a-z0-9._-]+")
_UV_PLATFORM = "x86_64-manylinux_2_28"


class InitError(ReprobuildError):
    """``reprobuild init`` cannot write a project file for this directory."""


@dataclass(frozen=True)
class InitOptions:
    python: str | None = None
    extras: tuple[str, ...] = ()
    groups: tuple[str, ...] = ()
    gpu: bool = False
    base: str | None = None
    command: tuple[str, ...] = ()
    # The lock, relative to the project (--lock): any file name; its format from its content.
    lock: str | None = None
    # Resolve unhashed requirements with only what the index had before this day (YYYY-MM-DD,
    # uv's --exclude-newer): the versions the project had when it was written.
    exclude_newer: str | None = None


@dataclass(frozen=True)
class BaseFacts:
    """What init reads off the base it is given (``--base``): its CPython (``X.Y``), machine
    and glibc (``Services.base_facts``: the catalog's record for a catalog name, else the base
    itself, run once with no network and a timeout)."""

    python: str
    machine: str = "x86_64"
    glibc: str | None = None


@dataclass(frozen=True)
class Services:
    """What init needs from the layers above it.

    ``read_lock(path, python, extras, groups)`` validates a lock for that selection and
    returns ``(hash-checked requirements text, package names, index URLs, notes)``, raising
    :class:`~reprobuild.errors.ReprobuildError` on a refusal. ``base_for(python, gpu)`` names a
    catalog base carrying that Python, or ``None``. ``lock_format(path)`` names a lock's
    format (``uv``, ``poetry``, ``pipfile``, ``pdm``, ``pylock`` or ``requirements``) from its
    name, else its content. ``uv`` is the pinned resolver's binary. ``base_facts(ref)`` reads
    a given base (:class:`BaseFacts`; None: not known, as before init read bases).
    """

    read_lock: Callable[
        [Path, str, tuple[str, ...], tuple[str, ...]],
        tuple[str, tuple[str, ...], tuple[str, ...], tuple[str, ...]],
    ]
    base_for: Callable[[str, bool], str | None]
    lock_format: Callable[[Path], str]
    # One line when a Python is past its upstream end of life (None: still supported).
    eol_warning: Callable[[str], str | None] = lambda _python: None
    uv: str = "uv"
    # ``build_lock(path, python, base, extras, groups)``: the build-requirements lock's text
    # for the sdists the lock builds on that Python, their backends asked in ``base`` (the
    # chosen one: a catalog name or a pinned ref; reprobuild.locks.buildlock), None when it
    # builds none. The default builds nothing.
    build_lock: Callable[[Path, str, str, tuple[str, ...], tuple[str, ...]], str | None] = (
        lambda _path, _python, _base, _extras, _groups: None
    )
    base_facts: Callable[[str], BaseFacts | None] = lambda _ref: None
    # ``lock_python(path, want)``: the CPython a requirements lock is for and why, or None
    # when nothing says, or nothing contradicts ``want``, the given base's CPython
    # (reprobuild.locks.lockpython: its name, header, locked wheels).
    lock_python: Callable[[Path, str | None], tuple[str, str] | None] = lambda _path, _want: None
    # ``resolver_env()``: the environment the pinned uv resolves in and the local wheel
    # folders it may read (reprobuild.locks.fetchnet: none of the host's pip or uv settings,
    # REPROBUILD_FIND_LINKS's folders); the default passes the process's environment as is.
    resolver_env: Callable[[], tuple[dict[str, str], list[str]]] = lambda: (dict(os.environ), [])
    # ``selectors(path)``: the ``(extras, groups)`` a native lock offers (reprobuild.locks.
    # selectors); the default offers none, and init then adds none for the command's imports.
    selectors: Callable[[Path], tuple[tuple[str, ...], tuple[str, ...]]] = lambda _path: ((), ())


@dataclass(frozen=True)
class LockFacts:
    """The lock as init found it: its file (in place, or the one it resolves into), its
    format, and what it holds for the Python init read it for."""

    name: str
    native: bool
    python: str
    names: tuple[str, ...]
    indexes: tuple[str, ...]
    notes: tuple[str, ...]
    resolved: str | None = None  # the requirements.lock text init resolved, to be written
    resolved_from: str | None = None


@dataclass(frozen=True)
class Choice:
    """init's decision, each part with its reason (said as a note)."""

    python: str
    python_why: str
    base: str
    base_why: str
    gpu: bool
    cuda_wheels: bool  # the lock brings CUDA as wheels: a GPU image on a plain Python base
    lock: LockFacts


@dataclass
class InitResult:
    config: Path
    written: list[Path] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    warnings: list[str] = field(default_factory=list)
    choice: Choice | None = None  # what init decided (the property tests hold the plan to it)


def init_project(
    directory: Path,
    options: InitOptions,
    services: Services,
    *,
    log: Callable[[str], None] = lambda _: None,
) -> InitResult:
    """Write ``directory/reprobuild.yaml`` (and ``requirements.lock`` when one is resolved):
    facts first (the lock, the base, the flags), then one choice, then the files, last."""
    root = Path(directory)
    if not root.is_dir():
        raise InitError(f"{root}: no such project directory")
    config = root / CONFIG_NAME
    if config.exists() or config.is_symlink():
        raise InitError(
            f"{config}: already exists; init never overwrites it",
            hint="edit it, or remove it and run init again",
        )
    _check_options(options)
    result = InitResult(config=config)
    lock_name, resolve_from = _find_lock(root, options.lock, services)
    command = _command(root, options.command)
    base = services.base_facts(options.base) if options.base else None
    choice = choose(root, (lock_name, resolve_from), base, options, services)
    options, selected = _select_for_imports(root, command, options, choice, services)
    if selected:
        choice = choose(root, (lock_name, resolve_from), base, options, services)
    result.choice = choice
    result.notes.append(choice.python_why)
    result.notes.extend(choice.lock.notes)
    warning = services.eol_warning(choice.python)
    if warning is not None:
        result.warnings.append(warning)
    if choice.base_why:
        result.notes.append(choice.base_why)
    result.notes.extend(selected)
    _write_project(root, choice, command, options, services, result)
    for note in result.notes:
        log(f"note: {note}")
    for warning in result.warnings:
        log(f"warning: {warning}")
    return result


def choose(
    root: Path,
    found: tuple[str | None, str | None],
    base: BaseFacts | None,
    options: InitOptions,
    services: Services,
) -> Choice:
    """The Python, the base and the variant, from the lock, the base's facts and the flags."""
    lock_name, resolve_from = found
    asked, asked_why = _asked_python(options, base)
    if resolve_from is not None:
        lock = _resolved_lock(root, resolve_from, asked or DEFAULT_PYTHON, options, services)
        why = (
            f"resolved {resolve_from} with uv pip compile into {RESOLVED_NAME} (sha256-hashed, "
            f"CPython {lock.python} on {_UV_PLATFORM}"
            + (f"; {asked_why}" if base is not None else "")
            + ")"
            + (
                f", with what the index had before {options.exclude_newer}"
                if options.exclude_newer
                else ": the newest versions the index has today, which may not be the ones the "
                "project was written for (`--exclude-newer YYYY-MM-DD` resolves as of a day)"
            )
        )
    else:
        assert lock_name is not None
        if options.exclude_newer:
            raise InitError(
                f"--exclude-newer {options.exclude_newer}: {lock_name} is used in place, its "
                "pins chosen already (--exclude-newer resolves unhashed requirements)",
                hint="drop --exclude-newer",
            )
        lock, why = _lock_in_place(root, lock_name, (asked, asked_why), options, services)
    # A lock that carries CUDA as wheels (nvidia-*, torch from a /whl/cuXYZ index) brings its
    # own GPU stack: it builds on the plain Python base, and the image runs on CPU and under
    # `docker run --gpus all`. Only a lock without one takes an NGC base (with --gpu).
    cuda_wheels = _needs_gpu(lock.names, lock.indexes)
    gpu = options.gpu or cuda_wheels
    base_ref = options.base or services.base_for(lock.python, gpu and not cuda_wheels)
    if base_ref is None and gpu and not cuda_wheels and asked is None and lock.native:
        lock, why, base_ref = _ngc_python(root, lock, options, services)
    if base_ref is None:
        raise InitError(
            f"no catalog base carries CPython {lock.python}"
            + (" with a GPU stack" if gpu and not cuda_wheels else "")
            + f", which {lock.name} needs",
            hint="give one: reprobuild init --base REF@sha256:<digest> (an image with "
            f"CPython {lock.python})",
        )
    base_why = (
        f"{lock.name} carries CUDA as wheels: the image is built on the plain Python base "
        f"{base_ref} and runs on CPU and under `docker run --gpus all`"
        if cuda_wheels
        else ""
    )
    return Choice(lock.python, why, base_ref, base_why, gpu, cuda_wheels, lock)


def _select_for_imports(
    root: Path, command: tuple[str, ...], options: InitOptions, choice: Choice, services: Services
) -> tuple[InitOptions, list[str]]:
    """The options with each extra or group of a native lock that brings a package the
    command imports and the selection lacks (``python examples/fit.py`` importing matplotlib,
    which the lock has in its ``docs`` group only), and a note for each: ``uv run`` and
    ``poetry run`` find such a package in the developer's environment, the image would not.
    Greedy: first the one that brings the most of the missing modules, then the one that
    adds the fewest packages, then by name."""
    lock = choice.lock
    if not lock.native or lock.resolved is not None:
        return options, []
    have = {canonical(n) for n in lock.names}
    missing = {
        module: where
        for module, where in command_imports(root, command).items()
        if not have & set(distributions_for(module))
    }
    if not missing:
        return options, []
    brings = _what_each_brings(root, options, choice, services, have)
    notes: list[str] = []
    while missing and brings:
        (kind, name), hit = _best_selector(brings, missing)
        if not hit:
            break
        del brings[(kind, name)]
        if kind == "extra":
            options = replace(options, extras=(*options.extras, name))
        else:
            options = replace(options, groups=(*options.groups, name))
        # a file imports a module; a command (`python -m pytest`, `pytest`) runs it
        said = "; ".join(
            f"{where} {'runs' if where.startswith('`') else 'imports'} "
            + ", ".join(m for m in hit if missing[m] == where)
            for where in sorted({missing[m] for m in hit})
        )
        notes.append(
            f"{said}, which {lock.name} installs only with its {kind} {name}: selected it, as "
            f"`--{kind} {name}` would (select: in reprobuild.yaml)"
        )
        for module in hit:
            del missing[module]
    return options, notes


def _what_each_brings(
    root: Path, options: InitOptions, choice: Choice, services: Services, have: set[str]
) -> dict[tuple[str, str], set[str]]:
    """Each extra and group of the lock not asked for yet, as ``(kind, name)``, with the
    packages (canonical names) it adds to the selection for the chosen Python; one the lock's
    reader refuses (not for this Python or platform) or whose name reprobuild.yaml cannot
    hold is left out."""
    lock = choice.lock
    offered_extras, offered_groups = services.selectors(root / lock.name)
    brings: dict[tuple[str, str], set[str]] = {}
    for kind, names, chosen in (
        ("group", offered_groups, options.groups),
        ("extra", offered_extras, options.extras),
    ):
        for name in names:
            if name in chosen or not SELECT_NAME_RE.fullmatch(name):
                continue
            extras = (*options.extras, name) if kind == "extra" else options.extras
            groups = (*options.groups, name) if kind == "group" else options.groups
            try:
                _, got, _, _ = services.read_lock(root / lock.name, choice.python, extras, groups)
            except ReprobuildError:
                continue
            brings[(kind, name)] = {canonical(n) for n in got} - have
    return brings


def _best_selector(
    brings: dict[tuple[str, str], set[str]], missing: dict[str, str]
) -> tuple[tuple[str, str], list[str]]:
    """The extra or group that brings the most of the ``missing`` modules (then the fewest
    packages, then by name), and the modules it brings."""

    def score(item: tuple[tuple[str, str], set[str]]) -> tuple[int, int, tuple[str, str]]:
        key, added = item
        hits = sum(1 for m in missing if added & set(distributions_for(m)))
        return (-hits, len(added), key)

    key, added = min(brings.items(), key=score)
    return key, sorted(m for m in missing if added & set(distributions_for(m)))


def _asked_python(options: InitOptions, base: BaseFacts | None) -> tuple[str | None, str]:
    """The Python the flags fix, and why: --python, else the given base's; both given must
    agree."""
    if options.python and base is not None and options.python != base.python:
        raise InitError(
            f"--python {options.python} is not the CPython of base {options.base} ({base.python})",
            hint=f"drop --python (init reads the base), or give a base with CPython "
            f"{options.python}",
        )
    if options.python:
        return options.python, "as --python asks"
    if base is not None:
        return base.python, f"the CPython of base {options.base}"
    return None, ""


def _resolved_lock(
    root: Path, source: str, python: str, options: InitOptions, services: Services
) -> LockFacts:
    """Unhashed requirements (or a lockless pyproject.toml) resolved into a hashed lock for
    ``python``, read back as the build will read it (nothing is written yet)."""
    _refuse_existing(root / RESOLVED_NAME)
    text = _resolve(root, source, python, options, services)
    probe = _write_temp(root, RESOLVED_NAME, text)
    try:
        _, names, indexes, notes = services.read_lock(probe, python, (), ())
    finally:
        probe.unlink(missing_ok=True)
    return LockFacts(RESOLVED_NAME, False, python, names, indexes, notes, text, source)


def _lock_in_place(
    root: Path,
    lock_name: str,
    asked_for: tuple[str | None, str],
    options: InitOptions,
    services: Services,
) -> tuple[LockFacts, str]:
    """The lock used in place, read for the Python asked for (the flag's or the base's), else
    the newest it installs on (a native lock) or the one it says it was made for."""
    native = services.lock_format(root / lock_name) in NATIVE_FORMATS
    if not native and (options.extras or options.groups):
        raise InitError(
            f"{root / lock_name}: --extra and --group choose from a native lock "
            f"({', '.join(NATIVE_NAMES)}); {lock_name} has its pins chosen already",
            hint="drop --extra/--group, or relock with the extras and groups you want",
        )
    asked, asked_why = asked_for
    found = None if native or options.python else services.lock_python(root / lock_name, asked)
    said, said_why = found or (None, "")
    if said and asked and said != asked and not options.python:
        raise InitError(
            f"{root / lock_name}: is for CPython {said} ({said_why}), but "
            f"base {options.base} has CPython {asked}",
            hint=f"relock for CPython {asked}, or give a base with CPython {said}",
        )
    candidates = (asked,) if asked else PYTHONS if native else (said or DEFAULT_PYTHON,)
    try:
        python, _rendered, names, indexes, notes, skipped = _pick_python(
            root / lock_name, candidates, options, services
        )
    except ReprobuildError as exc:
        # only a refusal about the base's Python is the base's to explain (as _pick_python
        # tells them apart); a stale or unreadable lock keeps its own error and hint
        if asked is None or options.python or f"Python {asked}" not in exc.message:
            raise
        raise InitError(
            f"{exc.message} (CPython {asked} is the Python of base {options.base})",
            hint=f"relock for CPython {asked}, or give a base with a CPython the lock allows",
        ) from None
    lock = LockFacts(lock_name, native, python, names, indexes, notes)
    return lock, _python_note(lock, options, asked_why or None, said_why, skipped)


def _python_note(
    lock: LockFacts,
    options: InitOptions,
    asked_why: str | None,
    said_why: str,
    skipped: list[tuple[str, str]],
) -> str:
    """Why init read the lock for the Python it did, in one line."""
    if asked_why:
        why = asked_why
    elif lock.native:
        why = _newest_because(skipped)
    elif said_why:
        why = said_why
    else:
        why = f"it does not say which Python it was made for; --python X.Y if not {DEFAULT_PYTHON}"
    if not lock.native:
        return f"{lock.name} is for CPython {lock.python} ({why})"
    return (
        f"{lock.name} read for CPython {lock.python} ({why})"
        + (f", extras {', '.join(options.extras)}" if options.extras else "")
        + (f", groups {', '.join(options.groups)}" if options.groups else "")
        + ": the choice is in reprobuild.yaml's select"
    )


def _ngc_python(
    root: Path, lock: LockFacts, options: InitOptions, services: Services
) -> tuple[LockFacts, str, str | None]:
    """--gpu on a native lock without CUDA wheels takes an NGC base: the lock read again for
    the newest Python an NGC base carries."""
    ngc = tuple(p for p in PYTHONS if services.base_for(p, True))
    if not ngc:
        return lock, "", None
    try:
        python, _rendered, names, indexes, notes, skipped = _pick_python(
            root / lock.name, ngc, options, services
        )
    except ReprobuildError as exc:
        raise InitError(
            exc.message,
            hint=f"the NGC bases carry CPython {', '.join(ngc)}: relock for it, or "
            f"give a GPU base with CPython {lock.python}: reprobuild init --gpu "
            f"--base REF@sha256:<digest> {root}",
        ) from None
    why = (
        f"{lock.name} read for CPython {python} (the newest an NGC base carries"
        + (f"; CPython {skipped[0][0]} does not fit the lock" if skipped else "")
        + "): the choice is in reprobuild.yaml's select"
    )
    again = LockFacts(lock.name, True, python, names, indexes, notes)
    return again, why, services.base_for(python, True)


def _write_project(
    root: Path,
    choice: Choice,
    command: tuple[str, ...],
    options: InitOptions,
    services: Services,
    result: InitResult,
) -> None:
    """The files, last: the build-requirements lock and reprobuild.yaml (and the resolved
    requirements.lock), each whole or not at all; a failure removes what this run wrote."""
    lock = choice.lock
    # The sdists the lock builds: their build requirements, resolved and hashed beside it.
    extra = _build_lock_file(root, lock.name, choice, options, services, result)
    includes = _includes(root, exclude={CONFIG_NAME, lock.name, *LOCK_NAMES, BUILD_LOCK_NAME})
    kind = (choice.gpu, choice.cuda_wheels, lock.native)
    yaml_text = _config_text(
        root, lock.name, choice.base, kind, command, includes, choice.python, options
    )
    yaml_text += "".join(
        f"build_lock: {n}  # the sdists' build requirements, hashed\n" for n in extra
    )
    yaml_text += _source_comments(result.notes)
    if lock.resolved is not None:
        _link_new(root, RESOLVED_NAME, lock.resolved)
        result.written.append(root / RESOLVED_NAME)
    try:
        _link_all(root, extra, result)
        _link_new(root, CONFIG_NAME, yaml_text)
    except InitError:
        for path in result.written:
            path.unlink(missing_ok=True)
        raise
    result.written.append(result.config)


def _source_comments(notes: list[str]) -> str:
    """reprobuild.yaml's comment on what the lock installs from source: each git commit and
    project folder built into a wheel in the image, and the project itself copied by
    `include` (written only when the lock builds any; one printable line per note)."""
    built = [n for n in notes if " is built into a wheel in the image from " in n]
    if not built:
        return ""
    copied = [n for n in notes if " itself is not installed from the lock" in n]
    lines = [n for n in (*copied, *built) if n.isprintable()]
    return "# Installed from source:\n" + "".join(f"#   {n}\n" for n in lines)


_PYTHON_RE = re.compile(r"3\.[0-9]{1,2}")
_BASE_RE = re.compile(r"[A-Za-z0-9][A-Za-z0-9._/:@+-]*")


def _check_options(options: InitOptions) -> None:
    """Every value that init writes into reprobuild.yaml is plain text of a known shape."""
    if options.python is not None and not _PYTHON_RE.fullmatch(options.python):
        raise InitError(f"--python {options.python!r} is not a Python version like 3.11")
    for flag, values in (("--extra", options.extras), ("--group", options.groups)):
        for value in values:
            if not SELECT_NAME_RE.fullmatch(value):
                raise InitError(f"{flag} {value!r} is not a name (letters, digits, '.', '_', '-')")
    if options.base is not None and not _BASE_RE.fullmatch(options.base):
        raise InitError(
            f"--base {options.base!r} is not an image reference (NAME@sha256:<64 hex> or a "
            "catalog name)"
        )
    if options.exclude_newer is not None and not _is_day(options.exclude_newer):
        raise InitError(
            f"--exclude-newer {options.exclude_newer!r} is not a day like 2024-09-10 (YYYY-MM-DD)"
        )
    for word in options.command:
        if any(ord(c) < 32 or ord(c) == 127 for c in word):
            raise InitError(f"--command word {word!r} holds a control character")


def _is_day(text: str) -> bool:
    if not re.fullmatch(r"[0-9]{4}-[0-9]{2}-[0-9]{2}", text):
        return False
    try:
        datetime.date.fromisoformat(text)
    except ValueError:
        return False
    return True


def _build_lock_file(
    root: Path,
    lock_name: str,
    choice: Choice,
    options: InitOptions,
    services: Services,
    result: InitResult,
) -> dict[str, str]:
    """The build-requirements lock for the sdists the lock builds, as {file name: text}
    (empty: it builds none). A requirements lock init resolves is not written yet: it is read
    from a copy under its own name (the build lock's header names it), its sdists found on
    the index by their locked hashes, as `reprobuild build-lock` would later."""
    if choice.lock.resolved is not None:
        with tempfile.TemporaryDirectory(prefix="reprobuild-init-") as tmp:
            probe = Path(tmp) / lock_name
            probe.write_text(choice.lock.resolved, encoding="utf-8")
            text = services.build_lock(probe, choice.python, choice.base, (), ())
    elif (root / lock_name).is_file():
        text = services.build_lock(
            root / lock_name, choice.python, choice.base, options.extras, options.groups
        )
    else:
        return {}
    if text is None:
        return {}
    _refuse_existing(root / BUILD_LOCK_NAME)
    count = text.count(" builds with: ")
    result.notes.append(
        f"{lock_name} builds {count} package{'' if count == 1 else 's'} from "
        + (
            "its sdist: its build requirements are"
            if count == 1
            else "their sdists: their build requirements are"
        )
        + f" pinned in {BUILD_LOCK_NAME}"
    )
    return {BUILD_LOCK_NAME: text}


def _refuse_existing(path: Path) -> None:
    if path.exists() or path.is_symlink():
        raise InitError(
            f"{path}: already exists; init never overwrites it",
            hint="name it in reprobuild.yaml yourself, or move it away and run init again",
        )


def _find_lock(root: Path, given: str | None, services: Services) -> tuple[str | None, str | None]:
    """(lock used in place, or None; file to resolve from, or None)."""
    if given is not None:
        return _given_lock(root, given, services)
    for name in LOCK_NAMES:
        if (root / name).is_file():
            return name, None
    for path in sorted(root.glob("pylock.*.toml")):
        return path.name, None
    for name in REQUIREMENT_NAMES:
        path = root / name
        if path.is_file():
            if _hashed(path):
                return name, None
            return None, name
    # A hashed requirements file under another name (requirements_lock_3_12.txt, eval.txt
    # from pip-compile): used when it is the only one, named when there are several.
    hashed = [p.name for p in sorted(root.glob("*.txt")) if p.is_file() and _hashed(p)]
    if len(hashed) == 1:
        return hashed[0], None
    if len(hashed) > 1:
        raise InitError(
            f"{root}: several hashed requirements files ({', '.join(hashed[:5])}"
            + (", ..." if len(hashed) > 5 else "")
            + "): init cannot tell which one is the lock",
            hint=f"name it: reprobuild init --lock {hashed[0]} {root}",
        )
    if (root / "pyproject.toml").is_file():
        return None, "pyproject.toml"
    raise InitError(
        f"{root}: no lock or requirements found (looked for {', '.join(LOCK_NAMES)}, "
        f"{', '.join(REQUIREMENT_NAMES)}, hashed *.txt, pyproject.toml)",
        hint="name the lock (reprobuild init --lock FILE), or add a requirements.txt listing "
        "the packages the project imports",
    )


def _hashed(path: Path) -> bool:
    """True for a requirements file with hashes (read whole: hashes may start late)."""
    try:
        text = path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        raise InitError(f"{path}: cannot read: {exc}") from None
    return "--hash=" in text


def _given_lock(root: Path, given: str, services: Services) -> tuple[str | None, str | None]:
    """``--lock FILE``: a file inside the project, used in place (any native lock, a
    ``pylock.toml`` or a hashed requirements file, whatever its name) or resolved (an
    unhashed requirements file)."""
    allowed = "a lockfile inside the project directory, e.g. --lock requirements_lock_3_12.txt"
    if not given or given.startswith("/") or "\\" in given:
        raise InitError(f"--lock {given!r} is not a relative path: give {allowed}")
    parts = Path(given).parts
    if ".." in parts or not re.fullmatch(r"[A-Za-z0-9._+/-]+", given):
        raise InitError(
            f"--lock {given!r} is not a plain path inside the project (letters, digits, "
            f"'.', '_', '+', '-', '/'; no '..'): give {allowed}"
        )
    path = root / given
    if path.is_symlink() or not path.is_file():
        what = "is a symlink" if path.is_symlink() else "does not exist or is not a file"
        raise InitError(f"--lock {given!r}: {path} {what}: give {allowed}")
    name = Path(given).as_posix()
    if services.lock_format(path) != "requirements" or _hashed(path):
        return name, None
    return None, name


NATIVE_FORMATS = frozenset({"uv", "poetry", "pdm", "pipfile"})
# How a rendered lock names a package built from its sdist (Lock.render's comment line).
_BUILT_RE = re.compile(r"^# ([A-Za-z0-9._-]+==\S+): built from ", re.MULTILINE)


def _pick_python(
    lock: Path, candidates: Sequence[str], options: InitOptions, services: Services
) -> tuple[str, str, tuple[str, ...], tuple[str, ...], tuple[str, ...], list[tuple[str, str]]]:
    """The first Python of ``candidates`` the lock really installs on (requires-python and
    wheels both), and why each one before it was passed over."""
    first: ReprobuildError | None = None
    skipped: list[tuple[str, str]] = []
    # The newest Python that needs an sdist built, kept in case none installs every package
    # from a wheel (a wheel is preferred: a build needs its toolchain on the base).
    fallback: tuple[str, str, tuple[str, ...], tuple[str, ...], tuple[str, ...]] | None = None
    fallback_skipped: list[tuple[str, str]] = []
    for python in candidates:
        try:
            rendered, names, indexes, notes = services.read_lock(
                lock, python, options.extras, options.groups
            )
        except ReprobuildError as exc:
            first = first or exc
            if f"Python {python}" not in exc.message:  # not about this Python: no other fits
                raise
            skipped.append((python, exc.message))
            continue
        built = _BUILT_RE.findall(rendered)
        if built:
            if fallback is None:
                fallback = (python, rendered, names, indexes, notes)
                fallback_skipped = list(skipped)
            skipped.append(
                (python, f"{lock.name}: {built[0]} has no wheel for it (its sdist would be built)")
            )
            continue
        return python, rendered, names, indexes, notes, skipped
    if fallback is not None:
        return (*fallback, fallback_skipped)
    assert first is not None
    if len(candidates) == 1:
        raise first
    raise InitError(
        f"{first.message} (nor does it fit any older CPython, down to {candidates[-1]})",
        hint=first.hint,
    )


def _newest_because(skipped: list[tuple[str, str]]) -> str:
    """Why init took the Python it did: the newest the lock allows, and what ruled out the
    newest one passed over (its reader's refusal, shortened)."""
    if not skipped:
        return "the newest Python reprobuild builds, and the lock allows it"
    newest, reason = skipped[0]
    reason = reason.split(": ", 1)[-1] if ": " in reason else reason  # no FILE:LINE
    reason = re.split(r" \(|: | on linux ", reason, maxsplit=1)[0]  # the finding, not the why
    if len(reason) > 100:
        reason = reason[:97] + "..."
    return f"the newest the lock allows; CPython {newest}: {reason}"


def _resolve(root: Path, source: str, python: str, options: InitOptions, services: Services) -> str:
    argv = [
        services.uv, "pip", "compile", "--generate-hashes", "--no-header",
        "--python-version", python, "--python-platform", _UV_PLATFORM,
    ]  # fmt: skip
    for extra in options.extras:
        argv += ["--extra", extra]
    for group in options.groups:
        argv += ["--group", f"pyproject.toml:{group}"]
    env, links = services.resolver_env()
    for link in links:
        argv += ["--find-links", link]
    if options.exclude_newer:
        argv += ["--exclude-newer", options.exclude_newer]
    argv.append(source)
    try:
        proc = subprocess.run(
            argv, cwd=root, capture_output=True, text=True, check=False, timeout=900, env=env
        )
    except FileNotFoundError:
        raise InitError(f"cannot run the resolver {services.uv!r}: not found") from None
    except subprocess.TimeoutExpired:
        raise InitError(f"resolving {source} took more than 15 minutes") from None
    if proc.returncode != 0:
        raise InitError(
            f"{root / source}: cannot resolve it for CPython {python} on {_UV_PLATFORM}: "
            f"{failure_reason(proc.stderr, proc.returncode)}",
            hint="fix the requirement uv names, or give --python for another Python",
        )
    newer = f" --exclude-newer {options.exclude_newer}" if options.exclude_newer else ""
    return (
        f"# Resolved by `reprobuild init` from {source} with uv pip compile --generate-hashes"
        f"{newer}\n"
        f"# for CPython {python} on {_UV_PLATFORM}. To update it, edit {source} and run\n"
        "# `uv pip compile --generate-hashes` again (reprobuild.yaml's lock line stays valid).\n"
        + proc.stdout
    )


def _write_temp(root: Path, name: str, text: str) -> Path:
    fd, tmp = tempfile.mkstemp(prefix=f".{name}.", suffix=".tmp", dir=root)
    with os.fdopen(fd, "w", encoding="utf-8") as fh:
        fh.write(text)
    return Path(tmp)


def _link_all(root: Path, files: dict[str, str], result: InitResult) -> None:
    for name, content in files.items():
        _link_new(root, name, content)
        result.written.append(root / name)


def _link_new(root: Path, name: str, text: str) -> None:
    """Write ``root/name`` whole, or not at all; refuse if it exists (even if it appears
    between the check and the write)."""
    tmp = _write_temp(root, name, text)
    try:
        os.chmod(tmp, 0o644)
        os.link(tmp, root / name)
    except FileExistsError:
        raise InitError(f"{root / name}: already exists; init never overwrites it") from None
    finally:
        tmp.unlink(missing_ok=True)


def _command(root: Path, given: tuple[str, ...]) -> tuple[str, ...]:
    if given:
        return given
    found = [name for name in COMMAND_FILES if (root / name).is_file()]
    scripts: list[str] = []
    pyproject = root / "pyproject.toml"
    if pyproject.is_file():
        try:
            data = tomllib.loads(pyproject.read_text(encoding="utf-8"))
            scripts = sorted(data.get("project", {}).get("scripts", {}))
        except (OSError, UnicodeDecodeError, tomllib.TOMLDecodeError):
            scripts = []
    choices = [("python", name) for name in found] + [(name,) for name in scripts]
    if len(choices) == 1:
        return choices[0]
    listed = ", ".join(" ".join(c) for c in choices) or "no train.py, main.py or [project.scripts]"
    raise InitError(
        f"{root}: cannot tell which command runs the training ({listed})",
        hint="give it: reprobuild init --command 'python train.py'",
    )


def _needs_gpu(names: tuple[str, ...], indexes: tuple[str, ...]) -> bool:
    cuda_index = any(re.search(r"/whl/cu\d+", url) for url in indexes)
    return cuda_index or any(n.startswith("nvidia-") for n in names)


def _includes(root: Path, exclude: set[str]) -> list[str]:
    """Top-level files and folders to copy: git's tracked files when this is a repository."""
    names: set[str] | None = None
    if (root / ".git").exists():
        try:
            proc = subprocess.run(
                ["git", "-C", str(root), "ls-files", "-z"],
                capture_output=True, check=False, timeout=60,
            )  # fmt: skip
        except (OSError, subprocess.TimeoutExpired):
            proc = None
        if proc is not None and proc.returncode == 0:
            names = {p.split("/", 1)[0] for p in proc.stdout.decode(errors="replace").split("\0")}
            names.discard("")
    if names is None:
        names = {p.name for p in root.iterdir()}
    out = []
    for name in sorted(names):
        path = root / name
        if name in exclude or name in SKIP or name.startswith("."):
            continue
        if name.endswith(_SKIP_SUFFIXES) or path.is_symlink() or not path.exists():
            continue
        if name in ("pyproject.toml", "README.md", "LICENSE") or name.startswith("requirements"):
            continue
        if not re.fullmatch(r"[A-Za-z0-9._+-]+", name):
            continue  # a name YAML or a shell would misread is left for the user to add
        out.append(name + ("/" if path.is_dir() else ""))
    return out


def _config_text(
    root: Path,
    lock: str,
    base: str,
    kind: tuple[bool, bool, bool],
    command: tuple[str, ...],
    includes: list[str],
    python: str,
    options: InitOptions,
) -> str:
    gpu, cuda_wheels, native = kind  # a GPU image; its CUDA from the lock's wheels; uv.lock...
    name = _NAME_RE.sub("-", root.resolve().name.lower()).strip("-._") or "project"
    quoted_command = ", ".join(_yaml_str(word) for word in command)
    lines = [
        "# Written by `reprobuild init`; edit freely. Build with `reprobuild image .`.",
        f"name: {name}",
        f"lock: {_yaml_str(lock)}" + "  # every package pinned and sha256-checked",
    ]
    if gpu:
        lines.append(
            f"gpu_lock: {_yaml_str(lock)}  # the GPU image's lock"
            + (" (it carries CUDA as wheels)" if cuda_wheels else "")
        )
    lines.append("base:")
    lines.append(f"  {'gpu' if gpu else 'cpu'}: {_yaml_str(base)}  # CPython {python}")
    if cuda_wheels:
        lines.append(
            "# a plain Python base: CUDA, cuDNN and NCCL come from the lock's wheels; the image "
            "runs on CPU and under `docker run --gpus all`"
        )
    lines += [
        "seed: 0",
        "determinism: strict              # strict | warn | off",
        "include:                         # copied into the image (no data, no caches)",
    ]
    if includes:
        lines += [f"  - {_yaml_str(item.rstrip('/'))}" for item in includes]
    else:
        lines[-1] = "include: []"
    lines.append(f"command: [{quoted_command}]")
    if native:
        lines += [
            f"select:                          # what {lock} installs on this base",
            f'  python: "{python}"',
            f"  extras: [{', '.join(options.extras)}]",
            f"  groups: [{', '.join(options.groups)}]",
            "  default_groups: false          # true: also the groups the tool installs unasked",
        ]
    return "\n".join(lines) + "\n"


def _yaml_str(value: str) -> str:
    """``value`` as a YAML scalar that reads back as that same string: plain where the
    project's own loader reads it so (``train.py``), else double-quoted (``"20000"``,
    ``"true"``, ``"3.10"``, ``"--lr=1e-3"``, quotes and backslashes escaped by PyYAML)."""
    plain = re.fullmatch(r"[A-Za-z0-9._/@:+-]+", value) and value[0] not in "@:-"
    if plain and _reads_back(value):
        return value
    quoted = yaml.safe_dump(value, default_style='"', allow_unicode=True, width=1 << 30)
    return quoted.rstrip("\n")


def _reads_back(plain: str) -> bool:
    """True when the project file's loader reads ``plain``, unquoted, as that string (not an
    integer, float, boolean or null, and not refused, as ``010`` is)."""
    try:
        return bool(load_yaml(f"- {plain}\n", lambda _w, p: InitError(p)) == [plain])
    except ReprobuildError:
        return False
