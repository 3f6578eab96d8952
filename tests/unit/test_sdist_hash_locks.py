"""Hashed requirements files and Pipfile.lock give a package's hashes but no file names: the
sdist to build is found on the package's simple index (PEP 503) by its sha256, the build lock
records it, and render reads that record with no network. A real index on disk (file://),
real fetches into a real cache; no network."""

from __future__ import annotations

import hashlib
import json
from collections.abc import Callable
from pathlib import Path

import pytest

from reprobuild.errors import LockfileError
from reprobuild.locks import wheels
from reprobuild.locks.buildlock import (
    BuildLockError,
    _sdist_lines,
    inputs_key,
    load_build_lock,
    with_located_sdists,
)
from reprobuild.locks.lockfile import Lock, Selection, load_lock
from reprobuild.locks.wheels import Target, fetch_sources, locate_sdists, wheel_folder

SDIST = "docopt-0.6.2.tar.gz"
DATA = b"not really a tarball, but bytes with a sha256\n"
DIGEST = hashlib.sha256(DATA).hexdigest()
MAC = "docopt-0.6.2-py3-none-macosx_11_0_arm64.whl"
MAC_DATA = b"a wheel for another platform\n"
MAC_DIGEST = hashlib.sha256(MAC_DATA).hexdigest()
SIX = "six-1.17.0-py2.py3-none-any.whl"
SIX_DATA = b"a wheel that fits every platform\n"
SIX_DIGEST = hashlib.sha256(SIX_DATA).hexdigest()
SELECTION = Selection(python="3.11")


def make_index(root: Path, *, hashed: bool = True) -> str:
    """A simple index: docopt's page (its sdist, a macOS wheel) and six's (a fitting wheel)."""
    files = root / "files"
    files.mkdir(parents=True)
    for name, data in ((SDIST, DATA), (MAC, MAC_DATA), (SIX, SIX_DATA)):
        (files / name).write_bytes(data)
    pages = {"docopt": [(SDIST, DIGEST), (MAC, MAC_DIGEST)], "six": [(SIX, SIX_DIGEST)]}
    for project, links in pages.items():
        page = root / "simple" / project
        page.mkdir(parents=True)
        anchors = "\n".join(
            f'<a href="../../files/{name}{f"#sha256={digest}" if hashed else ""}">{name}</a>'
            for name, digest in links
        )
        (page / "index.html").write_text(f"<!DOCTYPE html><html><body>\n{anchors}\n</body></html>")
    return (root / "simple").as_uri()


def requirements(tmp_path: Path, index: str, docopt_hashes: tuple[str, ...]) -> Path:
    hashes = " ".join(f"--hash=sha256:{h}" for h in docopt_hashes)
    path = tmp_path / "proj" / "requirements.txt"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(
        f"--index-url {index}\n\ndocopt==0.6.2 {hashes}\nsix==1.17.0 --hash=sha256:{SIX_DIGEST}\n"
    )
    return path


def pipfile_lock(tmp_path: Path, index: str, docopt_hashes: tuple[str, ...]) -> Path:
    doc = {
        "_meta": {
            "hash": {"sha256": "0" * 64},
            "pipfile-spec": 6,
            "requires": {},
            "sources": [{"name": "local", "url": index, "verify_ssl": True}],
        },
        "default": {
            "docopt": {
                "hashes": [f"sha256:{h}" for h in docopt_hashes],
                "index": "local",
                "version": "==0.6.2",
            },
            "six": {"hashes": [f"sha256:{SIX_DIGEST}"], "index": "local", "version": "==1.17.0"},
        },
        "develop": {},
    }
    path = tmp_path / "proj" / "Pipfile.lock"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(doc, indent=4) + "\n")
    return path


LOCKS: dict[str, Callable[[Path, str, tuple[str, ...]], Path]] = {
    "requirements": requirements,
    "pipfile": pipfile_lock,
}


@pytest.fixture(autouse=True)
def cache(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.setenv("REPROBUILD_CACHE_DIR", str(tmp_path / "cache"))
    monkeypatch.setenv("REPROBUILD_SDIST_LOOKUP", "1")  # the suite turns it off (conftest)
    return tmp_path / "cache"


@pytest.mark.parametrize("fmt", sorted(LOCKS))
@pytest.mark.parametrize("hashed", [True, False], ids=["page-hashes", "no-page-hashes"])
def test_the_sdist_is_selected_by_its_locked_hash_and_fetched(
    tmp_path: Path, fmt: str, hashed: bool
) -> None:
    index = make_index(tmp_path / "idx", hashed=hashed)
    lock = load_lock(LOCKS[fmt](tmp_path, index, (MAC_DIGEST, DIGEST)), SELECTION)
    assert not lock.sources  # the lock alone cannot tell: hashes, no file names
    located = locate_sdists(lock, SELECTION, log=lambda _: None)
    (docopt,) = located.sources
    assert docopt.name == "docopt" and docopt.hashes == (f"sha256:{DIGEST}",)
    assert docopt.source is not None and docopt.source.filename == SDIST
    assert docopt.source.index == index
    assert [r.name for r in located.wheel_requirements] == ["six"]  # its wheel fits
    got = fetch_sources(located, tmp_path / "out", log=lambda _: None)
    assert got["docopt"].read_bytes() == DATA  # fetched, sha256 checked


@pytest.mark.parametrize("fmt", sorted(LOCKS))
@pytest.mark.parametrize(
    "hashes",
    [("ab" * 32,), (MAC_DIGEST,)],  # a hash on no file; only another platform's wheel
    ids=["no-file", "other-platform-wheel"],
)
def test_a_package_with_no_locked_file_that_fits_is_one_line(
    tmp_path: Path, fmt: str, hashes: tuple[str, ...]
) -> None:
    index = make_index(tmp_path / "idx")
    path = LOCKS[fmt](tmp_path, index, hashes)
    lock = load_lock(path, SELECTION)
    line = next(r.line for r in lock.requirements if r.name == "docopt")
    with pytest.raises(LockfileError) as caught:
        locate_sdists(lock, SELECTION, log=lambda _: None)
    message = caught.value.message
    assert "\n" not in message
    assert message.startswith(f"{path}:{line}: package docopt 0.6.2: no wheel for CPython")
    assert message.endswith(
        "allowed: a wheel that fits or an sdist (.tar.gz, .zip) with a locked hash"
    )
    if hashes == (MAC_DIGEST,):
        assert MAC in message


@pytest.mark.parametrize("fmt", sorted(LOCKS))
def test_a_package_whose_wheel_is_cached_is_not_looked_up(
    tmp_path: Path, fmt: str, pages_read: list[str]
) -> None:
    index = make_index(tmp_path / "idx")
    folder = wheel_folder(Target("3.11", "x86_64", (2, 36)))
    folder.mkdir(parents=True)
    (folder / SIX).write_bytes(SIX_DATA)  # six's fitting wheel, as a fetch left it
    lock = load_lock(LOCKS[fmt](tmp_path, index, (DIGEST,)), SELECTION)
    located = locate_sdists(lock, SELECTION, log=lambda _: None)
    assert pages_read == ["docopt"]  # six's page is never read
    assert [r.name for r in located.sources] == ["docopt"]


def test_no_lookup_at_all_when_every_wheel_is_cached_or_it_is_off(
    tmp_path: Path, pages_read: list[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    index = make_index(tmp_path / "idx")
    lock = load_lock(requirements(tmp_path, index, (DIGEST,)), SELECTION)
    monkeypatch.setenv("REPROBUILD_SDIST_LOOKUP", "0")
    assert locate_sdists(lock, SELECTION, log=lambda _: None) == lock
    assert pages_read == []


def test_an_index_that_cannot_be_read_leaves_the_package_to_the_wheel_fetch(
    tmp_path: Path,
) -> None:
    missing = (tmp_path / "nowhere" / "simple").as_uri()
    lock = load_lock(requirements(tmp_path, missing, (DIGEST,)), SELECTION)
    assert locate_sdists(lock, SELECTION, log=lambda _: None) == lock


def located(tmp_path: Path, fmt: str) -> Lock:
    index = make_index(tmp_path / "idx")
    lock = load_lock(LOCKS[fmt](tmp_path, index, (MAC_DIGEST, DIGEST)), SELECTION)
    return locate_sdists(lock, SELECTION, log=lambda _: None)


@pytest.mark.parametrize("fmt", sorted(LOCKS))
def test_render_reads_the_sdists_from_the_build_lock_with_no_network(
    tmp_path: Path, fmt: str, pages_read: list[str]
) -> None:
    """What render does (plan.plan_build): the lock read offline, the build lock's records
    applied, the build lock checked fresh for them."""
    found = located(tmp_path, fmt)
    pages_read.clear()
    build_lock = tmp_path / "proj" / "build-requirements.lock"
    header = f"# reprobuild build lock for: {inputs_key(found, '3.11')}\n"
    pins = f"setuptools==80.9.0 --hash=sha256:{'c' * 64}\n"  # what uv pip compile wrote
    build_lock.write_text(header + "\n".join(_sdist_lines(found)) + "\n" + pins)
    lock = with_located_sdists(load_lock(found.path, SELECTION), build_lock, build_lock.parent)
    assert lock.sources == found.sources
    assert load_build_lock(build_lock, lock, "3.11", build_lock.parent) is not None
    assert pages_read == []


def test_a_build_lock_record_the_lock_no_longer_holds_is_stale(tmp_path: Path) -> None:
    found = located(tmp_path, "requirements")
    build_lock = tmp_path / "proj" / "build-requirements.lock"
    build_lock.write_text("\n".join(_sdist_lines(found)) + "\n")
    index = (tmp_path / "idx" / "simple").as_uri()
    requirements(tmp_path, index, (MAC_DIGEST,))  # relocked: the sdist's hash is gone
    with pytest.raises(BuildLockError, match=r"build-requirements.lock is stale: it builds docopt"):
        with_located_sdists(load_lock(found.path, SELECTION), build_lock, build_lock.parent)


def test_a_pipfile_packages_own_index_is_read_first(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    index = make_index(tmp_path / "idx")
    other = make_index(tmp_path / "other")  # the lock's first source, not docopt's
    path = pipfile_lock(tmp_path, index, (DIGEST,))
    doc = json.loads(path.read_text())
    doc["_meta"]["sources"].insert(0, {"name": "first", "url": other, "verify_ssl": True})
    doc["default"]["six"]["index"] = "first"
    path.write_text(json.dumps(doc, indent=4) + "\n")
    read: list[str] = []
    real = wheels._index_links

    def counted(where: str, project: str) -> list[str] | None:
        read.append(f"{project} {where}")
        return real(where, project)

    monkeypatch.setattr(wheels, "_index_links", counted)
    lock = locate_sdists(load_lock(path, SELECTION), SELECTION, log=lambda _: None)
    assert sorted(read) == [f"docopt {index}", f"six {other}"]
    (docopt,) = lock.sources
    assert docopt.source is not None and docopt.source.index == index
