"""Hostile inputs, every error at its line (issue #30).

A bad byte in reprobuild.yaml is named at ``FILE:LINE:COLUMN`` (the YAML reader knows the
position); a value that parses but is refused afterwards (a command word, an include entry, a
matrix variant's base, an apt entry, ...) is named at ``FILE:LINE`` of where it is written, and
a value of the wrong type says which type was expected and which was given. A ``pylock.toml``
whose ``lock-version`` is a float is refused saying it must be a string.

Each case appends to (or edits) a copy of the `tiny` project and runs ``matrix`` and
``render -o``: neither needs the engine, so the family runs without one. The failure must be
clean (tests/hostile_harness.py): one ``error:`` line, no traceback, nothing written.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import pytest

from helpers import run_cli
from hostile_harness import Snapshot, assert_clean_failure

CONFIG = "reprobuild.yaml"
DIGEST = "sha256:" + "cd" * 32
SHA256 = "2c26b46b68ffc68ff99b453c1d30413413422d706483bfa0f98a5e886266e7ae"


@dataclass(frozen=True)
class Case:
    id: str
    # Text appended to reprobuild.yaml (bytes for a bad byte), or a (old, new) replacement.
    append: bytes = b""
    replace: tuple[str, str] | None = None
    # What the error line must say, and where: the file and line (and column) of the value.
    expected: str = ""
    where: str = ""
    file: str = CONFIG
    # The variant ``render --variant`` builds (None: a plain render).
    variant: str | None = None


# `where` is ':+N' (N-th line of what was appended, 0-based), ':+N:C' with a column, or an
# absolute ':N' for a replaced line of the tiny project's file.
CASES: list[Case] = [
    Case("nul-byte", append=b'x: "a\x00b"\n', expected="U+0000 is not allowed", where=":+0:6"),
    Case("nul-in-key", append=b"\n\nke\x00y: 1\n", expected="U+0000", where=":+2:3"),
    Case("escape-byte", append=b"note: \x1b[31m\n", expected="U+001B", where=":+0:7"),
    Case("bad-indent", append=b"apt:\n  - a=1\n - b=2\n", expected="invalid YAML", where=":+2"),
    Case(
        "not-utf8-at-column",
        append=b"# ok\nname2: ab\xff\n",
        expected="is not UTF-8",
        where=":+1:10",
    ),
    Case(
        "command-word-control",
        replace=('command: ["python", "hello.py"]', 'command:\n  - python\n  - "he\\tllo.py"'),
        expected="command word 'he\\tllo.py' contains a control character",
        where=":13",
    ),
    Case(
        "command-word-type",
        replace=('command: ["python", "hello.py"]', "command:\n  - python\n  - 3"),
        expected="command word 3 must be a string, got an integer",
        where=":13",
    ),
    Case(
        "command-mapping",
        replace=('command: ["python", "hello.py"]', "command: {run: x}"),
        expected="command must be a string or a list of strings, got a mapping",
        where=":11",
    ),
    Case(
        "include-missing",
        replace=("  - src", "  - src\n  - nothere.py"),
        expected="include 'nothere.py' does not exist",
        where=":11",
    ),
    Case(
        "include-dotdot",
        replace=("  - src", "  - src\n  - ../etc"),
        expected="must be a relative path inside the project",
        where=":11",
    ),
    Case(
        "include-type",
        replace=("  - src", "  - src\n  - {a: 1}"),
        expected="include entry {'a': 1} must be a relative path, got a mapping",
        where=":11",
    ),
    Case(
        "apt-unpinned",
        append=b"apt:\n  - curl=8.0\n  - git\n",
        expected="apt entry 'git' must be 'package=version'",
        where=":+2",
    ),
    Case(
        "apt-type",
        append=b"apt: curl=8.0\n",
        expected="apt must be a list of 'package=version' strings, got a string",
        where=":+0",
    ),
    Case(
        "seed-type",
        replace=("seed: 7", "seed: [7]"),
        expected="seed [7] must be an integer from 0 to 4294967295, got a list",
        where=":6",
    ),
    Case(
        "seed-float",
        replace=("seed: 7", "seed: 7.5"),
        expected="got a number",
        where=":6",
    ),
    Case(
        "build-timeout-shell",
        append=b"build_timeout: 60 && curl evil\n",
        expected="build_timeout '60 && curl evil' must be a whole number of seconds",
        where=":+0",
    ),
    Case(
        "unknown-nested-base-key",
        replace=("  cpu: python-3.11-slim-bookworm", "  cpu: python-3.11-slim-bookworm\n  tpu: x"),
        expected="unknown key base.tpu",
        where=":6",
    ),
    Case(
        "matrix-entry-type",
        append=b"matrix:\n  - name: a\n  - just-a-name\n",
        expected="matrix[1] must be a mapping with a name (got a string",
        where=":+2",
    ),
    Case(
        "matrix-base-tag-only",
        append=b"matrix:\n  - name: a\n\n    base: python:3.11-slim\n",
        expected="'python:3.11-slim' is not pinned by digest",
        where=":+3",
        variant="a",
    ),
    Case(
        "matrix-base-unknown-name",
        append=b"matrix:\n  - name: a\n  - name: b\n    base: no-such-base\n",
        expected="no base named 'no-such-base'",
        where=":+3",
        variant="b",
    ),
    Case(
        "matrix-runner-label",
        append=b"matrix:\n  - name: a\n    runner:\n      - ubuntu\n      - 'x y'\n",
        expected="runner label 'x y' must be letters",
        where=":+4",
    ),
    Case(
        "matrix-gpu-type",
        append=b"matrix:\n  - name: a\n    gpu: 1\n",
        expected="gpu 1 must be true or false, got an integer",
        where=":+2",
    ),
    Case(
        "matrix-name-twice",
        append=b"matrix:\n  - name: a\n  - name: a\n",
        expected="matrix variant 'a' is listed twice",
        where=":+2",
    ),
    Case(
        "base-cpu-tag-only",
        replace=("  cpu: python-3.11-slim-bookworm", "  cpu: python:3.11-slim"),
        expected="'python:3.11-slim' is not pinned by digest",
        where=":5",
    ),
    Case(
        "base-cpu-unknown-name",
        replace=("  cpu: python-3.11-slim-bookworm", "  cpu: no-such-base"),
        expected="no base named 'no-such-base'",
        where=":5",
    ),
]


def _mutate(root: Path, case: Case) -> str:
    """Apply the case; return the ``FILE:LINE:`` (or ``FILE:LINE:COLUMN:``) its error names."""
    path = root / case.file
    first = path.read_text().count("\n") + 1  # the line appended text starts on
    if case.append:
        with path.open("ab") as fh:
            fh.write(case.append)
    if case.replace is not None:
        old, new = case.replace
        text = path.read_text()
        assert old in text, old
        path.write_text(text.replace(old, new))
    line_spec, _, column = case.where[1:].partition(":")
    line = first + int(line_spec[1:]) if line_spec.startswith("+") else int(line_spec)
    return f"{path}:{line}:" + (f"{column}:" if column else "")


@pytest.mark.parametrize("command", ["matrix", "render"])
@pytest.mark.parametrize("case", CASES, ids=lambda c: c.id)
def test_error_names_file_and_line(
    case: Case, command: str, project: Callable[[str], Path], tmp_path: Path
) -> None:
    root = project("tiny")
    where = _mutate(root, case)
    out = tmp_path / "out"
    variant = ["--variant", case.variant] if case.variant else []
    argv = {
        "matrix": ["matrix", str(root)],
        "render": ["render", *variant, "-o", str(out), str(root)],
    }[command]
    cache = tmp_path / "xdg-cache"
    cache.mkdir()
    snap = Snapshot.take([root, cache, out])
    proc = run_cli(*argv, env={"XDG_CACHE_HOME": str(cache)}, timeout=120)
    line = assert_clean_failure(proc, case.expected)
    assert line.startswith(f"error: {where}"), f"{line!r} does not start with {where!r}"
    assert not out.exists()
    snap.assert_unchanged()


# ---------------------------------------------------------------- pylock.toml's lock-version


def _pylock(version: str) -> str:
    return (
        f'lock-version = {version}\ncreated-by = "hand"\n\n[[packages]]\nname = "six"\n'
        'version = "1.17.0"\n'
        'wheels = [{ url = "https://files.example.org/six-1.17.0-py2.py3-none-any.whl", '
        f'hashes = {{ sha256 = "{SHA256}" }} }}]\n'
    )


@pytest.mark.parametrize(
    ("version", "expected"),
    [
        ("1.0", 'lock-version must be a string, "1.0" in quotes; got a float, 1.0'),
        ("1", 'lock-version must be a string, "1.0" in quotes; got an integer, 1'),
        ("[1, 0]", "got an array"),
        ("true", "got a boolean"),
        ('"2.0"', "lock-version '2.0' is not supported"),
    ],
    ids=["float", "integer", "array", "boolean", "wrong-string"],
)
def test_pylock_lock_version_must_be_the_string(
    version: str, expected: str, project: Callable[[str], Path], tmp_path: Path
) -> None:
    root = project("tiny")
    (root / "pylock.toml").write_text(_pylock(version))
    config = root / CONFIG
    config.write_text(config.read_text().replace("lock: requirements.lock", "lock: pylock.toml"))
    snap = Snapshot.take([root])
    proc = run_cli("matrix", str(root), timeout=120)
    line = assert_clean_failure(proc, expected)
    assert line.startswith(f"error: {root / 'pylock.toml'}:1: "), line
    snap.assert_unchanged()


def test_catalog_value_is_named_at_its_line(tmp_path: Path) -> None:
    """A bad value in a catalog file (``resolve --catalog``-style loading) is named at its
    line: the schema's complaint and a ref without a tag."""
    from reprobuild.bases.catalog import load_catalog
    from reprobuild.errors import CatalogError

    entry = {
        "kind": "cpu",
        "ref": f"python@{DIGEST}",
        "platform": "linux/amd64",
        "source": "hand",
        "verified": False,
        "versions": {"python": {"value": "3.11.9", "source": "hand"}},
    }
    body = json.dumps({"schema_version": 2, "bases": {"py": entry}}, indent=2)
    path = tmp_path / "catalog.yaml"
    path.write_text(body)
    with pytest.raises(CatalogError) as caught:
        load_catalog(path)
    ref_line = body.splitlines().index(f'      "ref": "python@{DIGEST}",') + 1
    assert caught.value.message.startswith(f"{path}:{ref_line}: catalog base 'py' ref")
    path.write_text(body.replace('"kind": "cpu"', '"kind": "tpu"'))
    with pytest.raises(CatalogError) as caught:
        load_catalog(path)
    kind_line = body.splitlines().index('      "kind": "cpu",') + 1
    message = caught.value.message
    assert message.startswith(f"{path}:{kind_line}: bases.py.kind"), message


# ---------------------------------------------------------------- reprobuild.bases.lock
BASES_LOCK_CASES = [
    ("ref-unpinned", '"ref": "python:3.11-slim-bookworm@sha256:', '"ref": "python:3.11@x', 5),
    ("entrypoint-type", '"entrypoint": []', '"entrypoint": "sh"', 7),
    ("versions-type", '"python": "3.11"', '"python": 3.11', 8),
    ("schema-version", '"schema_version": 1', '"schema_version": "1"', 2),
]


@pytest.mark.parametrize("command", ["matrix", "render"])
@pytest.mark.parametrize(
    ("old", "new", "line"),
    [c[1:] for c in BASES_LOCK_CASES],
    ids=[c[0] for c in BASES_LOCK_CASES],
)
def test_bases_lock_value_is_named_at_its_line(
    old: str, new: str, line: int, command: str, project: Callable[[str], Path], tmp_path: Path
) -> None:
    """The base lock is JSON (no positions from the reader): the line is found by its key,
    within the base's own entry."""
    root = project("tiny")
    lock = root / "reprobuild.bases.lock"
    text = lock.read_text()
    assert old in text
    lock.write_text(text.replace(old, new))
    out = tmp_path / "out"
    argv = ["matrix", str(root)] if command == "matrix" else ["render", "-o", str(out), str(root)]
    snap = Snapshot.take([root, out])
    proc = run_cli(*argv, timeout=120)
    error = assert_clean_failure(proc, "reprobuild.bases.lock")
    assert f"{lock}:{line}: " in error, error
    snap.assert_unchanged()
