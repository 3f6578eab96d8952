"""What a build backend asks for at build time (issue 51), the parts that need no engine:
the resolve-and-ask rounds of :func:`compile_build_lock` with the real resolver (the pinned
uv against this machine's local index, no network) and an asker standing in for the
container; the checks on a backend's answer; the sdist's backend and tree as read on the
host; the files the container gets; a failed hook's one line. The container itself is
exercised by tests/hostile/test_backend_ask_hostile.py and
tests/engine/test_sdist_backend_requires.py."""

from __future__ import annotations

import dataclasses
import io
import tarfile
from pathlib import Path

import pytest

from reprobuild.backends.engine import RunResult
from reprobuild.imaging import backendask
from reprobuild.imaging.backendask import backend_of, requirements_of
from reprobuild.locks.buildlock import MAX_ROUNDS, Ask, BuildLockError, compile_build_lock
from reprobuild.locks.lockfile import Lock, load_lock
from reprobuild.locks.records import IndexOptions

PROJECT = Path(__file__).resolve().parent.parent / "data" / "projects" / "sdist"
LOCAL_INDEX = "file:///opt/pypi/simple"


def _sdist(folder: Path, name: str, files: dict[str, str], *, link: str | None = None) -> Path:
    path = folder / f"{name}-1.0.tar.gz"
    with tarfile.open(path, "w:gz") as tf:
        for rel, text in files.items():
            info = tarfile.TarInfo(rel if rel.startswith(("/", "..")) else f"{name}-1.0/{rel}")
            info.size = len(text.encode())
            tf.addfile(info, io.BytesIO(text.encode()))
        if link is not None:
            info = tarfile.TarInfo(f"{name}-1.0/evil")
            info.type, info.linkname = tarfile.SYMTYPE, link
            tf.addfile(info)
    return path


def _lock_and_archives(tmp_path: Path) -> tuple[Lock, dict[str, Path]]:
    lock = dataclasses.replace(
        load_lock(PROJECT / "uv.lock"), options=IndexOptions(index_url=LOCAL_INDEX)
    )
    setup = {"setup.py": "from setuptools import setup\nsetup()\n"}
    return lock, {
        "antlr4-python3-runtime": _sdist(tmp_path, "antlr4-python3-runtime", setup),
        "docopt": _sdist(tmp_path, "docopt", setup),
    }


def _compile(lock: Lock, archives: dict[str, Path], ask: Ask) -> str:
    from uv import find_uv_bin

    return compile_build_lock(
        lock,
        "3.11",
        archives,
        str(find_uv_bin()),
        ask=ask,
        log=lambda _: None,
    )


def test_what_a_backend_asks_for_is_resolved_hashed_and_asked_again(tmp_path: Path) -> None:
    """docopt's backend asks for setuptools_scm (as seqeval's setup_requires does): it is
    resolved and hashed with the static requires, and every backend is asked again with it
    installed; the second answers bring nothing new, so two rounds."""
    lock, archives = _lock_and_archives(tmp_path)
    rounds: list[tuple[str, bool]] = []

    def ask(archive: Path, pins: Path) -> tuple[str, ...]:
        rounds.append((archive.name, "\nsetuptools-scm==" in pins.read_text()))
        return ("setuptools_scm",) if archive.name.startswith("docopt") else ()

    text = _compile(lock, archives, ask)
    assert rounds == [
        ("antlr4-python3-runtime-1.0.tar.gz", False),
        ("docopt-1.0.tar.gz", False),
        ("antlr4-python3-runtime-1.0.tar.gz", True),
        ("docopt-1.0.tar.gz", True),
    ]
    assert "# docopt==0.6.2 builds with: setuptools>=40.8.0, wheel\n" in text
    assert "# docopt==0.6.2's build backend asks for: setuptools_scm\n" in text
    assert "antlr4-python3-runtime==4.9.3's build backend" not in text
    pinned = text[text.index("\nsetuptools-scm==") :].split("\n")
    assert pinned[2].strip().startswith("--hash=sha256:"), pinned[:4]


def test_a_package_no_index_has_is_one_line_naming_it_and_the_sdist(tmp_path: Path) -> None:
    lock, archives = _lock_and_archives(tmp_path)

    def ask(archive: Path, pins: Path) -> tuple[str, ...]:
        return ("reprobuild-no-such-package-4f2a",) if archive.name.startswith("docopt") else ()

    with pytest.raises(BuildLockError) as info:
        _compile(lock, archives, ask)
    message = str(info.value)
    assert message.startswith(
        "cannot resolve reprobuild-no-such-package-4f2a, which the build backend of "
        "docopt-0.6.2.tar.gz asks for (get_requires_for_build_wheel), for CPython 3.11"
    ), message
    assert "\n" not in message


def test_a_backend_that_keeps_asking_for_more_is_refused(tmp_path: Path) -> None:
    lock, archives = _lock_and_archives(tmp_path)
    more = iter(["packaging", "flit-core", "hatchling", "setuptools-scm", "trove-classifiers"])
    wanted: list[str] = []

    def ask(archive: Path, pins: Path) -> tuple[str, ...]:
        if archive.name.startswith("docopt"):
            wanted.append(next(more))
        return tuple(wanted) if archive.name.startswith("docopt") else ()

    with pytest.raises(BuildLockError, match=r"^the build backends of docopt-0\.6\.2\.tar\.gz "):
        _compile(lock, archives, ask)
    assert len(wanted) == MAX_ROUNDS


@pytest.mark.parametrize(
    ("answer", "expected"),
    [
        ({"not": "a list"}, "answered get_requires_for_build_wheel with \"{'not': 'a list'}\""),
        (["ok", 3], "answered get_requires_for_build_wheel with \"['ok', 3]\""),
        (None, "answered get_requires_for_build_wheel with 'None'"),
        (["setuptools; rm -rf /"], "asked for 'setuptools; rm -rf /'"),
        (["$(reboot)"], "asked for '$(reboot)'"),
        (["x\x1b[2Jy"], "asked for 'x\\x1b[2Jy'"),
        (["pkg @ https://evil.example/p.whl"], "a direct URL"),
        (["a"] * 201, "asked for 201 build requirements"),
    ],
)
def test_a_garbage_answer_is_one_line_naming_it(answer: object, expected: str) -> None:
    with pytest.raises(BuildLockError) as info:
        requirements_of(answer, "pkg-1.0.tar.gz")
    message = str(info.value)
    assert "the build backend of pkg-1.0.tar.gz" in message
    assert expected in message, message
    assert "\n" not in message and "\x1b" not in message


def test_a_good_answer_is_kept_once_each_in_its_order() -> None:
    answer = ["setuptools_scm>=8", "wheel", "setuptools_scm>=8", 'cython; python_version>"3"']
    assert requirements_of(answer, "p.tar.gz") == (
        "setuptools_scm>=8",
        "wheel",
        'cython; python_version > "3"',
    )
    assert requirements_of([], "p.tar.gz") == ()


def test_the_backend_is_read_from_the_sdist(tmp_path: Path) -> None:
    legacy = _sdist(tmp_path, "legacy", {"setup.py": ""})
    assert backend_of(legacy) == ("setuptools.build_meta:__legacy__", None)
    hatch = _sdist(
        tmp_path,
        "hatch",
        {
            "pyproject.toml": '[build-system]\nrequires = ["hatchling"]\n'
            'build-backend = "hatchling.build"\n'
        },
    )
    assert backend_of(hatch) == ("hatchling.build", None)
    in_tree = _sdist(
        tmp_path,
        "tree",
        {"pyproject.toml": '[build-system]\nbuild-backend = "be:api"\nbackend-path = ["."]\n'},
    )
    assert backend_of(in_tree) == ("be:api", ["."])
    bad = _sdist(
        tmp_path, "bad", {"pyproject.toml": '[build-system]\nbuild-backend = "x; import os"\n'}
    )
    with pytest.raises(BuildLockError, match=r"^bad-1\.0\.tar\.gz: \[build-system\] build-backend"):
        backend_of(bad)


@pytest.mark.parametrize(
    ("files", "link", "expected"),
    [
        ({"setup.py": ""}, "/etc/passwd", "member 'evil-1.0/evil' is not a plain file or folder"),
        ({"../../escape": "x"}, None, "member '../../escape' would be written outside"),
        ({"/abs": "x"}, None, "member '/abs' would be written outside"),
    ],
)
def test_an_sdist_member_that_is_no_plain_file_inside_is_refused(
    tmp_path: Path, files: dict[str, str], link: str | None, expected: str
) -> None:
    archive = _sdist(tmp_path, "evil", files, link=link)
    box = backendask._Files(archive, archive, (), archive, tmp_path / "files.tar")
    with pytest.raises(BuildLockError) as info:
        box.pack(archive, archive)
    assert str(info.value).startswith("evil-1.0.tar.gz: "), info.value
    assert expected in str(info.value)


def test_the_container_gets_the_tree_owned_by_the_unprivileged_user(tmp_path: Path) -> None:
    """Every file and folder under the ask's root belongs to user 65534 (folders the sdist
    does not list included), so the venv and the tree are the hook's to write, and nothing
    outside that root is in the archive."""
    archive = _sdist(tmp_path, "pkg", {"setup.py": "x", "src/pkg/deep/__init__.py": ""})
    for name, text in {"pins": "p==1\n", "uv": "#!", "w-1-py3-none-any.whl": "w"}.items():
        (tmp_path / name).write_text(text)
    box = backendask._Files(
        archive,
        tmp_path / "pins",
        (tmp_path / "w-1-py3-none-any.whl",),
        tmp_path / "uv",
        tmp_path / "files.tar",
    )
    (tmp_path / "input.json").write_text("{}")
    box.pack(tmp_path / "pins", tmp_path / "input.json")
    with tarfile.open(tmp_path / "files.tar") as tf:
        members = {m.name: m for m in tf}
    assert all(m.uid == m.gid == 65534 for m in members.values())
    assert all(name.startswith(".reprobuild-ask") for name in members)
    for folder in ("pkg-1.0", "pkg-1.0/src", "pkg-1.0/src/pkg", "pkg-1.0/src/pkg/deep"):
        assert members[f".reprobuild-ask/src/{folder}"].isdir(), folder
    assert members[".reprobuild-ask/uv"].mode == 0o755
    assert ".reprobuild-ask/wheels/w-1-py3-none-any.whl" in members
    assert backendask._source_tree(archive) == "/.reprobuild-ask/src/pkg-1.0"


def test_a_failed_hook_is_one_line_that_says_network_where_it_reached_for_it() -> None:
    network = RunResult(
        1,
        b"",
        b"Traceback (most recent call last):\n  ...\n"
        b"urllib.error.URLError: <urlopen error [Errno -3] Temporary failure in name resolution>\n",
    )
    message = str(backendask._failure("p-1.tar.gz", network))
    assert message.startswith("the build backend of p-1.tar.gz reached for the network")
    assert message.endswith(
        "urllib.error.URLError: <urlopen error [Errno -3] Temporary failure in name resolution>"
    )
    plain = RunResult(1, b"", b"Traceback:\nValueError: boom\nsome cleanup line\n")
    assert str(backendask._failure("p-1.tar.gz", plain)).endswith(
        "asked for its build requirements (get_requires_for_build_wheel): ValueError: boom"
    )
    silent = RunResult(137, b"", b"")
    assert str(backendask._failure("p-1.tar.gz", silent)).endswith(": exit status 137")


def test_the_ask_timeout_is_a_number_of_seconds(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv(backendask.TIMEOUT_ENV, raising=False)
    assert backendask.ask_timeout() == 300.0
    monkeypatch.setenv(backendask.TIMEOUT_ENV, "12.5")
    assert backendask.ask_timeout() == 12.5
    for bad in ("0", "-3", "soon", "1e9"):
        monkeypatch.setenv(backendask.TIMEOUT_ENV, bad)
        with pytest.raises(BuildLockError, match=rf"^{backendask.TIMEOUT_ENV}="):
            backendask.ask_timeout()
