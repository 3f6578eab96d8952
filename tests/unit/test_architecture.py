"""Import contracts between the modules, checked on the installed packages.

- The in-image runtime (reprobuild_entrypoint) uses the standard library only and never
  imports reprobuild: it is copied into images that have neither.
- backends/engine.py is the only module that imports the Docker SDK (others may name its types under
  TYPE_CHECKING only).
- The CLI (the reprobuild.cli package) loads neither docker nor requests before a command needs
  them, so ``reprobuild --help`` and ``--version`` stay fast and work without them: its modules
  import only the standard library, each other and a few constants at module level, and a
  command's module is imported only when that command runs.

The checks read every import statement (module level or inside functions) with ``ast``,
so a lazy import inside a function is held to the same contract.
"""

from __future__ import annotations

import ast
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

import pytest

import reprobuild
import reprobuild_entrypoint

BUILDER = Path(reprobuild.__file__).parent
RUNTIME = Path(reprobuild_entrypoint.__file__).parent


@dataclass(frozen=True)
class Import:
    module: str  # absolute dotted name
    line: int
    type_checking: bool  # under `if TYPE_CHECKING:`
    module_level: bool  # not inside a function

    @property
    def top(self) -> str:
        return self.module.partition(".")[0]

    def within(self, module: str) -> bool:
        return self.module == module or self.module.startswith(module + ".")


def _is_type_checking(test: ast.expr) -> bool:
    return (isinstance(test, ast.Name) and test.id == "TYPE_CHECKING") or (
        isinstance(test, ast.Attribute) and test.attr == "TYPE_CHECKING"
    )


def imports_of(path: Path, root: Path) -> list[Import]:
    """Every import in the module at `path` of the package at `root`, relative ones resolved."""
    found: list[Import] = []

    def visit(node: ast.AST, type_checking: bool, module_level: bool) -> None:
        if isinstance(node, ast.Import):
            for alias in node.names:
                found.append(Import(alias.name, node.lineno, type_checking, module_level))
            return
        if isinstance(node, ast.ImportFrom):
            if node.level:
                parts = [root.name, *path.relative_to(root).with_suffix("").parts]
                base = ".".join(parts[: len(parts) - node.level])
                name = f"{base}.{node.module}" if node.module else base
            else:
                name = node.module or ""
            # `from X import y`: y may be a submodule, so record X.y (its top is X's either way)
            for alias in node.names:
                full = f"{name}.{alias.name}"
                found.append(Import(full, node.lineno, type_checking, module_level))
            return
        if isinstance(node, ast.If) and _is_type_checking(node.test):
            for statement in node.body:
                visit(statement, True, module_level)
            for statement in node.orelse:
                visit(statement, type_checking, module_level)
            return
        inner = module_level and not isinstance(
            node, ast.FunctionDef | ast.AsyncFunctionDef | ast.Lambda
        )
        for child in ast.iter_child_nodes(node):
            visit(child, type_checking, inner)

    visit(ast.parse(path.read_text(encoding="utf-8"), str(path)), False, True)
    return found


def _modules(root: Path) -> list[Path]:
    files = sorted(root.rglob("*.py"))
    assert files, f"no modules under {root}"
    return files


def test_contract_reads_imports_inside_functions_and_type_checking(tmp_path: Path) -> None:
    """The reader itself: a lazy import and a TYPE_CHECKING import are both seen, and told apart."""
    pkg = tmp_path / "reprobuild"
    pkg.mkdir()
    sample = pkg / "sample.py"
    sample.write_text(
        "from typing import TYPE_CHECKING\n"
        "if TYPE_CHECKING:\n"
        "    import docker\n"
        "def f():\n"
        "    from docker import errors\n"
        "from . import engine\n",
        encoding="utf-8",
    )
    found = imports_of(sample, pkg)
    assert [(i.module, i.type_checking, i.module_level) for i in found] == [
        ("typing.TYPE_CHECKING", False, True),
        ("docker", True, True),
        ("docker.errors", False, False),
        ("reprobuild.engine", False, True),
    ]


@pytest.mark.parametrize("path", _modules(RUNTIME), ids=lambda p: p.name)
def test_runtime_imports_only_the_standard_library(path: Path) -> None:
    allowed = set(sys.stdlib_module_names) | {"__future__", "reprobuild_entrypoint"}
    bad = [
        f"{path.name}:{i.line}: {i.module}"
        for i in imports_of(path, RUNTIME)
        if i.top not in allowed
    ]
    assert not bad, "the in-image runtime is standard library only: " + ", ".join(bad)


@pytest.mark.parametrize("path", _modules(BUILDER), ids=lambda p: p.name)
def test_only_engine_imports_docker(path: Path) -> None:
    if path == BUILDER / "backends" / "engine.py":
        return
    bad = [
        f"{path.name}:{i.line}: {i.module}"
        for i in imports_of(path, BUILDER)
        if i.top == "docker" and not i.type_checking
    ]
    assert not bad, "only reprobuild/backends/engine.py imports the Docker SDK: " + ", ".join(bad)


def test_engine_is_where_docker_is_imported() -> None:
    """The contract above is about a real import: backends/engine.py does hold it."""
    assert any(i.top == "docker" for i in imports_of(BUILDER / "backends" / "engine.py", BUILDER))


CLI = BUILDER / "cli"
# What the CLI's modules may import at module level besides the standard library and each other:
# the version, the constants their options offer as choices, and the exit codes (errors.py,
# the bottom layer: standard library only).
CLI_MODULE_LEVEL = (
    "reprobuild.__version__",
    "reprobuild.errors.EXIT_ERROR",
    "reprobuild.errors.EXIT_OK",
    "reprobuild.errors.EXIT_USAGE",
    "reprobuild.errors.signal_exit_code",
    "reprobuild.backends.builders.BUILDERS",
    "reprobuild_entrypoint.settings.MODES",
)


def _cli_module(path: Path) -> str:
    return ".".join(("reprobuild", *path.relative_to(BUILDER).with_suffix("").parts))


@pytest.mark.parametrize("path", _modules(CLI), ids=_cli_module)
def test_cli_imports_the_library_inside_functions_only(path: Path) -> None:
    at_import = [i for i in imports_of(path, BUILDER) if i.module_level and not i.type_checking]
    heavy = [
        f"{i.line}: {i.module}"
        for i in at_import
        if i.top in {"docker", "requests"} or i.within("reprobuild.backends.engine")
    ]
    assert not heavy, f"{_cli_module(path)} loads these lazily, inside `run`: {heavy}"
    other = [
        f"{i.line}: {i.module}"
        for i in at_import
        if i.top not in sys.stdlib_module_names
        and i.top != "__future__"
        and not i.within("reprobuild.cli")
        and i.module not in CLI_MODULE_LEVEL
    ]
    assert not other, f"{_cli_module(path)} imports the library at module level: {other}"


def test_cli_contract_reads_every_command_module() -> None:
    """The checks above read the cli package: every command's module is there, and its lazy
    imports (inside `run`) are seen as such."""
    from reprobuild.cli.commands import COMMANDS

    modules = {_cli_module(path) for path in _modules(CLI)}
    assert {info.module for info in COMMANDS.values()} <= modules
    inspect = imports_of(CLI / "commands" / "inspect.py", BUILDER)
    assert [i.module_level for i in inspect if i.within("reprobuild.backends.engine")] == [False]


# Run `python -m reprobuild ARGS` and list sys.modules as it exits. (-X importtime does not see
# a module loaded with importlib.import_module, which is how the registry loads a command.)
_LIST_MODULES = (
    "import atexit, runpy, sys\n"
    "atexit.register(lambda: print(*sorted(sys.modules), sep='\\n', file=sys.stderr))\n"
    "sys.argv[0] = 'reprobuild'\n"
    "runpy.run_module('reprobuild', run_name='__main__', alter_sys=True)\n"
)


def _loaded_modules(*args: str) -> set[str]:
    """Every module a fresh `python -m reprobuild ARGS` loaded."""
    proc = subprocess.run(
        [sys.executable, "-c", _LIST_MODULES, *args],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert proc.returncode == 0, proc.stderr[-2000:]
    loaded = set(proc.stderr.split())
    assert "reprobuild.cli.main" in loaded, "module list not understood: " + proc.stderr[-2000:]
    return loaded


def _heavy(loaded: set[str]) -> list[str]:
    return sorted(m for m in loaded if m.partition(".")[0] in {"docker", "requests", "urllib3"})


def _command_modules(loaded: set[str]) -> list[str]:
    return sorted(m for m in loaded if m.startswith("reprobuild.cli.commands."))


@pytest.mark.parametrize("args", [["--help"], ["--version"]])
def test_help_and_version_do_not_load_docker_requests_or_a_command(args: list[str]) -> None:
    """Checked in a fresh interpreter: every module it loaded is listed."""
    loaded = _loaded_modules(*args)
    assert not _heavy(loaded), f"reprobuild {args[0]} loaded {_heavy(loaded)}"
    assert not _command_modules(loaded), f"reprobuild {args[0]} loaded a command's module"


@pytest.mark.parametrize("command", ["image", "inspect", "verify"])
def test_a_commands_help_loads_its_own_module_only(command: str) -> None:
    loaded = _loaded_modules(command, "--help")
    assert not _heavy(loaded), f"reprobuild {command} --help loaded {_heavy(loaded)}"
    assert _command_modules(loaded) == [f"reprobuild.cli.commands.{command}"]


# A CLI function that outgrows this is split (build_parser was 245 lines; each command adds
# its own arguments now): the CLI parses, calls the library and maps errors, nothing long.
CLI_FUNCTION_LINES = 80


@pytest.mark.parametrize("path", _modules(CLI), ids=_cli_module)
def test_cli_functions_stay_short(path: Path) -> None:
    tree = ast.parse(path.read_text(encoding="utf-8"), str(path))
    long = [
        f"{node.name} (lines {node.lineno}-{node.end_lineno})"
        for node in ast.walk(tree)
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef)
        and (node.end_lineno or node.lineno) - node.lineno + 1 > CLI_FUNCTION_LINES
    ]
    assert not long, f"{_cli_module(path)}: over {CLI_FUNCTION_LINES} lines: {long}"


# --------------------------------------------------------------------------- one owner per fact

# Each shared value is written once, in the module named here; the others import it.
CONTRACT = RUNTIME / "contract.py"
OWNERS = {
    "/opt/reprobuild/manifest.json": RUNTIME / "__init__.py",
    # what the host and the image agree on: the runtime's contract module
    "io.reprobuild.": CONTRACT,
    "REPRO_SEED": CONTRACT,
    "REPRO_DETERMINISM": CONTRACT,
    "REPRO_TRIAL": CONTRACT,
    "REPRO_RUN_DIR": CONTRACT,
    "REPRO_OUTPUT_DIR": CONTRACT,
    "/out": CONTRACT,
    "/data": CONTRACT,
    "/reprobuild-run": CONTRACT,
    "reprobuild.run": CONTRACT,
    "reprobuild.run_exit": CONTRACT,
    "reprobuild.frameworks": CONTRACT,
    # the host's own documents
    "reprobuild.verify": BUILDER / "checks" / "verify" / "report.py",
    "reprobuild.diff": BUILDER / "checks" / "diff.py",
}


def _string_constants(path: Path) -> set[str]:
    """Every string constant of a module but its docstrings (prose may name a value) and the
    literal pieces of f-strings (``f"{mount}/out"`` states no fact of its own)."""
    tree = ast.parse(path.read_text(encoding="utf-8"), str(path))
    pieces = {
        id(part)
        for node in ast.walk(tree)
        if isinstance(node, ast.JoinedStr)
        for part in node.values
    }
    docstrings = {
        id(node.body[0].value)
        for node in ast.walk(tree)
        if isinstance(node, ast.Module | ast.ClassDef | ast.FunctionDef | ast.AsyncFunctionDef)
        and node.body
        and isinstance(node.body[0], ast.Expr)
        and isinstance(node.body[0].value, ast.Constant)
    }
    return {
        n.value
        for n in ast.walk(tree)
        if isinstance(n, ast.Constant)
        and isinstance(n.value, str)
        and id(n) not in docstrings | pieces
    }


@pytest.mark.parametrize("value", sorted(OWNERS))
def test_shared_value_has_one_owner(value: str) -> None:
    holders = [
        path
        for path in [*_modules(BUILDER), *_modules(RUNTIME)]
        if value in _string_constants(path)
    ]
    assert holders == [OWNERS[value]], f"{value!r} is written in {holders}"


def test_image_labels_are_written_from_the_prefix() -> None:
    """No label name is typed out with its prefix: each is LABEL_PREFIX + its own part."""
    holders = [
        f"{path.name}: {value!r}"
        for path in [*_modules(BUILDER), *_modules(RUNTIME)]
        if path != CONTRACT
        for value in _string_constants(path)
        if value.startswith("io.reprobuild.")
    ]
    assert not holders, f"labels typed out in full: {holders}"


def test_determinism_modes_and_seed_range_are_the_runtimes() -> None:
    from typing import get_args

    from reprobuild.project import config
    from reprobuild_entrypoint import settings

    assert config.MODES is settings.MODES and config.SEED_MAX is settings.SEED_MAX
    # config.Mode is the type checker's view of the same list
    assert get_args(config.Mode) == settings.MODES


def test_runtime_version_is_the_package_version() -> None:
    """The runtime is copied into images without its distribution metadata, so it carries its
    version as a literal (RNG states are refused across runtime versions); it must be
    pyproject's."""
    import tomllib

    import reprobuild_entrypoint

    pyproject = tomllib.loads((Path(__file__).parents[2] / "pyproject.toml").read_text())
    assert reprobuild_entrypoint.__version__ == pyproject["project"]["version"]


# --------------------------------------------------------------------------- layers and cycles

# The packages of reprobuild, top to bottom. A module may import from its own package and from
# the layers below its own; never upwards, and never across one row (``backends`` and ``locks``
# know nothing of each other). ``reprobuild`` itself (``__version__``) is below them all.
LAYERS: tuple[tuple[str, ...], ...] = (
    ("__main__",),
    ("cli",),
    ("checks",),
    ("cluster",),
    ("imaging",),
    ("backends", "locks"),
    ("bases",),
    ("project",),
    ("_util",),
    ("errors",),
)


def _module_names(root: Path) -> dict[str, Path]:
    """``reprobuild.x.y`` -> its file, for every module and package of the tree at ``root``."""
    names = {}
    for path in _modules(root):
        parts = [root.name, *path.relative_to(root).with_suffix("").parts]
        if parts[-1] == "__init__":
            parts.pop()
        names[".".join(parts)] = path
    return names


def _internal_edges(root: Path) -> dict[str, set[str]]:
    """Each module's imports of other modules of the same tree, every import counted: module
    level, inside functions and under TYPE_CHECKING alike. ``from pkg import name`` is an edge
    to ``pkg.name`` when that is a module, else to ``pkg``."""
    names = _module_names(root)
    edges: dict[str, set[str]] = {}
    for name, path in names.items():
        found = set()
        for imp in imports_of(path, root):
            target = imp.module
            while target and target not in names:
                target = target.rpartition(".")[0]
            if target and target != name:
                found.add(target)
        edges[name] = found
    return edges


def _layer_of(module: str) -> tuple[int, str] | None:
    parts = module.split(".")
    if len(parts) < 2:
        return None  # the package root: its version, importable from everywhere
    for index, row in enumerate(LAYERS):
        if parts[1] in row:
            return index, parts[1]
    raise AssertionError(f"{module} is in no layer: add its package to LAYERS")


def upward_imports(edges: dict[str, set[str]]) -> list[str]:
    bad = []
    for module, targets in sorted(edges.items()):
        here = _layer_of(module)
        for target in sorted(targets):
            there = _layer_of(target)
            if here is None or there is None or here[1] == there[1]:
                continue
            if there[0] <= here[0]:
                bad.append(f"{module} -> {target}")
    return bad


def import_cycles(edges: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected components of more than one module (Tarjan)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    cycles: list[list[str]] = []

    def visit(node: str) -> None:
        index[node] = low[node] = len(index)
        stack.append(node)
        on_stack.add(node)
        for nxt in edges.get(node, ()):
            if nxt not in index:
                visit(nxt)
                low[node] = min(low[node], low[nxt])
            elif nxt in on_stack:
                low[node] = min(low[node], index[nxt])
        if low[node] == index[node]:
            component = []
            while True:
                top = stack.pop()
                on_stack.discard(top)
                component.append(top)
                if top == node:
                    break
            if len(component) > 1:
                cycles.append(sorted(component))

    for node in sorted(edges):
        if node not in index:
            visit(node)
    return cycles


def test_every_package_is_in_a_layer() -> None:
    tops = {p.name.removesuffix(".py") for p in BUILDER.iterdir()}
    tops -= {"__init__", "__pycache__", "py.typed", "data", "templates"}
    placed = {name for row in LAYERS for name in row}
    assert tops == placed, f"in the tree, not in LAYERS: {tops - placed}; gone: {placed - tops}"


def test_no_module_imports_upwards() -> None:
    bad = upward_imports(_internal_edges(BUILDER))
    assert not bad, "imports against the layer order (LAYERS):\n" + "\n".join(bad)


def test_no_import_cycles() -> None:
    cycles = import_cycles(_internal_edges(BUILDER))
    assert not cycles, f"import cycles: {cycles}"


def test_layer_and_cycle_checks_catch_what_they_look_for(tmp_path: Path) -> None:
    """The checks themselves: an upward import and a cycle through a function-level import
    are both found in a small tree."""
    pkg = tmp_path / "reprobuild"
    (pkg / "locks").mkdir(parents=True)
    (pkg / "imaging").mkdir()
    for init in (
        pkg / "__init__.py",
        pkg / "locks" / "__init__.py",
        pkg / "imaging" / "__init__.py",
    ):
        init.write_text("")
    (pkg / "locks" / "a.py").write_text("def f():\n    from reprobuild.imaging import plan\n")
    (pkg / "imaging" / "plan.py").write_text("from reprobuild.locks import a\n")
    edges = _internal_edges(pkg)
    assert edges["reprobuild.locks.a"] == {"reprobuild.imaging.plan"}
    assert upward_imports(edges) == ["reprobuild.locks.a -> reprobuild.imaging.plan"]
    assert import_cycles(edges) == [["reprobuild.imaging.plan", "reprobuild.locks.a"]]


def test_manifest_field_lists_name_manifest_fields() -> None:
    """The runtime copies some manifest fields into each run record and diff reads some by
    name. The runtime cannot import the Manifest type (it is standard library only), so its
    list is held to the type's fields here, as diff's is."""
    import dataclasses

    from reprobuild.checks import diff
    from reprobuild.imaging.manifest import Manifest
    from reprobuild_entrypoint import runrecord

    names = {f.name for f in dataclasses.fields(Manifest)}
    assert set(runrecord._MANIFEST_FIELDS) <= names
    assert names >= diff._MANIFEST_HANDLED
