"""Root-free development targets: ``nox -s lint``, ``nox -s unit``, ``nox -s engine``.

Each session installs the built package (never the source tree) with its pinned ``test``
extra into a fresh virtual environment. ``scripts/test`` stays the one command CI runs
(``.ci/run``); these are conveniences for working on the code.
"""

from __future__ import annotations

import nox

nox.options.sessions = ["lint", "unit"]
nox.options.default_venv_backend = "venv"

PYTHON = "3.11"
SOURCES = ["builder", "entrypoint", "tests", "benchmarks", "noxfile.py"]


@nox.session(python=PYTHON)
def lint(session: nox.Session) -> None:
    """ruff check, ruff format --check and mypy (strict, packages and tests)."""
    session.install(".[test]")
    session.run("ruff", "check", *SOURCES)
    session.run("ruff", "format", "--check", *SOURCES)
    session.run("mypy")


@nox.session(python=PYTHON)
def unit(session: nox.Session) -> None:
    """The unit tests (no Docker engine needed) against the installed package."""
    session.install(".[test,frameworks]")
    session.run("pytest", "tests/unit", *session.posargs)


@nox.session(python=PYTHON)
def engine(session: nox.Session) -> None:
    """The engine tests: needs a running engine and the loopback registry.

    Run ``scripts/setup`` first (it prints the test base reference on its last line) and
    export it as REPROBUILD_TEST_BASE.
    """
    session.install(".[test,frameworks]")
    session.run("pytest", "-m", "engine", *session.posargs)
