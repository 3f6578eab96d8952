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

import os
import re
import subprocess
import tempfile
import tomllib
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from reprobuild.errors import ReprobuildError
from reprobuild.project.config import CONFIG_NAME, SELECT_NAME_RE

RESOLVED_NAME = "requirements.lock"
# The native and hashed locks used in place, in the order they are looked for.
LOCK_NAMES = ("uv.lock", "poetry.lock", "pdm.lock", "Pipfile.lock", "pylock.toml")
NATIVE_NAMES = ("uv.lock", "poetry.lock", "pdm.lock", "Pipfile.lock")
REQUIREMENT_NAMES = ("requirements.lock", "requirements.txt", "requirements.in")
# Pythons tried, in order, when neither --python nor the lock settles it (catalog first).
PYTHONS = ("3.11", "3.12", "3.10", "3.13")
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


@dataclass(frozen=True)
class Services:
    """What init needs from the layers above it.

    ``read_lock(path, python, extras, groups)`` validates a lock for that selection and
    returns ``(hash-checked requirements text, package names, index URLs, notes)``, raising
    :class:`~reprobuild.errors.ReprobuildError` on a refusal. ``base_for(python, gpu)`` names a
    catalog base carrying that Python, or ``None``. ``lock_format(path)`` names a lock's
    format (``uv``, ``poetry``, ``pipfile``, ``pdm``, ``pylock`` or ``requirements``) from its
    name, else its content. ``uv`` is the pinned resolver's binary.
    """

    read_lock: Callable[
        [Path, str, tuple[str, ...], tuple[str, ...]],
        tuple[str, tuple[str, ...], tuple[str, ...], tuple[str, ...]],
    ]
    base_for: Callable[[str, bool], str | None]
    lock_format: Callable[[Path], str] = lambda path: _format_by_name(path.name)
    uv: str = "uv"


@dataclass
class InitResult:
    config: Path
    written: list[Path] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)


def init_project(
    directory: Path,
    options: InitOptions,
    services: Services,
    *,
    log: Callable[[str], None] = lambda _: None,
) -> InitResult:
    """Write ``directory/reprobuild.yaml`` (and ``requirements.lock`` when one is resolved)."""
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
    python_candidates = (options.python,) if options.python else PYTHONS
    text: str | None = None
    if resolve_from is not None:
        _refuse_existing(root / RESOLVED_NAME)
        python = python_candidates[0]
        text = _resolve(root, resolve_from, python, options, services)
        lock_name = RESOLVED_NAME
        result.notes.append(
            f"resolved {resolve_from} with uv pip compile into "
            f"{RESOLVED_NAME} (sha256-hashed, CPython {python} on {_UV_PLATFORM})"
        )
        probe = _write_temp(root, RESOLVED_NAME, text)
        try:
            _, names, indexes, notes = services.read_lock(probe, python, (), ())
        except ReprobuildError:
            probe.unlink(missing_ok=True)
            raise
        probe.unlink(missing_ok=True)
    else:
        assert lock_name is not None
        native = services.lock_format(root / lock_name) in NATIVE_FORMATS
        if not native and (options.extras or options.groups):
            raise InitError(
                f"{root / lock_name}: --extra and --group choose from a native lock "
                f"({', '.join(NATIVE_NAMES)}); {lock_name} has its pins chosen already",
                hint="drop --extra/--group, or relock with the extras and groups you want",
            )
        python, _rendered, names, indexes, notes = _pick_python(
            root / lock_name, python_candidates, options, services
        )
        if native and (options.extras or options.groups or python != PYTHONS[0]):
            result.notes.append(
                f"{lock_name} read for CPython {python}"
                + (f", extras {', '.join(options.extras)}" if options.extras else "")
                + (f", groups {', '.join(options.groups)}" if options.groups else "")
                + ": the choice is in reprobuild.yaml's select"
            )
    result.notes.extend(notes)
    # A lock that carries CUDA as wheels (nvidia-*, torch from a /whl/cuXYZ index) brings its
    # own GPU stack: it builds on the plain Python base, and the image runs on CPU and under
    # `docker run --gpus all`. Only a lock without one takes an NGC base (with --gpu).
    cuda_wheels = _needs_gpu(names, indexes)
    gpu = options.gpu or cuda_wheels
    base = options.base or services.base_for(python, gpu and not cuda_wheels)
    if base is None:
        raise InitError(
            f"no catalog base carries CPython {python}"
            + (" with a GPU stack" if gpu and not cuda_wheels else "")
            + f", which {lock_name} needs",
            hint="give one: reprobuild init --base REF@sha256:<digest> (an image with "
            f"CPython {python})",
        )
    if cuda_wheels:
        result.notes.append(
            f"{lock_name} carries CUDA as wheels: the image is built on the plain Python base "
            f"{base} and runs on CPU and under `docker run --gpus all`"
        )
    includes = _includes(root, exclude={CONFIG_NAME, lock_name, *LOCK_NAMES})
    native = resolve_from is None and services.lock_format(root / lock_name) in NATIVE_FORMATS
    yaml_text = _config_text(
        root, lock_name, base, (gpu, cuda_wheels, native), command, includes, python, options
    )
    if text is not None:
        _link_new(root, RESOLVED_NAME, text)
        result.written.append(root / RESOLVED_NAME)
    try:
        _link_new(root, CONFIG_NAME, yaml_text)
    except InitError:
        for path in result.written:
            path.unlink(missing_ok=True)
        raise
    result.written.append(config)
    for note in result.notes:
        log(f"note: {note}")
    return result


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
    for word in options.command:
        if any(ord(c) < 32 or ord(c) == 127 for c in word):
            raise InitError(f"--command word {word!r} holds a control character")


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


_FORMATS_BY_NAME = {
    "uv.lock": "uv",
    "poetry.lock": "poetry",
    "pdm.lock": "pdm",
    "Pipfile.lock": "pipfile",
    "pylock.toml": "pylock",
}
NATIVE_FORMATS = frozenset({"uv", "poetry", "pdm", "pipfile"})


def _format_by_name(name: str) -> str:
    return _FORMATS_BY_NAME.get(name, "requirements")


def _pick_python(
    lock: Path, candidates: Sequence[str], options: InitOptions, services: Services
) -> tuple[str, str, tuple[str, ...], tuple[str, ...], tuple[str, ...]]:
    """The first Python the lock really installs on (requires-python and wheels both)."""
    first: ReprobuildError | None = None
    for python in candidates:
        try:
            rendered, names, indexes, notes = services.read_lock(
                lock, python, options.extras, options.groups
            )
        except ReprobuildError as exc:
            first = first or exc
            if "Python" not in str(exc) and "wheel" not in str(exc):
                raise
            continue
        return python, rendered, names, indexes, notes
    assert first is not None
    raise first


def _resolve(root: Path, source: str, python: str, options: InitOptions, services: Services) -> str:
    argv = [
        services.uv, "pip", "compile", "--generate-hashes", "--no-header",
        "--python-version", python, "--python-platform", _UV_PLATFORM,
    ]  # fmt: skip
    for extra in options.extras:
        argv += ["--extra", extra]
    for group in options.groups:
        argv += ["--group", f"pyproject.toml:{group}"]
    for link in os.environ.get("PIP_FIND_LINKS", "").split():
        argv += ["--find-links", link]
    argv.append(source)
    try:
        proc = subprocess.run(
            argv, cwd=root, capture_output=True, text=True, check=False, timeout=900
        )
    except FileNotFoundError:
        raise InitError(f"cannot run the resolver {services.uv!r}: not found") from None
    except subprocess.TimeoutExpired:
        raise InitError(f"resolving {source} took more than 15 minutes") from None
    if proc.returncode != 0:
        lines = [ln.strip() for ln in proc.stderr.splitlines() if ln.strip()]
        reason = next((ln for ln in lines if "No solution" in ln or "error" in ln), None)
        reason = reason or (lines[0] if lines else f"exit status {proc.returncode}")
        raise InitError(
            f"{root / source}: cannot resolve it for CPython {python} on {_UV_PLATFORM}: "
            f"{reason[:300]}",
            hint="fix the requirement uv names, or give --python for another Python",
        )
    return (
        f"# Resolved by `reprobuild init` from {source} with uv pip compile --generate-hashes\n"
        f"# for CPython {python} on {_UV_PLATFORM}. To update it, edit {source} and run\n"
        "# `uv pip compile --generate-hashes` again (reprobuild.yaml's lock line stays valid).\n"
        + proc.stdout
    )


def _write_temp(root: Path, name: str, text: str) -> Path:
    fd, tmp = tempfile.mkstemp(prefix=f".{name}.", suffix=".tmp", dir=root)
    with os.fdopen(fd, "w", encoding="utf-8") as fh:
        fh.write(text)
    return Path(tmp)


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
    if re.fullmatch(r"[A-Za-z0-9._/@:+-]+", value) and value[0] not in "@:-":
        return value
    return '"' + value.replace("\\", "\\\\").replace('"', '\\"') + '"'
