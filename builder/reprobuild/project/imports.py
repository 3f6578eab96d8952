"""What the training command imports: the top-level modules of its Python files, read with
``ast`` and never run.

``init`` reads the command (``python FILE``, ``python -m MODULE``, a console script such as
``pytest``) and every project ``.py`` file named on it (``tests/test_x.py::T::t`` too), then the
project's own single-file modules those import (``from examples.utils import f``), one by one.
Imports inside a ``try`` that catches ``ImportError`` are optional and left out, as are the
standard library and the project's own modules and packages. Each module is then named by the
distributions that may provide it (:func:`distributions_for`): its own name, or a known alias
(``sklearn``: ``scikit-learn``), so that init can tell a lock's extra or group that brings a
package the command needs.
"""

from __future__ import annotations

import ast
import re
import sys
from pathlib import Path

# Files read per command, at most (a project's own modules it imports, transitively).
MAX_FILES = 64
# Files larger than this are not read (a generated module, not training code).
MAX_FILE_BYTES = 2 << 20

_PYTHON_RE = re.compile(r"python(\d+(\.\d+)?)?")
# python's options that take a value as the next word
_PYTHON_VALUE_OPTIONS = frozenset({"-W", "-X", "--check-hash-based-pycs"})
# Import names whose distribution has another name (the common ones of ML projects).
ALIASES: dict[str, tuple[str, ...]] = {
    "sklearn": ("scikit-learn",),
    "skimage": ("scikit-image",),
    "yaml": ("pyyaml",),
    "PIL": ("pillow",),
    "cv2": (
        "opencv-python",
        "opencv-python-headless",
        "opencv-contrib-python",
        "opencv-contrib-python-headless",
    ),
    "mpl_toolkits": ("matplotlib",),
    "attr": ("attrs",),
    "bs4": ("beautifulsoup4",),
    "dateutil": ("python-dateutil",),
    "dotenv": ("python-dotenv",),
    "absl": ("absl-py",),
    "tree": ("dm-tree",),
    "haiku": ("dm-haiku",),
    "sonnet": ("dm-sonnet",),
    "pkg_resources": ("setuptools",),
    "umap": ("umap-learn",),
    "faiss": ("faiss-cpu", "faiss-gpu"),
    "Bio": ("biopython",),
    "google": ("protobuf",),
    "hydra": ("hydra-core",),
    "ruamel": ("ruamel-yaml",),
    "lightning_fabric": ("lightning-fabric", "lightning"),
}


def canonical(name: str) -> str:
    """A distribution name as PEP 503 compares them."""
    return re.sub(r"[-_.]+", "-", name).lower()


def distributions_for(module: str) -> tuple[str, ...]:
    """The canonical names of the distributions that may provide top-level module ``module``."""
    return tuple(canonical(n) for n in ALIASES.get(module, (module,)))


def command_imports(root: Path, command: tuple[str, ...]) -> dict[str, str]:
    """The third-party top-level modules ``command`` imports, each with the project file that
    imports it first (relative to ``root``; the command itself for ``-m MODULE`` and a console
    script)."""
    if not command:
        return {}
    shown = " ".join(command)
    found: dict[str, str] = {}
    files: list[Path] = []
    first = Path(command[0]).name
    words = list(command[1:])
    if _PYTHON_RE.fullmatch(first):
        module, script, words = _python_target(words)
        if module is not None:
            local = _local_module(root, root, module)
            if local is not None:
                files.append(local)
            else:
                found.setdefault(module.partition(".")[0], f"`{shown}`")
        if script is not None:
            files.append(root / script)
    elif "/" not in command[0]:
        found.setdefault(first, f"`{shown}`")  # a console script: its distribution's name
    for word in words:
        path = root / word.partition("::")[0]
        if word.partition("::")[0].endswith(".py") and path.is_file():
            files.append(path)
    _read_files(root, files, found)
    return {m: where for m, where in found.items() if _third_party(root, m)}


def _python_target(words: list[str]) -> tuple[str | None, str | None, list[str]]:
    """``python [OPTIONS] (-m MODULE | -c CODE | FILE) ARGS``: the module, the file, the args."""
    index = 0
    while index < len(words):
        word = words[index]
        if word == "-m" and index + 1 < len(words):
            return words[index + 1], None, words[index + 2 :]
        if word.startswith("-m") and len(word) > 2:
            return word[2:], None, words[index + 1 :]
        if word.startswith("-c"):
            return None, None, []
        if word in _PYTHON_VALUE_OPTIONS:
            index += 2
            continue
        if word.startswith("-"):
            index += 1
            continue
        return None, word, words[index + 1 :]
    return None, None, []


def _read_files(root: Path, files: list[Path], found: dict[str, str]) -> None:
    seen: set[Path] = set()
    while files and len(seen) < MAX_FILES:
        path = files.pop(0)
        try:
            resolved = path.resolve()
            if resolved in seen or not resolved.is_relative_to(root.resolve()):
                continue
            seen.add(resolved)
            if not path.is_file() or path.stat().st_size > MAX_FILE_BYTES:
                continue
            modules = _imports(ast.parse(path.read_bytes(), filename=str(path)), path, root)
        except (OSError, SyntaxError, ValueError, RecursionError):
            continue  # not read (or nested past the parser's depth): its imports are unknown
        where = path.relative_to(root).as_posix() if path.is_relative_to(root) else str(path)
        for module in modules:
            local = _local_module(root, path.parent, module)
            if local is not None:
                files.append(local)
            elif not _is_local_name(root, path.parent, module):
                found.setdefault(module.partition(".")[0], where)


def _imports(tree: ast.Module, path: Path, root: Path) -> list[str]:
    """The absolute modules ``tree`` imports outside an ``ImportError`` guard (a relative
    import as the project module it names)."""
    out: list[str] = []

    def visit(node: ast.AST) -> None:
        if isinstance(node, ast.Try) and _guards_import(node):
            for part in (*node.orelse, *node.finalbody):
                visit(part)
            return
        if isinstance(node, ast.Import):
            out.extend(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                out.extend(_relative(path, root, node))
            elif node.module:
                out.extend(f"{node.module}.{alias.name}" for alias in node.names)
        for child in ast.iter_child_nodes(node):
            visit(child)

    visit(tree)
    return out


def _guards_import(node: ast.Try) -> bool:
    for handler in node.handlers:
        caught = handler.type
        names = caught.elts if isinstance(caught, ast.Tuple) else [caught]
        for name in names:
            if name is None or (
                isinstance(name, ast.Name)
                and name.id in {"ImportError", "ModuleNotFoundError", "Exception"}
            ):
                return True
    return False


def _relative(path: Path, root: Path, node: ast.ImportFrom) -> list[str]:
    """A relative import as the dotted name of a module under ``root``."""
    base = path.parent
    for _ in range(node.level - 1):
        base = base.parent
    try:
        parts = base.relative_to(root).parts
    except ValueError:
        return []
    prefix = ".".join((*parts, *(node.module.split(".") if node.module else ())))
    if not prefix:
        return [alias.name for alias in node.names]
    return [f"{prefix}.{alias.name}" for alias in node.names]


def _search_dirs(root: Path, here: Path) -> tuple[Path, ...]:
    """Where the image finds the project's modules: the script's folder, the project, src/."""
    return (here, root, root / "src")


def _local_module(root: Path, here: Path, module: str) -> Path | None:
    """The project's single-file module ``module`` names (``a.b.c``: ``a/b/c.py``, else
    ``a/b.py`` for ``from a import b``'s ``a.b``), or None: a package's ``__init__`` and its
    library modules are not read (their optional imports are the library's own)."""
    parts = module.split(".")
    for folder in _search_dirs(root, here):
        if (folder / parts[0]).is_dir() and (folder / parts[0] / "__init__.py").is_file():
            return None  # a package of the project: its imports are its own
        for count in range(len(parts), 0, -1):
            candidate = folder.joinpath(*parts[: count - 1], parts[count - 1] + ".py")
            if candidate.is_file():
                return candidate
    return None


def _is_local_name(root: Path, here: Path, module: str) -> bool:
    top = module.partition(".")[0]
    return any(
        (folder / top).is_dir() or (folder / f"{top}.py").is_file()
        for folder in _search_dirs(root, here)
    )


def _third_party(root: Path, module: str) -> bool:
    return (
        bool(module)
        and module not in sys.stdlib_module_names
        and module != "__future__"
        and not _is_local_name(root, root, module)
    )
