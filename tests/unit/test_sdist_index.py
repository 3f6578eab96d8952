"""An sdist that poetry.lock or pdm.lock names but does not locate (they record each file's
name and hash, not its URL) is looked up on a simple index (PEP 503) by the host, then
fetched sha256-checked: a real index on disk (file://), a real fetch into the real cache."""

from __future__ import annotations

import hashlib
from pathlib import Path

import pytest

from reprobuild.locks.records import IndexOptions, Lock, Requirement, SourceArchive
from reprobuild.locks.wheels import WheelError, fetch_sources

SDIST = "docopt-0.6.2.tar.gz"
DATA = b"not really a tarball, but bytes with a sha256\n"
DIGEST = hashlib.sha256(DATA).hexdigest()


def index(root: Path, *, links: list[str]) -> str:
    """A simple index with one project page holding ``links`` and the sdist's file."""
    (root / "files").mkdir(parents=True)
    (root / "files" / SDIST).write_bytes(DATA)
    page = root / "simple" / "docopt"
    page.mkdir(parents=True)
    anchors = "\n".join(f'<a href="{href}">{href.rsplit("/", 1)[-1]}</a>' for href in links)
    (page / "index.html").write_text(f"<!DOCTYPE html><html><body>\n{anchors}\n</body></html>\n")
    return (root / "simple").as_uri()


def lock(tmp_path: Path, where: str, *, extra: tuple[str, ...] = ()) -> Lock:
    source = SourceArchive(filename=SDIST, sha256=f"sha256:{DIGEST}", index=where)
    requirement = Requirement("docopt", "0.6.2", (source.sha256,), line=7, source=source)
    return Lock(
        path=tmp_path / "pdm.lock",
        sha256="0" * 64,
        format="pdm",
        requirements=(requirement,),
        options=IndexOptions(extra_index_urls=extra),
    )


@pytest.fixture(autouse=True)
def cache(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.setenv("REPROBUILD_CACHE_DIR", str(tmp_path / "cache"))
    return tmp_path / "cache"


def test_the_sdist_is_found_on_its_index_and_fetched(tmp_path: Path) -> None:
    url = index(tmp_path / "idx", links=[f"../../files/{SDIST}#sha256={DIGEST}"])
    got = fetch_sources(lock(tmp_path, url), tmp_path / "out", log=lambda _: None)
    assert got["docopt"].read_bytes() == DATA


def test_the_locks_other_indexes_come_next(tmp_path: Path) -> None:
    empty = index(tmp_path / "empty", links=[])
    good = index(tmp_path / "good", links=[f"../../files/{SDIST}"])
    got = fetch_sources(lock(tmp_path, empty, extra=(good,)), tmp_path / "out", log=print)
    assert got["docopt"].read_bytes() == DATA


@pytest.mark.parametrize(
    "links",
    [
        [],  # not on the page
        ["../../files/docopt-0.6.1.tar.gz"],  # another file
        [f"ftp://example.org/{SDIST}"],  # a scheme the host does not fetch from
    ],
)
def test_an_sdist_on_no_index_is_one_line(tmp_path: Path, cache: Path, links: list[str]) -> None:
    url = index(tmp_path / "idx", links=links)
    with pytest.raises(WheelError, match=rf"the sdist {SDIST} of docopt 0\.6\.2 is on none of"):
        fetch_sources(lock(tmp_path, url), tmp_path / "out", log=lambda _: None)
    assert not [p for p in (cache / "sources").glob("*") if p.is_file()]


def test_a_file_whose_bytes_differ_is_refused(tmp_path: Path, cache: Path) -> None:
    url = index(tmp_path / "idx", links=[f"../../files/{SDIST}"])
    (tmp_path / "idx" / "files" / SDIST).write_bytes(b"tampered")
    with pytest.raises(WheelError, match=rf"the downloaded {SDIST} has sha256 .* not the lock's"):
        fetch_sources(lock(tmp_path, url), tmp_path / "out", log=lambda _: None)
    assert not [p for p in (cache / "sources").glob("*") if p.is_file()]
