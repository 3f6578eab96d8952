"""A hashed requirements file or Pipfile.lock whose package has no wheel for the image and
whose locked hash is on no file of its index (issue 39): `init` asks the index (a real
file:// simple index made here, no network) and refuses in one ``error:`` line naming the
lock's file and line, the package and what is allowed; nothing written in the project, the
cache or the temp dir."""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

import pytest

from helpers import run_cli
from hostile_harness import Snapshot, assert_clean_failure

SDIST = b"an sdist's bytes\n"
WRONG = "ab" * 32  # locked, but the index's docopt-0.6.2.tar.gz has another sha256


def index(root: Path) -> str:
    (root / "files").mkdir(parents=True)
    (root / "files" / "docopt-0.6.2.tar.gz").write_bytes(SDIST)
    digest = hashlib.sha256(SDIST).hexdigest()
    page = root / "simple" / "docopt"
    page.mkdir(parents=True)
    (page / "index.html").write_text(
        f'<a href="../../files/docopt-0.6.2.tar.gz#sha256={digest}">docopt-0.6.2.tar.gz</a>\n'
    )
    return (root / "simple").as_uri()


def requirements(project: Path, url: str) -> tuple[str, str]:
    text = f"--index-url {url}\n\ndocopt==0.6.2 --hash=sha256:{WRONG}\n"
    (project / "requirements.txt").write_text(text)
    return "requirements.txt", "requirements.txt:3:"


def pipfile(project: Path, url: str) -> tuple[str, str]:
    doc = {
        "_meta": {
            "pipfile-spec": 6,
            "requires": {},
            "sources": [{"name": "local", "url": url, "verify_ssl": True}],
        },
        "default": {
            "docopt": {"hashes": [f"sha256:{WRONG}"], "index": "local", "version": "==0.6.2"}
        },
        "develop": {},
    }
    (project / "Pipfile.lock").write_text(json.dumps(doc, indent=4) + "\n")
    line = next(
        n
        for n, text in enumerate((project / "Pipfile.lock").read_text().splitlines(), 1)
        if '"docopt"' in text
    )
    return "Pipfile.lock", f"Pipfile.lock:{line}:"


@pytest.mark.parametrize("write", [requirements, pipfile], ids=["requirements", "pipfile"])
def test_a_locked_sdist_hash_on_no_file_of_the_index_is_one_line(
    tmp_path: Path, write: object
) -> None:
    url = index(tmp_path / "idx")
    project = tmp_path / "proj"
    project.mkdir()
    (project / "train.py").write_text("print('train')\n")
    assert callable(write)
    name, where = write(project, url)
    cache = tmp_path / "cache"
    cache.mkdir()
    before = Snapshot.take([project, cache])
    proc = run_cli(
        "init", "--lock", name, "--command", "python train.py", str(project),
        env={"REPROBUILD_SDIST_LOOKUP": "1", "REPROBUILD_CACHE_DIR": str(cache)},
    )  # fmt: skip
    line = assert_clean_failure(proc, f"{where} package docopt 0.6.2: no wheel for CPython")
    assert line.endswith(
        "allowed: a wheel that fits or an sdist (.tar.gz, .zip) with a locked hash"
    )
    before.assert_unchanged()
