"""git dependencies pinned by commit and project folders, read by every lock reader.

The uv locks here are written by uv itself (the pinned ``uv`` dependency, ``uv lock
--offline``) from a workspace with an editable member and a git dependency on a local
``file://`` repository made by the test with real git. The Poetry, PDM, Pipfile and
requirements cases are small locks in each tool's layout. Every refusal is one line naming
``file:line``, the package and the bad value.
"""

from __future__ import annotations

import hashlib
import json
import re
import shutil
import tomllib
from pathlib import Path

import pytest

from helpers import make_uv_workspace
from reprobuild.errors import LockfileError
from reprobuild.locks.lockfile import load_lock, parse_lock_bytes
from reprobuild.locks.poetrylock import content_hashes
from reprobuild.locks.records import SourcePin
from reprobuild.locks.sources import git_url_problem

COMMIT = "0123456789abcdef0123456789abcdef01234567"


def _h(text: str) -> str:
    return hashlib.sha256(text.encode()).hexdigest()


@pytest.fixture(scope="module")
def workspace(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """One uv workspace locked by uv, for the tests that only edit its lock."""
    project, _commit = make_uv_workspace(tmp_path_factory.mktemp("uvws"))
    return project


def test_uv_workspace_member_and_git_commit(tmp_path: Path) -> None:
    project, commit = make_uv_workspace(tmp_path)
    lock = load_lock(project / "uv.lock")
    assert lock.requirements == ()
    assert [(p.name, p.version, p.kind, p.location, p.commit, p.editable) for p in
            lock.source_pins] == [
        ("core", "0.3.0", "path", "packages/core", None, True),
        ("gitdep", "1.2.0", "git", f"file://{tmp_path}/gitdep", commit, False),
    ]  # fmt: skip
    text = (project / "uv.lock").read_text().splitlines()
    for pin in lock.source_pins:
        assert text[pin.line - 1] == "[[package]]" and f'"{pin.name}"' in text[pin.line]
    said = " ".join(lock.notes)
    assert "the project demo itself is not installed from the lock" in said
    assert "core is built into a wheel in the image from the project's folder packages/core" in said
    assert f"at commit {commit}" in said


def test_uv_branch_resolves_to_its_commit(tmp_path: Path) -> None:
    """`rev = "main"`: uv records the commit it resolved as the URL's fragment."""
    project, commit = make_uv_workspace(tmp_path, rev="main")
    (git,) = [p for p in load_lock(project / "uv.lock").source_pins if p.kind == "git"]
    assert git.commit == commit and git.location == f"file://{tmp_path}/gitdep"


def test_uv_git_without_commit_is_one_line(tmp_path: Path) -> None:
    project, commit = make_uv_workspace(tmp_path, rev="main")
    path = project / "uv.lock"
    path.write_text(path.read_text().replace(f"?rev=main#{commit}", "?rev=main"))
    with pytest.raises(LockfileError) as info:
        load_lock(path)
    message = str(info.value)
    assert "\n" not in message
    assert message.startswith(f"{path}:"), message
    assert "package gitdep comes from git" in message and "at 'main'" in message
    assert "a full 40-hex commit is required" in message


@pytest.mark.parametrize(
    ("source", "reason"),
    [
        ('{ editable = "../elsewhere" }', r"path '\.\./elsewhere' leaves the project"),
        ('{ path = "/etc" }', r"path '/etc' leaves the project"),
        ('{ directory = "packages/../../x" }', r"leaves the project"),
        (f'{{ git = "ext::sh -c touch% /tmp/pwned#{COMMIT}" }}', r"transport helper"),
        (f'{{ git = "ext::sh#{COMMIT}" }}', r"transport helper"),
        (f'{{ git = "http://example.com/r.git#{COMMIT}" }}', r"scheme 'http' is not allowed"),
        (f'{{ git = "git@github.com:o/r.git#{COMMIT}" }}', r"is not allowed, only https"),
        (f'{{ git = "https://u:pw@example.com/r.git#{COMMIT}" }}', r"embeds credentials"),
        ('{ git = "https://example.com/r.git?tag=v1#abc1234" }', r"at 'abc1234': a full 40-hex"),
    ],
)
def test_uv_hostile_sources_refused_in_one_line(
    tmp_path: Path, workspace: Path, source: str, reason: str
) -> None:
    project = tmp_path / "proj"
    shutil.copytree(workspace, project)
    path = project / "uv.lock"
    text = path.read_text()
    start = text.index('source = { editable = "packages/core" }')
    path.write_text(text[:start] + f"source = {source}" + text[text.index("\n", start) :])
    with pytest.raises(LockfileError) as info:
        load_lock(path)
    message = str(info.value)
    assert "\n" not in message and message.startswith(f"{path}:"), message
    assert "package core" in message
    assert re.search(reason, message), message


@pytest.mark.parametrize(
    "url",
    [
        "-uhttps://example.com/x",
        "--upload-pack=touch /tmp/x",
        "ext::sh -c id",
        "fd::3",
        "file://host/x",
        "ssh://-oProxyCommand=x/r",
        "https://example.com/a b",
        "ftp://example.com/r.git",
    ],
)
def test_git_url_is_data_never_code(url: str) -> None:
    assert git_url_problem(url) is not None


@pytest.mark.parametrize(
    "url",
    ["https://github.com/o/r.git", "ssh://git@github.com/o/r.git", "file:///srv/git/r"],
)
def test_git_url_accepted(url: str) -> None:
    assert git_url_problem(url) is None


def _poetry(tmp: Path, packages: str, deps: str) -> Path:
    pyproject = (
        '[tool.poetry]\nname = "demo"\nversion = "0.1.0"\ndescription = ""\nauthors = []\n'
        f'package-mode = false\n\n[tool.poetry.dependencies]\npython = "^3.11"\n{deps}\n'
    )
    (tmp / "pyproject.toml").write_text(pyproject)
    digest = sorted(content_hashes(tomllib.loads(pyproject)))[0]
    lock = (
        f'{packages}\n[metadata]\nlock-version = "2.0"\npython-versions = "^3.11"\n'
        f'content-hash = "{digest}"\n'
    )
    (tmp / "poetry.lock").write_text(lock)
    return tmp / "poetry.lock"


_POETRY_GIT = """[[package]]
name = "gitdep"
version = "1.2.0"
description = ""
optional = false
python-versions = "*"
files = []

[package.source]
type = "git"
url = "https://example.com/gitdep.git"
reference = "main"
resolved_reference = "{resolved}"
"""

_POETRY_PATH = """[[package]]
name = "core"
version = "0.3.0"
description = ""
optional = false
python-versions = "*"
files = []
develop = true

[package.source]
type = "directory"
url = "{url}"
"""


def test_poetry_git_and_develop_path(tmp_path: Path) -> None:
    path = _poetry(
        tmp_path,
        _POETRY_GIT.format(resolved=COMMIT) + "\n" + _POETRY_PATH.format(url="packages/core"),
        'gitdep = { git = "https://example.com/gitdep.git", branch = "main" }\n'
        'core = { path = "packages/core", develop = true }',
    )
    pins = load_lock(path).source_pins
    assert pins == (
        SourcePin("core", "0.3.0", "path", "packages/core", None, True, pins[0].line),
        SourcePin("gitdep", "1.2.0", "git", "https://example.com/gitdep.git", COMMIT, False,
                  pins[1].line),
    )  # fmt: skip
    assert path.read_text().splitlines()[pins[1].line - 1] == "[[package]]"


@pytest.mark.parametrize(
    ("resolved", "url", "reason"),
    [
        ("", "packages/core", r"package gitdep comes from git .* at 'main': a full 40-hex"),
        (COMMIT, "../core", r"package core: path '\.\./core' leaves the project"),
    ],
)
def test_poetry_refusals(tmp_path: Path, resolved: str, url: str, reason: str) -> None:
    packages = _POETRY_GIT.format(resolved=resolved) + "\n" + _POETRY_PATH.format(url=url)
    if not resolved:
        packages = packages.replace('resolved_reference = ""\n', "")
    path = _poetry(
        tmp_path,
        packages,
        'gitdep = { git = "https://example.com/gitdep.git", branch = "main" }\n'
        f'core = {{ path = "{url}", develop = true }}',
    )
    with pytest.raises(LockfileError, match=reason) as info:
        load_lock(path)
    assert "\n" not in str(info.value) and str(info.value).startswith(f"{path}:")


_PDM = f"""[metadata]
groups = ["default"]
strategy = ["inherit_metadata"]
lock_version = "4.5.0"
content_hash = "sha256:{_h("pdm")}"

[[metadata.targets]]
requires_python = ">=3.11"

[[package]]
name = "gitdep"
version = "1.2.0"
git = "https://example.com/gitdep.git"
ref = "main"
revision = "{{revision}}"
groups = ["default"]

[[package]]
name = "core"
version = "0.3.0"
path = "{{path}}"
editable = true
groups = ["default"]
"""


def test_pdm_git_revision_and_editable_path() -> None:
    text = _PDM.format(revision=COMMIT, path="./packages/core")
    lock = parse_lock_bytes(text.encode(), Path("pdm.lock"))
    assert [(p.name, p.kind, p.location, p.commit, p.editable) for p in lock.source_pins] == [
        ("core", "path", "packages/core", None, True),
        ("gitdep", "git", "https://example.com/gitdep.git", COMMIT, False),
    ]
    assert lock.source_pins[1].line == 10


@pytest.mark.parametrize(
    ("revision", "where", "reason"),
    [
        ("", "packages/core", r"pdm\.lock:10: package gitdep comes from git .* no commit"),
        (COMMIT, "../../x", r"pdm\.lock:18: package core: path '\.\./\.\./x' leaves the project"),
    ],
)
def test_pdm_refusals(revision: str, where: str, reason: str) -> None:
    text = _PDM.format(revision=revision, path=where)
    if not revision:
        text = text.replace('revision = ""\n', "")
    with pytest.raises(LockfileError, match=reason):
        parse_lock_bytes(text.encode(), Path("pdm.lock"))


def _pipfile(default: dict[str, object]) -> bytes:
    doc = {
        "_meta": {
            "hash": {"sha256": _h("pipfile")},
            "pipfile-spec": 6,
            "requires": {"python_version": "3.11"},
            "sources": [{"name": "pypi", "url": "https://pypi.org/simple", "verify_ssl": True}],
        },
        "default": default,
        "develop": {},
    }
    return json.dumps(doc, indent=4).encode()


def test_pipfile_git_ref_and_paths() -> None:
    data = _pipfile(
        {
            "demo": {"editable": True, "path": "."},
            "core": {"editable": True, "path": "./packages/core"},
            "gitdep": {"git": "https://example.com/gitdep.git", "ref": COMMIT},
        }
    )
    lock = parse_lock_bytes(data, Path("Pipfile.lock"))
    assert [(p.name, p.kind, p.location, p.commit) for p in lock.source_pins] == [
        ("core", "path", "packages/core", None),
        ("gitdep", "git", "https://example.com/gitdep.git", COMMIT),
    ]
    assert any("the project demo itself is not installed" in n for n in lock.notes)


def test_requirements_git_line(tmp_path: Path) -> None:
    path = tmp_path / "requirements.txt"
    path.write_text(
        f"gitdep @ git+https://example.com/gitdep.git@{COMMIT}\n"
        f"other @ git+ssh://git@example.com/o/other.git@{COMMIT}#subdirectory=pkg\n"
        f"numpy==2.4.6 --hash=sha256:{_h('n')}\n"
    )
    lock = load_lock(path)
    assert [r.name for r in lock.requirements] == ["numpy"]
    assert [(p.name, p.location, p.commit, p.subdirectory, p.line) for p in
            lock.source_pins] == [
        ("gitdep", "https://example.com/gitdep.git", COMMIT, None, 1),
        ("other", "ssh://git@example.com/o/other.git", COMMIT, "pkg", 2),
    ]  # fmt: skip


@pytest.mark.parametrize(
    ("line", "reason"),
    [
        ("gitdep @ git+https://example.com/gitdep.git@main", r":1: package gitdep .* at 'main'"),
        ("gitdep @ git+https://example.com/gitdep.git", r":1: package gitdep .* at no commit"),
        (f"gitdep @ git+ext::sh -c id@{COMMIT}", r":1: "),
        (f"gitdep @ git+file:///r@{COMMIT}#subdirectory=../../x", r"subdirectory .* leaves"),
    ],
)
def test_requirements_git_refusals(tmp_path: Path, line: str, reason: str) -> None:
    path = tmp_path / "requirements.txt"
    path.write_text(line + "\n")
    with pytest.raises(LockfileError, match=reason) as info:
        load_lock(path)
    assert "\n" not in str(info.value)


def test_editing_a_workspace_member_keeps_the_build_lock(tmp_path: Path) -> None:
    """The build lock is keyed by a member's build requirements, not its archive's bytes: an
    edit to its code keeps the lock (the archive's sha256 moves), an edit to its
    ``[build-system] requires`` makes it stale; the git commit is keyed by its bytes."""
    from reprobuild.locks.buildlock import inputs_key
    from reprobuild.locks.sourcearchive import archive_sources

    project, _commit = make_uv_workspace(tmp_path)
    member = project / "packages" / "core"

    def packed(name: str) -> tuple[str, dict[str, str]]:
        lock = archive_sources(load_lock(project / "uv.lock"), project, tmp_path / name)
        shas = {r.name: r.source.sha256 for r in lock.sources if r.source is not None}
        return inputs_key(lock, "3.11"), shas

    key, shas = packed("first")
    (member / "src" / "core" / "__init__.py").write_text('NAME = "core, edited"\n')
    edited_key, edited_shas = packed("edited")
    assert edited_shas["core"] != shas["core"] and edited_shas["gitdep"] == shas["gitdep"]
    assert edited_key == key
    pyproject = member / "pyproject.toml"
    pyproject.write_text(pyproject.read_text().replace("setuptools>=61", "setuptools>=70"))
    assert packed("requires")[0] != key
