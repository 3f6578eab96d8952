"""One package locked more than once, for different platforms (a lock's "forks"), read for the
image's platform (linux x86_64, CPython 3.11) as the lock's own installer reads it.

Poetry: a dependency declared with several constraints, each with its own marker (tianshou's
``virtualenv = [{version = "^20.4.3"}, {version = "<20.16.4", markers = "sys_platform ==
'win32'"}]``), is locked once per constraint. ``poetry install`` drops the constraints whose
marker fails here and takes, of the locked entries that satisfy what is left, the newest
(Poetry's ``Provider.get_locked``: locked packages sorted newest first). Two entries the lock
cannot tell apart (same version, both for this platform) are refused naming both lines.
PDM: each entry records its marker; two whose markers both hold are refused the same way.
"""

from __future__ import annotations

import hashlib
import re
import tomllib
from pathlib import Path

import pytest

from reprobuild.errors import LockfileError
from reprobuild.locks.lockfile import Selection, load_lock, parse_lock_bytes
from reprobuild.locks.poetrylock import content_hashes
from reprobuild.locks.records import Lock


def _h(text: str) -> str:
    return hashlib.sha256(text.encode()).hexdigest()


def _pyproject(dependencies: str) -> str:
    return (
        '[tool.poetry]\nname = "demo"\nversion = "0.1.0"\ndescription = ""\nauthors = []\n\n'
        f'[tool.poetry.dependencies]\npython = "^3.10"\n{dependencies}'
    )


def _entry(name: str, version: str, extra: str = "") -> str:
    wheel = f"{name.replace('-', '_')}-{version}-py3-none-any.whl"
    return (
        f'[[package]]\nname = "{name}"\nversion = "{version}"\ndescription = ""\n'
        f'optional = false\npython-versions = ">=3.8"\n{extra}'
        f'files = [\n    {{file = "{wheel}", hash = "sha256:{_h(wheel)}"}},\n]\n\n'
    )


def _poetry(tmp_path: Path, dependencies: str, entries: list[str], version: str = "2.0") -> Path:
    pyproject = _pyproject(dependencies)
    (tmp_path / "pyproject.toml").write_text(pyproject)
    digest = sorted(content_hashes(tomllib.loads(pyproject)))[0]
    path = tmp_path / "poetry.lock"
    path.write_text(
        "".join(entries) + f'[metadata]\nlock-version = "{version}"\npython-versions = "^3.10"\n'
        f'content-hash = "{digest}"\n'
    )
    return path


def _pins(path: Path, selection: Selection | None = None) -> dict[str, str]:
    return {r.name: r.version for r in load_lock(path, selection or Selection()).requirements}


def _line_of(path: Path, needle: str, occurrence: int = 1) -> int:
    found = [n for n, text in enumerate(path.read_text().splitlines(), 1) if text == needle]
    return found[occurrence - 1]


_TIANSHOU_SHAPED = """\
virtualenv = [
    { version = "^20.4.3,!=20.4.5,!=20.4.6" },
    { version = "<20.16.4", markers = "sys_platform == 'win32'" },
]
"""


def test_poetry_multiple_constraints_take_the_newest_entry_that_fits(tmp_path: Path) -> None:
    """Both entries satisfy the unmarked constraint; `poetry install` on linux takes the
    newer (20.24.6); the win32 constraint does not apply here, so its older entry is not
    installed. Before, the reader refused: '2 locked package entries satisfy'."""
    path = _poetry(
        tmp_path,
        _TIANSHOU_SHAPED,
        [_entry("virtualenv", "20.16.3"), _entry("virtualenv", "20.24.6")],
    )
    assert _pins(path) == {"virtualenv": "20.24.6"}
    # the lock's order does not matter: the newest wins
    entries = [_entry("virtualenv", "20.24.6"), _entry("virtualenv", "20.16.3")]
    assert _pins(_poetry(tmp_path, _TIANSHOU_SHAPED, entries)) == {"virtualenv": "20.24.6"}


def test_poetry_constraint_by_python_picks_its_own_entry(tmp_path: Path) -> None:
    """`numpy = [{version = "^2", python = ">=3.11"}, {version = "^1.26", python = "<3.11"}]`:
    CPython 3.11 takes 2.x, CPython 3.10 the 1.x entry (neither satisfies the other's
    constraint)."""
    path = _poetry(
        tmp_path,
        'numpy = [\n    { version = "^2", python = ">=3.11" },\n'
        '    { version = "^1.26", python = "<3.11" },\n]\n',
        [_entry("numpy", "1.26.4"), _entry("numpy", "2.4.6")],
    )
    assert _pins(path) == {"numpy": "2.4.6"}
    assert _pins(path, Selection(python="3.10")) == {"numpy": "1.26.4"}


def test_poetry_entry_taken_once_fits_a_later_constraint(tmp_path: Path) -> None:
    """The project needs virtualenv `<20.16.4` (tianshou's win32 constraint made
    unconditional) and pre-commit needs `>=20.10`: the newest for `>=20.10` alone is 20.24.6,
    but Poetry's solver takes one version for both constraints, the newest that satisfies
    both (20.16.3), whichever edge the walk meets first; before, a conflict."""
    pre_commit = _entry("pre-commit", "3.5.0").rstrip("\n") + (
        '\n\n[package.dependencies]\nvirtualenv = ">=20.10.0"\n\n'
    )
    path = _poetry(
        tmp_path,
        'virtualenv = "<20.16.4"\npre-commit = "^3.5"\n',
        [_entry("virtualenv", "20.16.3"), _entry("virtualenv", "20.24.6"), pre_commit],
    )
    assert _pins(path) == {"virtualenv": "20.16.3", "pre-commit": "3.5.0"}
    # no entry satisfies both: refused in one line naming both entries' lines
    path.write_text(path.read_text().replace('">=20.10.0"', '">=20.20"'))
    first, second = (_line_of(path, "[[package]]", n) for n in (1, 2))
    with pytest.raises(LockfileError) as info:
        load_lock(path)
    message = str(info.value)
    assert "\n" not in message and "package virtualenv: two locked versions" in message
    assert re.search(
        r"every constraint on it \('(<20\.16\.4|>=20\.20)', '(<20\.16\.4|>=20\.20)'\)$", message
    )
    assert f"at line {first}" in message or f"at line {second}" in message, message
    assert re.match(rf"{re.escape(str(path))}:({first}|{second}): ", message), message


def test_poetry_win32_only_dependency_is_not_installed_on_linux(tmp_path: Path) -> None:
    path = _poetry(
        tmp_path,
        'pywin32 = { version = "306", markers = "sys_platform == \'win32\'" }\nsix = "^1.16"\n',
        [_entry("pywin32", "306"), _entry("six", "1.16.0")],
    )
    assert _pins(path) == {"six": "1.16.0"}


def test_poetry_two_entries_that_both_fit_are_refused_naming_both(tmp_path: Path) -> None:
    """The same version locked twice (from PyPI and from another index), nothing in the
    dependency or the entries to tell them apart: one line naming file:line of both."""
    legacy = (
        '[package.source]\ntype = "legacy"\nurl = "https://example.org/simple"\n'
        'reference = "mirror"\n\n'
    )
    entries = [_entry("six", "1.16.0"), _entry("six", "1.16.0").rstrip("\n") + "\n\n" + legacy]
    path = _poetry(tmp_path, 'six = "^1.16"\n', entries)
    first, second = (_line_of(path, "[[package]]", n) for n in (1, 2))
    with pytest.raises(LockfileError) as info:
        load_lock(path)
    message = str(info.value)
    assert "\n" not in message
    assert message.startswith(f"{path}:{second}: package six is locked twice"), message
    assert f"(line {first})" in message and f"(line {second})" in message


def test_poetry_entry_for_another_python_is_left_out(tmp_path: Path) -> None:
    """Two entries satisfy `*`; the newer one's python-versions excludes CPython 3.11, so
    the older one is what Poetry's installer can take here."""
    newer = _entry("tomli", "9.0.0").replace('versions = ">=3.8"', 'versions = ">=3.12"')
    path = _poetry(tmp_path, 'tomli = "*"\n', [_entry("tomli", "2.0.1"), newer])
    assert _pins(path) == {"tomli": "2.0.1"}
    assert _pins(path, Selection(python="3.12")) == {"tomli": "9.0.0"}


_CPU_INDEX = (
    '[package.source]\ntype = "legacy"\nurl = "https://download.pytorch.org/whl/cpu"\n'
    'reference = "torch-cpu"\n\n'
)


def _torch(version: str, source: str = "") -> str:
    wheel = f"torch-{version}-cp311-cp311-manylinux_2_17_x86_64.whl"
    return (
        f'[[package]]\nname = "torch"\nversion = "{version}"\ndescription = ""\n'
        'optional = false\npython-versions = ">=3.8"\n'
        f'files = [\n    {{file = "{wheel}", hash = "sha256:{_h(wheel)}"}},\n]\n\n{source}'
    )


def _indexes(lock: Lock) -> set[str | None]:
    return {lock.options.index_url, *lock.options.extra_index_urls}


def test_poetry_constraint_naming_a_source_takes_that_indexs_entry(tmp_path: Path) -> None:
    """torch from PyPI on linux and from the CPU index elsewhere: both entries satisfy
    `2.1.0` (a local version matches ==2.1.0) and the newest would be 2.1.0+cpu; the linux
    constraint names `pypi`, so PyPI's entry is taken (poetry-core's source_satisfies)."""
    dependencies = (
        "torch = [\n"
        '    { version = "2.1.0", source = "pypi", markers = "sys_platform == \'linux\'" },\n'
        '    { version = "2.1.0", source = "torch-cpu", markers = "sys_platform != \'linux\'" },\n'
        ']\n\n[[tool.poetry.source]]\nname = "torch-cpu"\n'
        'url = "https://download.pytorch.org/whl/cpu"\npriority = "explicit"\n'
    )
    entries = [_torch("2.1.0"), _torch("2.1.0+cpu", _CPU_INDEX)]
    lock = load_lock(_poetry(tmp_path, dependencies, entries))
    assert [(r.name, r.version) for r in lock.requirements] == [("torch", "2.1.0")]
    assert _indexes(lock) == {"https://pypi.org/simple"}
    swapped = dependencies.replace('"pypi"', '"X"').replace('"torch-cpu",', '"pypi",')
    swapped = swapped.replace('"X"', '"torch-cpu"')
    lock = load_lock(_poetry(tmp_path, swapped, entries))
    assert [(r.name, r.version) for r in lock.requirements] == [("torch", "2.1.0+cpu")]
    assert _indexes(lock) == {"https://download.pytorch.org/whl/cpu"}


def test_poetry_git_constraint_for_another_platform_is_not_walked(tmp_path: Path) -> None:
    """`six = [{git = ..., markers = win32}, {version = "^1.16"}]`: on linux the git
    constraint does not apply (its marker was dropped before, and the git source refused)."""
    dependencies = (
        'six = [\n    { git = "https://github.com/benjaminp/six.git", markers = '
        '"sys_platform == \'win32\'" },\n    { version = "^1.16", markers = '
        "\"sys_platform != 'win32'\" },\n]\n"
    )
    path = _poetry(tmp_path, dependencies, [_entry("six", "1.16.0")])
    assert _pins(path) == {"six": "1.16.0"}


def _recorded(marker: str) -> str:
    return f'groups = ["main"]\nmarkers = "{marker}"\n'


def test_poetry_21_entries_by_recorded_marker(tmp_path: Path) -> None:
    """A lock-version 2.1 file records each entry's marker: the one for linux is taken; two
    whose markers both hold are refused naming both lines."""
    win = _recorded('sys_platform == \\"win32\\"')
    other = _recorded('sys_platform != \\"win32\\"')
    entries = [_entry("virtualenv", "20.16.3", win), _entry("virtualenv", "20.24.6", other)]
    path = _poetry(tmp_path, _TIANSHOU_SHAPED, entries, version="2.1")
    assert _pins(path) == {"virtualenv": "20.24.6"}
    both = [_entry("virtualenv", "20.16.3", other), _entry("virtualenv", "20.24.6", other)]
    path = _poetry(tmp_path, _TIANSHOU_SHAPED, both, version="2.1")
    first, second = (_line_of(path, "[[package]]", n) for n in (1, 2))
    with pytest.raises(LockfileError) as info:
        load_lock(path)
    message = str(info.value)
    assert "\n" not in message and message.startswith(f"{path}:{second}: "), message
    assert re.search(rf"20\.16\.3 at line {first} and 20\.24\.6\) apply to CPython 3\.11", message)


def _pdm(entries: list[tuple[str, str]]) -> bytes:
    head = (
        '[metadata]\ngroups = ["default"]\nstrategy = ["inherit_metadata"]\n'
        f'lock_version = "4.5.0"\ncontent_hash = "sha256:{_h("pdm")}"\n\n'
        '[[metadata.targets]]\nrequires_python = ">=3.11"\n\n'
    )
    body = ""
    for version, marker in entries:
        wheel = f"virtualenv-{version}-py3-none-any.whl"
        body += (
            f'[[package]]\nname = "virtualenv"\nversion = "{version}"\ngroups = ["default"]\n'
            f"marker = {marker!r}\n"
            f'files = [\n    {{file = "{wheel}", hash = "sha256:{_h(wheel)}"}},\n]\n\n'
        )
    return (head + body).encode()


def test_pdm_entries_by_marker() -> None:
    """PDM records a marker on each entry: the win32 one is not installed here; two whose
    markers both hold are refused in one line naming both."""
    text = _pdm([("20.16.3", 'sys_platform == "win32"'), ("20.24.6", 'sys_platform != "win32"')])
    lock = parse_lock_bytes(text, Path("pdm.lock"))
    assert [(r.name, r.version) for r in lock.requirements] == [("virtualenv", "20.24.6")]
    both = _pdm([("20.16.3", 'python_version >= "3.8"'), ("20.24.6", 'sys_platform != "win32"')])
    lines = both.decode().splitlines()
    first, second = (n for n, text in enumerate(lines, 1) if text == "[[package]]")
    with pytest.raises(LockfileError) as info:
        parse_lock_bytes(both, Path("pdm.lock"))
    message = str(info.value)
    assert "\n" not in message and message.startswith(f"pdm.lock:{second}: "), message
    assert f"20.16.3 (line {first}) and 20.24.6 (line {second})" in message
