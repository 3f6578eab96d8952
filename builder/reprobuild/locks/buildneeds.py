"""What a source archive needs to build, and whether the base has it: the preflight.

A package built from source (an sdist, a git commit, a project folder) may compile code.
Before any wheel is fetched or anything is built, :func:`check_buildable` reads each source
archive (a ``.tar.gz`` or ``.zip``, never extracted or run) and refuses, in one line naming
the package, what it needs and the fix, a package whose needs the base lacks.

The rule (:func:`needs_of`), from the archive's files alone:

1. It compiles when its build says so: ``setup.py`` or ``setup.cfg`` naming ``ext_modules``,
   ``Extension(``, ``CppExtension``, ``CUDAExtension``, ``cythonize`` or ``Pybind11Extension``,
   or a ``pyproject.toml`` whose build backend or build requirements are a compiling one
   (``scikit-build-core``, ``meson-python``, ``maturin``, ``setuptools-rust``, ``cmake``).
   A package whose build compiles nothing needs nothing, whatever files it ships.
2. What it compiles is read from its sources: ``.c`` or ``.pyx`` (Cython writes C) needs a C
   compiler, ``.cc``/``.cpp``/``.cxx`` a C++ compiler, ``.cu``/``.cuh`` (or ``CUDAExtension``
   or ``CUDA_HOME`` in ``setup.py``) CUDA's ``nvcc``, ``.f``/``.f90`` a Fortran compiler,
   ``Cargo.toml`` or a Rust backend Rust's ``cargo``; a compiling build with none of these
   needs a C compiler. Every compiled CPython extension also needs CPython's headers.

What the base has (:func:`base_tools`): a GPU catalog base that carries a CUDA version and an
NGC release (NVIDIA's framework images ship the CUDA toolkit, gcc and the Python headers) has
them all but Fortran and Rust; any other base has what the project's ``apt:`` list adds (see
:data:`APT_TOOLS`) and nothing else, since a slim Python base carries no compiler.
"""

from __future__ import annotations

import io
import re
import tarfile
import zipfile
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path, PurePosixPath

from reprobuild.errors import LockfileError
from reprobuild.locks.records import Lock, SourceArchive

__all__ = [
    "APT_TOOLS",
    "BaseTools",
    "Needs",
    "base_tools",
    "check_buildable",
    "check_needs",
    "needs_of",
    "needs_of_bytes",
]

# What each need is called in a message, and the Debian/Ubuntu packages that provide it.
TOOL_NAMES: Mapping[str, str] = {
    "c": "a C compiler (gcc)",
    "c++": "a C++ compiler (g++)",
    "cuda": "CUDA's compiler (nvcc)",
    "fortran": "a Fortran compiler (gfortran)",
    "rust": "Rust (cargo)",
    "headers": "CPython's headers (Python.h)",
}
FIX_PACKAGES: Mapping[str, tuple[str, ...]] = {
    "c": ("gcc", "libc6-dev"),
    "c++": ("g++",),
    "fortran": ("gfortran",),
    "rust": ("cargo", "rustc"),
    "headers": ("python3-dev",),
}
# apt package (as the project's `apt:` names it, before '=') -> the needs it meets.
APT_TOOLS: Mapping[str, frozenset[str]] = {
    "build-essential": frozenset({"c", "c++"}),
    "gcc": frozenset({"c"}),
    "g++": frozenset({"c++"}),
    "clang": frozenset({"c", "c++"}),
    "gfortran": frozenset({"fortran"}),
    "cargo": frozenset({"rust"}),
    "python3-dev": frozenset({"headers"}),
    "libpython3-dev": frozenset({"headers"}),
    "nvidia-cuda-toolkit": frozenset({"cuda"}),
}
_PYTHON_DEV_RE = re.compile(r"^(lib)?python3\.\d+-dev$")
_CUDA_NVCC_RE = re.compile(r"^cuda-nvcc(-\d+(-\d+)?)?$")

_SUFFIX_NEEDS: Mapping[str, str] = {
    ".c": "c",
    ".pyx": "c",
    ".cc": "c++",
    ".cpp": "c++",
    ".cxx": "c++",
    ".c++": "c++",
    ".cu": "cuda",
    ".cuh": "cuda",
    ".f": "fortran",
    ".f90": "fortran",
    ".f95": "fortran",
}
_SETUP_COMPILES_RE = re.compile(
    r"ext_modules|\bExtension\(|CppExtension|CUDAExtension|cythonize|Pybind11Extension"
)
_SETUP_CUDA_RE = re.compile(r"CUDAExtension|CUDA_HOME|\bnvcc\b")
_PYPROJECT_COMPILES_RE = re.compile(
    r"scikit[-_]build|meson[-_]python|mesonpy|maturin|setuptools[-_]rust|[\"']cmake",
    re.IGNORECASE,
)
_PYPROJECT_RUST_RE = re.compile(r"maturin|setuptools[-_]rust", re.IGNORECASE)
# Build files read whole (a few KiB each); any other file is judged by its name only.
_READ_MAX = 1 << 20


@dataclass(frozen=True)
class Needs:
    """What building an archive needs (names of :data:`TOOL_NAMES`) and the file that says
    so (``evidence``, empty when it needs nothing)."""

    tools: frozenset[str]
    evidence: str = ""


@dataclass(frozen=True)
class BaseTools:
    """What the base (with the project's ``apt:`` packages) offers a build, and how to name
    the base and its distribution in a message."""

    name: str
    tools: frozenset[str]
    distribution: str | None = None


def base_tools(
    name: str, versions: Mapping[str, str], apt: Iterable[str], *, gpu: bool
) -> BaseTools:
    """The build tools of base ``name`` (its catalog ``versions``, empty when it is not a
    catalog base) with the project's ``apt:`` entries (``package=version``) installed."""
    tools: set[str] = set()
    if gpu and versions.get("cuda") and versions.get("ngc_release"):
        tools |= {"c", "c++", "cuda", "headers"}
    for entry in apt:
        package = entry.split("=", 1)[0].strip().split(":", 1)[0]
        tools |= APT_TOOLS.get(package, frozenset())
        if _PYTHON_DEV_RE.fullmatch(package):
            tools.add("headers")
        if _CUDA_NVCC_RE.fullmatch(package):
            tools.add("cuda")
    return BaseTools(name=name, tools=frozenset(tools), distribution=versions.get("os"))


def needs_of(archive: Path) -> Needs:
    """What building the source archive at ``archive`` needs (see the module's rule)."""
    return needs_of_bytes(archive.name, archive.read_bytes())


def needs_of_bytes(filename: str, data: bytes) -> Needs:
    """:func:`needs_of` for an archive in memory (``filename`` tells a ``.zip``)."""
    names, texts = _listing(filename, data)
    setup = texts.get("setup.py", "") + texts.get("setup.cfg", "")
    pyproject = texts.get("pyproject.toml", "")
    build_part = pyproject.split("[build-system]", 1)[1] if "[build-system]" in pyproject else ""
    build_part = build_part.split("\n[", 1)[0]
    compiles = _SETUP_COMPILES_RE.search(setup) or _PYPROJECT_COMPILES_RE.search(build_part)
    if compiles is None:
        return Needs(frozenset())
    tools: set[str] = set()
    evidence = ""
    for name in names:
        need = _SUFFIX_NEEDS.get(PurePosixPath(name).suffix.lower())
        if PurePosixPath(name).name == "Cargo.toml":
            need = "rust"
        if need is not None and need not in tools:
            tools.add(need)
            evidence = evidence or name
            if need == "cuda":
                evidence = name
    cuda_in_setup = _SETUP_CUDA_RE.search(setup)
    if cuda_in_setup is not None and "cuda" not in tools:
        tools.add("cuda")
        evidence = f"setup.py names {cuda_in_setup.group()}"
    if _PYPROJECT_RUST_RE.search(build_part) and "rust" not in tools:
        tools.add("rust")
        evidence = evidence or "pyproject.toml's build backend"
    if not tools:
        tools.add("c")
        evidence = f"its build names {compiles.group()}"
    if tools & {"c", "c++", "cuda", "fortran"} or "rust" in tools:
        tools.add("headers")
    if "cuda" in tools:
        tools.add("c++")  # nvcc drives the host's C++ compiler
    return Needs(frozenset(tools), evidence)


def check_buildable(
    lock: Lock, base: BaseTools, locate: Callable[[SourceArchive], Path | None] | None = None
) -> None:
    """Refuse, in one line, the first source-built package of ``lock`` that needs what
    ``base`` lacks; the order is the lock's. Only archives on the host are read: ``local``
    ones, and those ``locate`` finds (an sdist already in the host's cache)."""
    for req in lock.sources:
        if req.source is None:
            continue
        found = req.source.local or (locate(req.source) if locate is not None else None)
        if found is None or not found.is_file():
            continue
        needs = needs_of(found)
        check_needs(needs, base, lock.path, req.line, f"{req.name} {req.version}")


def check_needs(needs: Needs, base: BaseTools, path: Path, line: int, label: str) -> None:
    """Refuse package ``label`` (name and version), read at ``path:line``, when ``needs``
    holds what ``base`` lacks: one line naming what, and the fix as the hint."""
    missing = needs.tools - base.tools
    if not missing:
        return
    order = [t for t in TOOL_NAMES if t in missing]
    what = ", ".join(TOOL_NAMES[t] for t in order)
    packages = [p for t in order for p in FIX_PACKAGES.get(t, ())]
    distro = f" from {base.distribution}" if base.distribution else " from the base's distribution"
    fixes = []
    if packages:
        listed = ", ".join(f"{p}=<version>" for p in packages)
        fixes.append(f"add `apt: [{listed}]` (pinned{distro}) to reprobuild.yaml")
    if "cuda" in missing:
        fixes.append("choose a CUDA development base (base.gpu: an NGC framework image)")
    else:
        fixes.append("choose a base that has them")
    raise LockfileError(
        path,
        line or None,
        f"package {label} cannot be built on {base.name}: it needs {what} ({needs.evidence}), "
        "which the base lacks",
        hint=" or ".join(fixes),
    )


def _listing(filename: str, data: bytes) -> tuple[list[str], dict[str, str]]:
    """The archive's file paths (its top folder dropped) and the text of its top-level build
    files (``setup.py``, ``setup.cfg``, ``pyproject.toml``)."""
    names: list[str] = []
    texts: dict[str, str] = {}
    wanted = ("setup.py", "setup.cfg", "pyproject.toml")
    if filename.endswith(".zip"):
        with zipfile.ZipFile(io.BytesIO(data)) as zf:
            for zinfo in zf.infolist():
                if zinfo.is_dir():
                    continue
                rel = _inner(zinfo.filename)
                names.append(rel)
                if rel in wanted and zinfo.file_size <= _READ_MAX:
                    texts[rel] = zf.read(zinfo).decode("utf-8", "replace")
        return names, texts
    with tarfile.open(fileobj=io.BytesIO(data), mode="r:*") as tar:
        for info in tar:
            if not info.isfile():
                continue
            rel = _inner(info.name)
            names.append(rel)
            if rel in wanted and info.size <= _READ_MAX:
                handle = tar.extractfile(info)
                if handle is not None:
                    texts[rel] = handle.read().decode("utf-8", "replace")
    return names, texts


def _inner(name: str) -> str:
    """``pkg-1.0/src/x.c`` -> ``src/x.c`` (an sdist's files sit in one top folder)."""
    parts = name.removeprefix("./").split("/", 1)
    return parts[1] if len(parts) == 2 else parts[0]
