"""Native locks (uv.lock, poetry.lock, Pipfile.lock, pdm.lock) read for one platform.

The uv locks in ``tests/data/lockfiles/native/`` were written by uv itself; each reading is
compared, package by package, with what ``uv export --frozen`` (the format's own tool, pinned
as a dependency of reprobuild) says for the same extras and groups. The poetry, Pipfile and
pdm cases are small locks in each tool's layout, checked against a tiny independent reading.
Every bad input gives one ``file:line: problem`` line and, through the CLI, exit 1.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import re
import shutil
import subprocess
from collections.abc import Callable, Mapping
from pathlib import Path

import pytest

from helpers import exported_pins, parse_export
from reprobuild.bases.catalog import load_catalog
from reprobuild.errors import LockfileError, ReprobuildError
from reprobuild.imaging.plan import plan_build
from reprobuild.imaging.render import render_context, render_dockerfile
from reprobuild.locks.lockfile import Selection, format_of, load_lock, parse_lock_bytes
from reprobuild.locks.poetrylock import content_hashes, poetry_allows
from reprobuild.locks.records import LockChoice

NATIVE = Path(__file__).resolve().parent.parent / "data" / "lockfiles" / "native"


def _uv() -> str:
    from uv import find_uv_bin

    return str(find_uv_bin())


def _h(text: str) -> str:
    return hashlib.sha256(text.encode()).hexdigest()


def _uv_export(project: Path, *args: str) -> dict[str, str]:
    """What ``uv export --frozen`` pins for linux x86_64 CPython 3.11 (markers evaluated)."""
    proc = subprocess.run(
        [_uv(), "export", "--frozen", "--no-hashes", "--no-header", "--no-annotate",
         "--offline", "--no-emit-project", *args],
        cwd=project, capture_output=True, text=True, check=True,
    )  # fmt: skip
    return parse_export(proc.stdout, "uv export")


@pytest.mark.parametrize(
    ("extras", "groups", "export_args"),
    [
        ((), (), ("--no-dev",)),
        (("symbolic",), (), ("--no-dev", "--extra", "symbolic")),
        ((), ("dev",), ("--only-group", "dev", "--group", "dev")),
        (("symbolic", "windows"), ("dev",), ("--extra", "symbolic", "--extra", "windows")),
    ],
)
def test_uv_lock_matches_uv_export(
    extras: tuple[str, ...], groups: tuple[str, ...], export_args: tuple[str, ...]
) -> None:
    project = NATIVE / "uv-extras"
    lock = load_lock(project / "uv.lock", Selection(extras=extras, groups=groups))
    assert lock.format == "uv"
    ours = {r.name: r.version for r in lock.requirements}
    if groups and not extras:
        export_args = ("--no-default-groups", "--group", "dev")
    assert ours == _uv_export(project, *export_args)
    for req in lock.requirements:
        assert req.marker is None and req.hashes and req.line > 0
        assert all(h.startswith("sha256:") for h in req.hashes)
    assert lock.options.index_url == "file:///opt/pypi/simple"


def test_uv_lock_default_groups_match_uv_exports_default() -> None:
    """select.default_groups: what `uv export` takes unasked (the dev group, as uv sync)."""
    project = NATIVE / "uv-extras"
    lock = load_lock(project / "uv.lock", Selection(default_groups=True))
    ours = {r.name: r.version for r in lock.requirements}
    assert ours == _uv_export(project)
    assert "filelock" in ours and ours != _uv_export(project, "--no-dev")


def test_uv_default_groups_follow_tool_uv_default_groups(tmp_path: Path) -> None:
    for name in ("uv.lock", "pyproject.toml"):
        shutil.copy(NATIVE / "uv-extras" / name, tmp_path / name)
    with (tmp_path / "pyproject.toml").open("a") as fh:
        fh.write("\n[tool.uv]\ndefault-groups = []\n")
    lock = load_lock(tmp_path / "uv.lock", Selection(default_groups=True))
    assert "filelock" not in {r.name for r in lock.requirements}


def test_uv_lock_renders_hash_checked_requirements() -> None:
    lock = load_lock(NATIVE / "uv-extras" / "uv.lock")
    text = lock.render(index_options=True)
    assert text.startswith("# Rendered by reprobuild from a uv lock (sha256 ")
    assert "--index-url file:///opt/pypi/simple" in text
    assert "numpy==2.4.6 --hash=sha256:" in text


def test_uv_lock_with_an_unhashed_local_wheel_is_refused() -> None:
    """uv records no hash for a wheel from a local flat index: refused, naming the line."""
    path = NATIVE / "uv-torch-flat" / "uv.lock"
    assert load_lock(path).format == "uv"  # without the extra, torch is not needed
    with pytest.raises(LockfileError) as info:
        load_lock(path, Selection(extras=("cpu",)))
    lines = path.read_text().splitlines()
    assert info.value.line is not None and "torch-2.13.0+cpu" in lines[info.value.line - 1]
    assert "has no hash" in str(info.value)


def _edit(tmp_path: Path, source: Path, old: str, new: str, name: str = "uv.lock") -> Path:
    text = source.read_text()
    assert old in text
    (tmp_path / name).write_text(text.replace(old, new, 1))
    pyproject = source.parent / "pyproject.toml"
    if pyproject.exists():
        (tmp_path / "pyproject.toml").write_bytes(pyproject.read_bytes())
    return tmp_path / name


def test_uv_lock_wrong_hash_is_refused(tmp_path: Path) -> None:
    source = NATIVE / "uv-extras" / "uv.lock"
    good = next(ln for ln in source.read_text().splitlines() if "numpy-2.4.6-cp311" in ln)
    digest = good.split('hash = "sha256:')[1][:64]
    path = _edit(tmp_path, source, digest, digest[:-1] + "Z")
    with pytest.raises(LockfileError, match=r"uv\.lock:\d+: package numpy 2\.4\.6: hash"):
        load_lock(path)


def test_uv_lock_unsupported_version(tmp_path: Path) -> None:
    path = _edit(tmp_path, NATIVE / "uv-extras" / "uv.lock", "version = 1\n", "version = 2\n")
    with pytest.raises(LockfileError, match=r"uv\.lock:1: uv\.lock version '2' is not supported"):
        load_lock(path)


def test_uv_lock_requires_python_excluding_the_image(tmp_path: Path) -> None:
    path = _edit(
        tmp_path,
        NATIVE / "uv-extras" / "uv.lock",
        'requires-python = ">=3.11"',
        'requires-python = ">=3.12"',
    )
    with pytest.raises(LockfileError, match=r"excludes Python 3\.11, the image's Python"):
        load_lock(path)
    with pytest.raises(LockfileError, match=r"has no wheel for CPython 3\.12"):
        load_lock(path, Selection(python="3.12"))  # past requires-python: the local wheels


def test_uv_lock_git_source_without_commit_is_refused(tmp_path: Path) -> None:
    path = _edit(
        tmp_path,
        NATIVE / "uv-extras" / "uv.lock",
        'name = "jinja2"\nversion = "3.1.6"\nsource = { registry = "/opt/pypi/simple" }',
        'name = "jinja2"\nversion = "3.1.6"\nsource = { git = "https://github.com/pallets/jinja'
        '?rev=main#0123" }',
    )
    with pytest.raises(
        LockfileError,
        match=r"uv\.lock:\d+: package jinja2 comes from git 'https://github\.com/pallets/jinja' "
        r"at '0123': a full 40-hex commit is required",
    ):
        load_lock(path)


def test_uv_lock_unknown_extra_is_refused() -> None:
    with pytest.raises(LockfileError, match=r"extra 'gpu' is not one of the project's extras"):
        load_lock(NATIVE / "uv-extras" / "uv.lock", Selection(extras=("gpu",)))


def test_format_of_names() -> None:
    assert format_of(Path("x/uv.lock")) == "uv"
    assert format_of(Path("poetry.lock")) == "poetry"
    assert format_of(Path("Pipfile.lock")) == "pipfile"
    assert format_of(Path("pdm.lock")) == "pdm"
    assert format_of(Path("pylock.toml")) == "pylock"
    assert format_of(Path("requirements.lock")) == "requirements"


# --- Pipfile.lock --------------------------------------------------------------------------


def _pipfile(default: Mapping[str, object], develop: Mapping[str, object] | None = None) -> bytes:
    doc = {
        "_meta": {
            "hash": {"sha256": _h("Pipfile")},
            "pipfile-spec": 6,
            "requires": {"python_version": "3.11"},
            "sources": [
                {"name": "pypi", "url": "https://pypi.org/simple", "verify_ssl": True},
                {
                    "name": "pytorch",
                    "url": "https://download.pytorch.org/whl/cpu",
                    "verify_ssl": True,
                },
            ],
        },
        "default": default,
        "develop": develop or {},
    }
    return json.dumps(doc, indent=4, sort_keys=True).encode()


def test_pipfile_lock_sections_markers_and_indexes() -> None:
    data = _pipfile(
        {
            "numpy": {
                "hashes": [f"sha256:{_h('np1')}", f"sha256:{_h('np2')}"],
                "index": "pypi",
                "version": "==2.4.6",
            },
            "torch": {
                "hashes": [f"sha256:{_h('t')}"],
                "index": "pytorch",
                "version": "==2.13.0+cpu",
            },
            "pywin32": {
                "hashes": [f"sha256:{_h('w')}"],
                "markers": "sys_platform == 'win32'",
                "version": "==306",
            },
        },
        {"pytest": {"hashes": [f"sha256:{_h('p')}"], "version": "==9.0.3"}},
    )
    lock = parse_lock_bytes(data, Path("Pipfile.lock"))
    assert lock.format == "pipfile"
    assert {r.name: r.version for r in lock.requirements} == {
        "numpy": "2.4.6",
        "torch": "2.13.0+cpu",
    }
    assert lock.options.index_url == "https://pypi.org/simple"
    assert lock.options.extra_index_urls == ("https://download.pytorch.org/whl/cpu",)
    dev = parse_lock_bytes(data, Path("Pipfile.lock"), selection=Selection(groups=("dev",)))
    assert "pytest" in {r.name for r in dev.requirements}


def test_pipfile_lock_unknown_index_is_refused() -> None:
    data = _pipfile(
        {"numpy": {"hashes": [f"sha256:{_h('n')}"], "index": "internal", "version": "==2.4.6"}}
    )
    with pytest.raises(
        LockfileError,
        match=r"Pipfile\.lock:\d+: package numpy names index "
        r"'internal', which _meta\.sources does not define",
    ):
        parse_lock_bytes(data, Path("Pipfile.lock"))


def test_pipfile_lock_without_hash_or_from_git_is_refused() -> None:
    with pytest.raises(LockfileError, match=r"package numpy 2\.4\.6 has no hashes"):
        parse_lock_bytes(_pipfile({"numpy": {"version": "==2.4.6"}}), Path("Pipfile.lock"))
    git = {"mylib": {"git": "https://github.com/x/y.git", "ref": "abc"}}
    with pytest.raises(LockfileError, match=r"package mylib comes from git .* at 'abc': a full"):
        parse_lock_bytes(_pipfile(git), Path("Pipfile.lock"))


def test_pipfile_lock_for_another_python_is_refused() -> None:
    data = _pipfile({"numpy": {"hashes": [f"sha256:{_h('n')}"], "version": "==2.4.6"}})
    with pytest.raises(LockfileError, match=r"requires python_version '3\.11', not Python 3\.12"):
        parse_lock_bytes(data, Path("Pipfile.lock"), selection=Selection(python="3.12"))


# --- pdm.lock ------------------------------------------------------------------------------

_PDM = f"""\
# This file is @generated by PDM.
# It is not intended for manual editing.

[metadata]
groups = ["default", "dev", "symbolic"]
strategy = ["inherit_metadata"]
lock_version = "4.5.0"
content_hash = "sha256:{_h("pdm")}"

[[metadata.targets]]
requires_python = ">=3.11"

[[package]]
name = "numpy"
version = "2.4.6"
requires_python = ">=3.11"
groups = ["default"]
files = [
    {{file = "numpy-2.4.6-cp311-cp311-manylinux_2_27_x86_64.manylinux_2_28_x86_64.whl", hash = "sha256:{_h("n311")}"}},
    {{file = "numpy-2.4.6-cp312-cp312-manylinux_2_27_x86_64.manylinux_2_28_x86_64.whl", hash = "sha256:{_h("n312")}"}},
    {{file = "numpy-2.4.6-cp311-cp311-win_amd64.whl", hash = "sha256:{_h("nwin")}"}},
    {{file = "numpy-2.4.6.tar.gz", hash = "sha256:{_h("nsd")}"}},
]

[[package]]
name = "colorama"
version = "0.4.6"
groups = ["default"]
marker = "sys_platform == \\"win32\\""
files = [
    {{file = "colorama-0.4.6-py2.py3-none-any.whl", hash = "sha256:{_h("c")}"}},
]

[[package]]
name = "sympy"
version = "1.14.0"
groups = ["symbolic"]
files = [
    {{file = "sympy-1.14.0-py3-none-any.whl", hash = "sha256:{_h("s")}"}},
]
"""  # noqa: E501


def test_pdm_lock_groups_markers_and_platform_wheels() -> None:
    lock = parse_lock_bytes(_PDM.encode(), Path("pdm.lock"))
    assert lock.format == "pdm"
    assert [(r.name, r.version, r.hashes) for r in lock.requirements] == [
        ("numpy", "2.4.6", (f"sha256:{_h('n311')}",))
    ]
    with_extra = parse_lock_bytes(
        _PDM.encode(), Path("pdm.lock"), selection=Selection(extras=("symbolic",))
    )
    assert [r.name for r in with_extra.requirements] == ["numpy", "sympy"]
    # no wheel for 3.13: its sdist is built; pdm.lock names the file, not its URL, so the host
    # looks it up on the index
    built = parse_lock_bytes(_PDM.encode(), Path("pdm.lock"), selection=Selection(python="3.13"))
    (numpy,) = built.requirements
    assert numpy.source is not None and numpy.hashes == (f"sha256:{_h('nsd')}",)
    assert (numpy.source.filename, numpy.source.url, numpy.source.index) == (
        "numpy-2.4.6.tar.gz",
        None,
        "https://pypi.org/simple",
    )
    sdist_line = f'    {{file = "numpy-2.4.6.tar.gz", hash = "sha256:{_h("nsd")}"}},\n'
    no_sdist = _PDM.replace(sdist_line, "")
    assert no_sdist != _PDM
    with pytest.raises(
        LockfileError,
        match=r"package numpy 2\.4\.6 has no wheel for CPython "
        r"3\.13 on linux x86_64",
    ):
        parse_lock_bytes(no_sdist.encode(), Path("pdm.lock"), selection=Selection(python="3.13"))


def test_pdm_lock_without_hash_is_refused() -> None:
    text = _PDM.replace(f', hash = "sha256:{_h("n311")}"', "")
    with pytest.raises(
        LockfileError,
        match=r"pdm\.lock:19: package numpy 2\.4\.6: wheel "
        r"'numpy-2\.4\.6-cp311-cp311-manylinux.*has no hash",
    ):
        parse_lock_bytes(text.encode(), Path("pdm.lock"))


# --- poetry.lock ---------------------------------------------------------------------------

_PYPROJECT = """\
[tool.poetry]
name = "demo"
version = "0.1.0"
description = ""
authors = []

[tool.poetry.dependencies]
python = "^3.10"
numpy = "^2.0"
colorama = { version = "*", markers = "sys_platform == 'win32'" }
sympy = { version = "^1.12", optional = true }

[tool.poetry.extras]
symbolic = ["sympy"]

[tool.poetry.group.dev.dependencies]
pytest = "^9.0"
"""


def _poetry_lock(pyproject: str, lock_version: str) -> str:
    import tomllib

    digest = sorted(content_hashes(tomllib.loads(pyproject)))[0]
    # the groups and markers a lock-version 2.1 records per package (as Poetry 2.5.1 wrote
    # them for the same project in tests/data/lockfiles/native/poetry-2.1/poetry.lock)
    extra = 'markers = "extra == \\"symbolic\\""\n'
    packages = [
        ("colorama", "0.4.6", "colorama-0.4.6-py2.py3-none-any.whl", {},
         'groups = ["main"]\nmarkers = "sys_platform == \\"win32\\""\n'),
        ("mpmath", "1.3.0", "mpmath-1.3.0-py3-none-any.whl", {}, f'groups = ["main"]\n{extra}'),
        ("numpy", "2.4.6", "numpy-2.4.6-cp311-cp311-manylinux_2_17_x86_64.whl", {},
         'groups = ["main"]\n'),
        ("pytest", "9.0.3", "pytest-9.0.3-py3-none-any.whl", {}, 'groups = ["dev"]\n'),
        ("sympy", "1.14.0", "sympy-1.14.0-py3-none-any.whl", {"mpmath": ">=1.1.0,<1.4"},
         f'groups = ["main"]\n{extra}'),
    ]  # fmt: skip
    out = []
    files_table = ["", "[metadata.files]"]
    for name, version, wheel, deps, recorded in packages:
        optional = "true" if extra in recorded else "false"  # as Poetry writes them
        out.append(
            f'[[package]]\nname = "{name}"\nversion = "{version}"\ndescription = ""\n'
            f'optional = {optional}\npython-versions = ">=3.8"\n'
            + (recorded if lock_version == "2.1" else "")
        )
        files = f'[\n    {{file = "{wheel}", hash = "sha256:{_h(wheel)}"}},\n]'
        if lock_version == "1.1":
            files_table.append(f"{name} = {files}")
        else:
            out.append(f"files = {files}\n")
        if deps:
            out.append(
                "[package.dependencies]\n"
                + "".join(f'{k} = "{v}"\n' for k, v in deps.items())
                + "\n"
            )
        else:
            out.append("\n")
    meta = (
        f'[metadata]\nlock-version = "{lock_version}"\npython-versions = "^3.10"\n'
        f'content-hash = "{digest}"\n'
    )
    tail = "\n".join(files_table) + "\n" if lock_version == "1.1" else ""
    return "".join(out) + meta + tail


@pytest.mark.parametrize("lock_version", ["1.1", "2.0", "2.1"])
def test_poetry_lock_walks_the_graph(tmp_path: Path, lock_version: str) -> None:
    (tmp_path / "pyproject.toml").write_text(_PYPROJECT)
    path = tmp_path / "poetry.lock"
    path.write_text(_poetry_lock(_PYPROJECT, lock_version))
    lock = load_lock(path)
    assert lock.format == "poetry"
    assert {r.name: r.version for r in lock.requirements} == {"numpy": "2.4.6"}
    assert lock.notes and "demo itself is not installed" in lock.notes[0]
    full = load_lock(path, Selection(extras=("symbolic",), groups=("dev",)))
    assert {r.name for r in full.requirements} == {"numpy", "sympy", "mpmath", "pytest"}


@pytest.mark.parametrize("lock_version", ["1.1", "2.0"])
def test_poetry_1x_optional_dependency_locked_as_required(
    tmp_path: Path, lock_version: str
) -> None:
    """sympy is optional in pyproject.toml, but when another group needs it too Poetry locks it
    ``optional = false`` (robyn 0.44.0: jinja2, for its templating extra and commitizen in
    dev), and Poetry's export then takes it with main, no extra asked: the lock's flag rules."""
    (tmp_path / "pyproject.toml").write_text(_PYPROJECT)
    path = tmp_path / "poetry.lock"
    text = _poetry_lock(_PYPROJECT, lock_version)
    assert text.count("optional = true") == 2  # sympy and mpmath, as Poetry locks them
    path.write_text(text)
    assert {r.name for r in load_lock(path).requirements} == {"numpy"}
    path.write_text(text.replace("optional = true", "optional = false"))
    assert {r.name for r in load_lock(path).requirements} == {"numpy", "sympy", "mpmath"}


def test_poetry_1x_lock_reads_tool_poetry_not_project(tmp_path: Path) -> None:
    """A [project] table beside [tool.poetry] (for maturin, say): Poetry 1.x ignores it, and
    its content-hash does not cover it. A lock with that hash takes the project's dependencies
    from [tool.poetry.dependencies] (robyn 0.44.0's maturin), one with Poetry 2's hash from
    [project].dependencies, which Poetry 2 reads first."""
    import tomllib

    pyproject = '[project]\nname = "demo"\nversion = "0.1.0"\ndependencies = []\n\n' + _PYPROJECT
    (tmp_path / "pyproject.toml").write_text(pyproject)
    path = tmp_path / "poetry.lock"
    text = _poetry_lock(pyproject, "1.1")
    recorded = re.search(r'content-hash = "(\w+)"', text)
    assert recorded is not None
    data = tomllib.loads(pyproject)
    poetry = data["tool"]["poetry"]
    keys = ("dependencies", "source", "extras", "dev-dependencies")
    poetry1 = {k: poetry.get(k) for k in keys} | {"group": poetry["group"]}
    poetry2 = {
        "project": {"dependencies": []},
        "tool": {"poetry": {k: poetry[k] for k in (*keys, "group") if k in poetry}},
    }
    for form, expected in ((poetry1, {"numpy"}), (poetry2, set())):
        digest = hashlib.sha256(json.dumps(form, sort_keys=True).encode()).hexdigest()
        assert digest in content_hashes(data)
        path.write_text(text.replace(recorded.group(1), digest))
        assert {r.name for r in load_lock(path).requirements} == expected


def _poetry21(tmp_path: Path, edit: Callable[[str], str]) -> Path:
    (tmp_path / "pyproject.toml").write_text(_PYPROJECT)
    path = tmp_path / "poetry.lock"
    path.write_text(edit(_poetry_lock(_PYPROJECT, "2.1")))
    return path


def test_poetry_21_reads_recorded_groups_not_the_graph(tmp_path: Path) -> None:
    """lock-version 2.1: the packages come from the groups and markers each one records, as
    Poetry's export reads them, not from the dependency graph: here numpy is recorded in the
    dev group only, so main alone leaves it out though the project depends on it."""
    numpy = 'name = "numpy"\nversion = "2.4.6"\ndescription = ""\noptional = false\n'
    numpy += 'python-versions = ">=3.8"\ngroups = '
    path = _poetry21(tmp_path, lambda t: t.replace(numpy + '["main"]', numpy + '["dev"]'))
    assert {r.name for r in load_lock(path).requirements} == set()
    assert {r.name for r in load_lock(path, Selection(groups=("dev",))).requirements} == {
        "numpy",
        "pytest",
    }


def test_poetry_21_marker_per_group(tmp_path: Path) -> None:
    """``markers`` as a table: each group has its own marker, a group missing from the table
    is unconditional. colorama is in main on Windows only but in dev everywhere."""
    path = _poetry21(
        tmp_path,
        lambda t: t.replace(
            'groups = ["main"]\nmarkers = "sys_platform == \\"win32\\""',
            'groups = ["main", "dev"]\nmarkers = {main = "sys_platform == \\"win32\\""}',
        ),
    )
    assert {r.name for r in load_lock(path).requirements} == {"numpy"}
    dev = load_lock(path, Selection(groups=("dev",)))
    assert {r.name for r in dev.requirements} == {"numpy", "pytest", "colorama"}
    # each group's own marker: dev's excludes linux, and main's still does
    text = path.read_text()
    win = '{main = "sys_platform == \\"win32\\""'
    path.write_text(text.replace(win, win + ', dev = "sys_platform == \\"darwin\\""'))
    dev = load_lock(path, Selection(groups=("dev",)))
    assert {r.name for r in dev.requirements} == {"numpy", "pytest"}
    path.write_text(text.replace(win, win + ', dev = "sys_platform == \\"linux\\""'))
    dev = load_lock(path, Selection(groups=("dev",)))
    assert {r.name for r in dev.requirements} == {"numpy", "pytest", "colorama"}


def test_poetry_21_extra_in_a_marker(tmp_path: Path) -> None:
    """An extra is recorded as ``extra == "symbolic"`` in the package's marker: it holds only
    when that extra is chosen, with the platform part of the marker still evaluated (mpmath:
        the symbolic extra on Windows only)."""
    path = _poetry21(
        tmp_path,
        lambda t: t.replace(
            'name = "mpmath"\nversion = "1.3.0"\ndescription = ""\noptional = true\n'
            'python-versions = ">=3.8"\ngroups = ["main"]\nmarkers = "extra == \\"symbolic\\""',
            'name = "mpmath"\nversion = "1.3.0"\ndescription = ""\noptional = true\n'
            'python-versions = ">=3.8"\ngroups = ["main"]\nmarkers = "extra == \\"symbolic\\" '
            'and sys_platform == \\"win32\\""',
        ),
    )
    assert {r.name for r in load_lock(path).requirements} == {"numpy"}
    symbolic = load_lock(path, Selection(extras=("symbolic",)))
    assert {r.name for r in symbolic.requirements} == {"numpy", "sympy"}
    # the walk would have found mpmath through sympy's dependencies: the record rules
    assert "mpmath" in (path.read_text().split('name = "sympy"')[1])


def test_poetry_21_markers_see_every_chosen_extra_at_once(tmp_path: Path) -> None:
    """Poetry evaluates a recorded marker with all the chosen extras active together: ``extra
    == "symbolic" and extra == "win"`` holds only with both chosen, and ``extra != "win"``
    fails once win is chosen, whatever else is. Asking each extra alone (as pip does for a
    package's extras) would take mpmath with neither test and keep numpy with both."""
    pyproject = _PYPROJECT.replace('symbolic = ["sympy"]', 'symbolic = ["sympy"]\nwin = []')
    (tmp_path / "pyproject.toml").write_text(pyproject)
    path = tmp_path / "poetry.lock"
    both = 'markers = "extra == \\"symbolic\\" and extra == \\"win\\""'
    text = _poetry_lock(pyproject, "2.1")
    mpmath = 'name = "mpmath"\nversion = "1.3.0"\ndescription = ""\noptional = true\n'
    mpmath += 'python-versions = ">=3.8"\ngroups = ["main"]\n'
    numpy = 'name = "numpy"\nversion = "2.4.6"\ndescription = ""\noptional = false\n'
    numpy += 'python-versions = ">=3.8"\ngroups = ["main"]\n'
    text = text.replace(mpmath + 'markers = "extra == \\"symbolic\\""', mpmath + both)
    text = text.replace(numpy, numpy + 'markers = "extra != \\"win\\""\n')
    assert both in text and 'extra != \\"win\\"' in text
    path.write_text(text)

    def names(*extras: str) -> set[str]:
        return {r.name for r in load_lock(path, Selection(extras=extras)).requirements}

    assert names() == {"numpy"}
    assert names("symbolic") == {"numpy", "sympy"}
    assert names("win") == set()
    assert names("symbolic", "win") == {"sympy", "mpmath"}


def test_poetry_21_package_without_groups_is_refused(tmp_path: Path) -> None:
    path = _poetry21(tmp_path, lambda t: t.replace('groups = ["dev"]\n', "", 1))
    line = path.read_text().splitlines().index('name = "pytest"')  # its [[package]], 1-based
    with pytest.raises(
        LockfileError,
        match=rf"poetry\.lock:{line}: package pytest 9\.0\.3 has no 'groups' list: a "
        r"lock-version 2\.1 file records the groups of every package$",
    ) as info:
        load_lock(path)
    assert "\n" not in str(info.value) and "relock" in (info.value.hint or "")


def test_poetry_lock_stale_is_refused(tmp_path: Path) -> None:
    (tmp_path / "pyproject.toml").write_text(_PYPROJECT.replace('numpy = "^2.0"', 'numpy = "^2.1"'))
    path = tmp_path / "poetry.lock"
    path.write_text(_poetry_lock(_PYPROJECT, "2.1"))
    with pytest.raises(LockfileError, match=r"poetry\.lock:\d+: is stale: its content-hash"):
        load_lock(path)


def test_poetry_lock_unsupported_version(tmp_path: Path) -> None:
    (tmp_path / "pyproject.toml").write_text(_PYPROJECT)
    path = tmp_path / "poetry.lock"
    path.write_text(_poetry_lock(_PYPROJECT, "2.1").replace('"2.1"', '"3.0"'))
    with pytest.raises(LockfileError, match=r"lock-version '3\.0' is not supported"):
        load_lock(path)


def test_poetry_constraints() -> None:
    assert poetry_allows("^3.10", "3.11.0") and not poetry_allows("^3.12", "3.11.0")
    assert poetry_allows(">=3.8,<4.0", "3.11.0") and poetry_allows(">=3.8 <4.0", "3.11.0")
    assert poetry_allows("~3.11", "3.11.5") and not poetry_allows("~3.11", "3.12.0")
    assert poetry_allows("^0.4", "0.4.6") and not poetry_allows("^0.4", "0.5.0")
    assert poetry_allows(">=2.7,<3.0 || >=3.8", "3.11.0")
    assert poetry_allows("*", "1.0")


# --- locks written by Poetry and pipenv, against their own exports ---------------------------


@pytest.mark.parametrize(
    ("folder", "lock_name", "selection", "export"),
    [
        ("poetry-1.1", "poetry.lock", Selection(), "export-main.txt"),
        ("poetry-1.1", "poetry.lock", Selection(extras=("symbolic",)), "export-extra-symbolic.txt"),
        ("poetry-1.1", "poetry.lock", Selection(groups=("dev",)), "export-group-dev.txt"),
        ("poetry-2.1", "poetry.lock", Selection(), "export-main.txt"),
        ("poetry-2.1", "poetry.lock", Selection(extras=("symbolic",)), "export-extra-symbolic.txt"),
        ("poetry-2.1", "poetry.lock", Selection(groups=("dev",)), "export-group-dev.txt"),
        ("pipenv", "Pipfile.lock", Selection(), "export-main.txt"),
        ("pipenv", "Pipfile.lock", Selection(groups=("dev",)), "export-group-dev.txt"),
        # select.default_groups: Poetry's non-optional groups (dev here); pipenv's default
        # section alone, as `pipenv sync` installs it.
        ("poetry-1.1", "poetry.lock", Selection(default_groups=True), "export-group-dev.txt"),
        ("poetry-2.1", "poetry.lock", Selection(default_groups=True), "export-group-dev.txt"),
        ("pipenv", "Pipfile.lock", Selection(default_groups=True), "export-main.txt"),
        # written by PDM 2.26.1 (tests/data/lockfiles/native/README.md)
        ("pdm", "pdm.lock", Selection(), "export-main.txt"),
        ("pdm", "pdm.lock", Selection(extras=("symbolic",)), "export-extra-symbolic.txt"),
        ("pdm", "pdm.lock", Selection(groups=("dev",)), "export-group-dev.txt"),
    ],
)
def test_tool_written_lock_matches_the_tools_export(
    folder: str, lock_name: str, selection: Selection, export: str
) -> None:
    lock = load_lock(NATIVE / folder / lock_name, selection)
    assert {r.name: r.version for r in lock.requirements} == exported_pins(NATIVE / folder / export)
    # pdm.lock names no index (it is in pyproject.toml's [[tool.pdm.source]]): none is kept
    index = None if lock.format == "pdm" else "http://127.0.0.1:8765/simple"
    assert lock.options.index_url == index
    assert all(r.hashes and r.marker is None for r in lock.requirements)


@pytest.mark.parametrize("folder", ["poetry-1.1", "poetry-2.1"])
def test_real_poetry_lock_goes_stale_when_pyproject_changes(tmp_path: Path, folder: str) -> None:
    shutil.copy(NATIVE / folder / "poetry.lock", tmp_path / "poetry.lock")
    text = (NATIVE / folder / "pyproject.toml").read_text()
    (tmp_path / "pyproject.toml").write_text(text.replace("numpy", "scipy", 1))
    with pytest.raises(LockfileError, match=r"poetry\.lock:\d+: is stale: its content-hash"):
        load_lock(tmp_path / "poetry.lock")
    (tmp_path / "pyproject.toml").unlink()
    with pytest.raises(LockfileError, match=r"has no pyproject\.toml beside it"):
        load_lock(tmp_path / "poetry.lock")


def test_real_pipfile_lock_unknown_index(tmp_path: Path) -> None:
    source = NATIVE / "pipenv" / "Pipfile.lock"
    text = source.read_text().replace('"index": "local"', '"index": "internal"', 1)
    (tmp_path / "Pipfile.lock").write_text(text)
    with pytest.raises(LockfileError, match=r"Pipfile\.lock:\d+: package jinja2 names index "):
        load_lock(tmp_path / "Pipfile.lock")


@pytest.mark.parametrize("extra", ["cpu", "cu"])
def test_uv_lock_torch_index_chosen_by_extra(extra: str) -> None:
    """torch is locked twice, once per conflicting extra, each from its own index (as with
    PyTorch's CPU and CUDA indexes): the extra asked for picks the package and its index."""
    project = NATIVE / "uv-torch-extra"
    lock = load_lock(project / "uv.lock", Selection(extras=(extra,)))
    ours = {r.name: r.version for r in lock.requirements}
    assert ours == _uv_export(project, "--extra", extra)
    assert ours["torch"] == "2.13.0+cpu"
    assert lock.options.extra_index_urls == (f"file:///tmp/e_idx/{extra}",)
    assert "torch" not in {r.name for r in load_lock(project / "uv.lock").requirements}


def test_uv_lock_conflicting_extras_are_refused() -> None:
    with pytest.raises(
        LockfileError,
        match=r"package torch: both 2\.13\.0\+cpu from "
        r"/tmp/e_idx/.* \(conflicting extras\?\)",
    ):
        load_lock(NATIVE / "uv-torch-extra" / "uv.lock", Selection(extras=("cpu", "cu")))


@pytest.mark.parametrize(
    "lock", sorted(str(p.relative_to(NATIVE)) for p in NATIVE.glob("*/*.lock"))
)
def test_pruning_foreign_wheels_keeps_lines_and_toml(lock: str) -> None:
    """The readers blank other platforms' wheel lines before parsing (the speed-up
    benchmarks/init_bench.py measures): line numbers and TOML validity must not change."""
    import tomllib

    text = (NATIVE / lock).read_text()
    pruned = Selection().prune_foreign_wheels(text)
    assert pruned.count("\n") == text.count("\n")
    if not lock.endswith("Pipfile.lock"):
        tomllib.loads(pruned)


def test_pdm_default_groups_are_every_locked_group() -> None:
    """select.default_groups for a pdm.lock: what `pdm sync` installs unasked, every group the
    lock holds (its optional-dependencies groups too; tests/data/.../pdm/sync-dry-run.txt)."""
    lock = load_lock(NATIVE / "pdm" / "pdm.lock", Selection(default_groups=True))
    assert {r.name: r.version for r in lock.requirements} == exported_pins(
        NATIVE / "pdm" / "export-default-groups.txt"
    )
    synced = (NATIVE / "pdm" / "sync-dry-run.txt").read_text()
    assert {r.name for r in lock.requirements} == set(re.findall(r"- (\S+) ", synced))


# --- select: in reprobuild.yaml, as render and image read it ---------------------------------


def _selected_project(tmp_path: Path, select: str, lock: str = "uv.lock") -> Path:
    project = tmp_path / "p"
    shutil.copytree(NATIVE / "uv-extras", project)
    rendered = load_lock(project / "uv.lock").render(index_options=True)
    (project / "requirements.lock").write_text(rendered)
    (project / "reprobuild.yaml").write_text(
        f"name: demo\nlock: {lock}\nbase:\n  cpu: python-3.11-slim-bookworm\n{select}"
    )
    return project


def test_select_in_reprobuild_yaml_reaches_the_plan(tmp_path: Path) -> None:
    project = _selected_project(tmp_path, "select:\n  extras: [symbolic]\n  default_groups: true\n")
    lock = plan_build(project).spec.lock
    assert {"sympy", "filelock"} <= {r.name for r in lock.requirements}
    assert lock.choice == LockChoice(extras=("symbolic",), default_groups=True)
    assert lock.format_name == "uv.lock"


@pytest.mark.parametrize(
    ("select", "lock", "expected"),
    [
        ("select:\n  groups: [dev]\n", "requirements.lock",
         r"reprobuild\.yaml:6: select chooses extras or groups, but requirements\.lock is not "
         r"a native lock"),
        ('select:\n  python: "3.12"\n', "uv.lock",
         r"reprobuild\.yaml:6: select\.python 3\.12 is not the base's CPython 3\.11"),
        ("select:\n  extras: [gpu]\n", "uv.lock",
         r"uv\.lock:\d+: extra 'gpu' is not one of the project's extras \(symbolic, windows\)"),
    ],
)  # fmt: skip
def test_select_refusals_name_the_line(
    tmp_path: Path, select: str, lock: str, expected: str
) -> None:
    project = _selected_project(tmp_path, select, lock)
    with pytest.raises(ReprobuildError) as info:
        plan_build(project)
    assert "\n" not in info.value.message
    assert re.search(expected, info.value.message), info.value.message


def test_the_install_step_changes_with_the_selection(tmp_path: Path) -> None:
    """buildah's layer cache does not look into the mounted requirements: a native lock's
    install step carries their sha256, so another selection of the same lock is another step
    (the same uv.lock with an extra reused the layer without it)."""
    plain = _selected_project(tmp_path / "a", "")
    extra = _selected_project(tmp_path / "b", "select:\n  extras: [symbolic]\n")
    steps = []
    for project in (plain, extra):
        spec = dataclasses.replace(plan_build(project).spec, mount_install=True)
        mounted = render_context(spec)["requirements.lock"].data
        step = next(ln for ln in render_dockerfile(spec).splitlines() if "LOCK_SHA256=" in ln)
        assert f"REPROBUILD_REQUIREMENTS_SHA256={hashlib.sha256(mounted).hexdigest()} " in step
        steps.append(step)
    assert steps[0] != steps[1]


def test_the_catalog_bases_python_holds_when_given_by_digest(tmp_path: Path) -> None:
    """rebuild gives the base as the image recorded it, NAME@sha256: when that is the
    project's own catalog base, its CPython is still the one the lock is read for."""
    project = _selected_project(tmp_path, 'select:\n  python: "3.12"\n')
    ref = load_catalog().get("python-3.11-slim-bookworm").ref.by_digest()
    with pytest.raises(ReprobuildError, match=r"select\.python 3\.12 is not the base's CPython"):
        plan_build(project, base=ref)
    # another image: select.python decides, and this lock has no 3.12 wheel of markupsafe
    other = "127.0.0.1:5000/x/y@sha256:" + "ab" * 32
    with pytest.raises(LockfileError) as info:
        plan_build(project, base=other)
    assert re.fullmatch(
        r".*/uv\.lock:\d+: package markupsafe 3\.0\.3 has no wheel for CPython 3\.12 on linux "
        r"x86_64 \(its wheels are for other platforms or Pythons\) and no hashed sdist to build "
        r"one from; nor do package numpy 2\.4\.6 \(line \d+\)",
        info.value.message,
    ), info.value.message


def test_every_package_without_a_wheel_is_named_in_one_error() -> None:
    from reprobuild.locks.native import NoWheelError, NoWheels

    lacking = NoWheels()
    for n in range(11):
        with lacking.each():
            raise NoWheelError(
                "uv.lock", 10 + n, f"package p{n} 1.0 has none", hint="h", label=f"package p{n} 1.0"
            )
    with lacking.each():
        pass  # a package that has one
    with pytest.raises(NoWheelError) as info:
        lacking.check()
    assert info.value.message == (
        "uv.lock:10: package p0 1.0 has none; nor do "
        + ", ".join(f"package p{n} 1.0 (line {10 + n})" for n in range(1, 9))
        + ", and 2 more"
    )
    assert info.value.hint == "h"
    one = NoWheels()
    with one.each():
        raise NoWheelError("uv.lock", 3, "package q 1 has none", hint=None, label="package q 1")
    with pytest.raises(NoWheelError, match=r"^uv\.lock:3: package q 1 has none$"):
        one.check()
    NoWheels().check()  # none lacking: nothing raised
    with pytest.raises(LockfileError, match="other"), NoWheels().each():
        raise LockfileError("uv.lock", 1, "other")  # not a missing wheel: not collected
