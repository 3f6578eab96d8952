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
# the version, and the constants their options offer as choices.
CLI_MODULE_LEVEL = (
    "reprobuild.__version__",
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
OWNERS = {
    "io.reprobuild.manifest.sha256": BUILDER / "build" / "manifest.py",
    "/opt/reprobuild/manifest.json": RUNTIME / "__init__.py",
}


def _string_constants(path: Path) -> set[str]:
    tree = ast.parse(path.read_text(encoding="utf-8"), str(path))
    return {
        n.value for n in ast.walk(tree) if isinstance(n, ast.Constant) and isinstance(n.value, str)
    }


@pytest.mark.parametrize("value", sorted(OWNERS))
def test_shared_value_has_one_owner(value: str) -> None:
    holders = [
        path
        for path in [*_modules(BUILDER), *_modules(RUNTIME)]
        if value in _string_constants(path)
    ]
    assert holders == [OWNERS[value]], f"{value!r} is written in {holders}"


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
