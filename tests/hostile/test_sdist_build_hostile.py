"""Hostile inputs to the wheel-build stage (issue 39): a build dependency whose locked hash
is not the file's, and an sdist whose bytes are not the locked ones. Each: one ``error:``
line naming the file and both hashes, exit 1, nothing built, tagged or left in the project,
the cache or the temp dir."""

from __future__ import annotations

import re
import shutil
import uuid
from pathlib import Path

import pytest

from helpers import DATA, run_cli
from hostile_harness import Snapshot, assert_clean_failure

pytestmark = [pytest.mark.engine, pytest.mark.registry]


@pytest.fixture
def filled_cache(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A cache holding the sdists and the build lock's wheels already (the host-side fetch a
    first build does), so that the failing build below has nothing good left to add."""
    from reprobuild.locks.lockfile import load_lock
    from reprobuild.locks.wheels import Target, fetch_sources, fetch_wheels

    cache = tmp_path / "cache"
    monkeypatch.setenv("XDG_CACHE_HOME", str(cache))
    monkeypatch.delenv("REPROBUILD_CACHE_DIR", raising=False)
    project = DATA / "projects" / "sdist"
    fetch_sources(load_lock(project / "uv.lock"), tmp_path / "s", log=lambda _: None)
    target = Target("3.11", "x86_64", (2, 36))
    build = load_lock(project / "build-requirements.lock")
    fetch_wheels(build, target, tmp_path / "w", log=lambda _: None)
    shutil.rmtree(tmp_path / "s")
    shutil.rmtree(tmp_path / "w")
    return cache


def test_a_build_dependency_with_a_wrong_hash_is_one_line(  # type: ignore[no-untyped-def]
    tmp_path: Path, base_ref: str, filled_cache: Path, docker_client
) -> None:
    root = tmp_path / "project"
    shutil.copytree(DATA / "projects" / "sdist", root)
    build = root / "build-requirements.lock"
    text = build.read_text()
    block = re.search(r"^setuptools==(\S+) \\\n.*?(?=^\S)", text, re.M | re.S)
    assert block is not None, text
    wrong = f"setuptools=={block.group(1)} --hash=sha256:{'0' * 64}\n"
    build.write_text(text.replace(block.group(0), wrong))
    tag = f"reprobuild-hostile/sdist:{uuid.uuid4().hex[:8]}"
    # the wheel and sdist caches (the base's probe facts may be cached beside them: not ours)
    caches = [filled_cache / "reprobuild" / "wheels", filled_cache / "reprobuild" / "sources"]
    snap = Snapshot.take([root, *caches], docker_client)
    proc = run_cli(
        "image", str(root), "--base", base_ref, "--builder", "buildah", "--tag", tag, "-q",
        env={"XDG_CACHE_HOME": str(filled_cache)}, timeout=300,
    )  # fmt: skip
    line = assert_clean_failure(proc, "build-requirements.lock:")
    assert "which is none of the lock's hashes" in line, line
    snap.assert_unchanged(docker_client)


def test_an_sdist_with_other_bytes_is_one_line(  # type: ignore[no-untyped-def]
    tmp_path: Path, base_ref: str, filled_cache: Path, docker_client
) -> None:
    """The lock pins docopt's sdist to a hash its bytes do not have (as a tampered index
    would serve other bytes), with a build lock made for that pin: the host-side fetch
    refuses the file in one line and keeps nothing of it."""
    from reprobuild.locks.buildlock import inputs_key
    from reprobuild.locks.lockfile import load_lock

    root = tmp_path / "project"
    shutil.copytree(DATA / "projects" / "sdist", root)
    lock = root / "uv.lock"
    real = "49b3a825280bd66b3aa83585ef59c4a8c82f2c8a522dbe754a8bc8d08c85c491"
    lock.write_text(lock.read_text().replace(real, "1" * 64))
    build = root / "build-requirements.lock"
    key = inputs_key(load_lock(lock), "3.11")
    build.write_text(
        re.sub(r"(?<=# reprobuild build lock for: )sha256:[0-9a-f]{64}", key, build.read_text())
    )
    tag = f"reprobuild-hostile/sdist:{uuid.uuid4().hex[:8]}"
    # the wheel and sdist caches (the base's probe facts may be cached beside them: not ours)
    caches = [filled_cache / "reprobuild" / "wheels", filled_cache / "reprobuild" / "sources"]
    snap = Snapshot.take([root, *caches], docker_client)
    proc = run_cli(
        "image", str(root), "--base", base_ref, "--builder", "buildah", "--tag", tag, "-q",
        env={"XDG_CACHE_HOME": str(filled_cache)}, timeout=300,
    )  # fmt: skip
    line = assert_clean_failure(proc, "uv.lock:")
    assert f"the downloaded docopt-0.6.2.tar.gz has sha256 {real}" in line, line
    snap.assert_unchanged(docker_client)
