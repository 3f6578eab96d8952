"""wheels: the target a base image implies, the cached hash index, and which locked
requirements the cache cannot yet satisfy. No pip, no network."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from reprobuild._util import fsutil
from reprobuild.errors import LockfileError
from reprobuild.locks import wheels
from reprobuild.locks.lockfile import Lock, load_lock
from reprobuild.locks.wheels import Target, WheelError, _hash_index, _unmatched, cache_root

H = {c: "sha256:" + c * 64 for c in "abcdef"}


def probe(
    version: str = "3.11.9",
    libc: str | None = "glibc",
    libc_version: str = "2.36",
    machine: str = "x86_64",
) -> dict[str, object]:
    return {
        "python": {"version": version, "implementation": "cpython"},
        "platform": {"libc": libc, "libc_version": libc_version, "machine": machine},
    }


def expected_glibc_platforms(minor: int, machine: str) -> list[str]:
    legacy = {17: "manylinux2014", 12: "manylinux2010", 5: "manylinux1"}
    out: list[str] = []
    for m in range(minor, 4, -1):
        out.append(f"manylinux_2_{m}_{machine}")
        if m in legacy:
            out.append(f"{legacy[m]}_{machine}")
    return [*out, f"linux_{machine}"]


# --------------------------------------------------------------------------- Target


def test_from_probe_glibc_236_x86_64() -> None:
    target = Target.from_probe(probe())
    assert target == Target("3.11", "x86_64", (2, 36))
    assert target.abi == "cp311"
    assert target.key == "cp311-x86_64-glibc2.36"
    platforms = target.platforms()
    assert platforms[0] == "manylinux_2_36_x86_64"
    assert platforms[-1] == "linux_x86_64"
    # Newest first; each legacy alias right after the PEP 600 tag it equals (pip's order).
    assert platforms[platforms.index("manylinux_2_17_x86_64") + 1] == "manylinux2014_x86_64"
    assert platforms[platforms.index("manylinux_2_12_x86_64") + 1] == "manylinux2010_x86_64"
    assert platforms[platforms.index("manylinux_2_5_x86_64") + 1] == "manylinux1_x86_64"
    assert platforms == expected_glibc_platforms(36, "x86_64")
    assert len(platforms) == (36 - 5 + 1) + 3 + 1
    assert len(set(platforms)) == len(platforms)
    assert "manylinux_2_4_x86_64" not in platforms
    assert "manylinux_2_37_x86_64" not in platforms


def test_platforms_match_packaging_order() -> None:
    """The same list packaging.tags would give for this glibc, filtered to linux tags."""
    from packaging import _manylinux  # the source of pip's own platform tags

    legacy = _manylinux._LEGACY_MANYLINUX_MAP
    theirs: list[str] = []
    for minor in range(36, 4, -1):
        theirs.append(f"manylinux_2_{minor}_x86_64")
        key = _manylinux._GLibCVersion(2, minor)
        if key in legacy:
            theirs.append(f"{legacy[key]}_x86_64")
    assert Target("3.11", "x86_64", (2, 36)).platforms() == [*theirs, "linux_x86_64"]


def test_from_probe_aarch64_glibc_231() -> None:
    target = Target.from_probe(probe(version="3.12.4", libc_version="2.31", machine="aarch64"))
    assert target == Target("3.12", "aarch64", (2, 31))
    assert target.abi == "cp312"
    assert target.key == "cp312-aarch64-glibc2.31"
    assert target.platforms() == expected_glibc_platforms(31, "aarch64")
    assert "manylinux2014_aarch64" in target.platforms()


@pytest.mark.parametrize(
    ("version", "expected"),
    [("3.11.9", "3.11"), ("3.10.0", "3.10"), ("3.13.0rc1", "3.13"), ("3.9", "3.9")],
)
def test_python_version_truncated(version: str, expected: str) -> None:
    target = Target.from_probe(probe(version=version))
    assert target.python_version == expected
    assert target.abi == "cp" + expected.replace(".", "")


@pytest.mark.parametrize(
    ("libc", "libc_version"),
    [("musl", "1.2.4"), (None, ""), ("glibc", ""), ("glibc", "2"), ("glibc", "two.36")],
)
def test_from_probe_without_usable_glibc(libc: str | None, libc_version: str) -> None:
    target = Target.from_probe(probe(libc=libc, libc_version=libc_version))
    assert target.glibc is None
    assert target.key == "cp311-x86_64-nolibc"
    assert target.platforms() == ["linux_x86_64"]


def test_from_probe_glibc_with_patch_level() -> None:
    assert Target.from_probe(probe(libc_version="2.28.1")).glibc == (2, 28)


def test_from_probe_machine_defaults_to_x86_64() -> None:
    data = probe()
    platform = data["platform"]
    assert isinstance(platform, dict)
    del platform["machine"]
    assert Target.from_probe(data).machine == "x86_64"


def test_old_glibc_has_only_linux_tag() -> None:
    assert Target("3.11", "x86_64", (2, 4)).platforms() == ["linux_x86_64"]
    assert Target("3.11", "x86_64", (2, 5)).platforms() == [
        "manylinux_2_5_x86_64",
        "manylinux1_x86_64",
        "linux_x86_64",
    ]


def test_non_2_glibc_major_has_only_linux_tag() -> None:
    assert Target("3.11", "x86_64", (3, 1)).platforms() == ["linux_x86_64"]


@pytest.mark.parametrize(
    "data",
    [
        {},
        {"python": {}},
        {"platform": {}},
        {"python": "3.11", "platform": {}},
        {"python": {}, "platform": []},
    ],
)
def test_from_probe_without_facts_refused(data: dict[str, object]) -> None:
    with pytest.raises(WheelError, match="gave no python/platform facts"):
        Target.from_probe(data)


def test_target_is_hashable_and_frozen() -> None:
    target = Target("3.11", "x86_64", (2, 36))
    assert {target: 1}[Target("3.11", "x86_64", (2, 36))] == 1
    with pytest.raises(AttributeError):
        target.machine = "aarch64"  # type: ignore[misc]


# --------------------------------------------------------------------------- cache_root


def test_cache_root_env(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setenv("REPROBUILD_CACHE_DIR", str(tmp_path / "c"))
    assert cache_root() == tmp_path / "c"
    monkeypatch.delenv("REPROBUILD_CACHE_DIR")
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "x"))
    assert cache_root() == tmp_path / "x" / "reprobuild"
    monkeypatch.delenv("XDG_CACHE_HOME")
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    assert cache_root() == tmp_path / "home" / ".cache" / "reprobuild"


# --------------------------------------------------------------------------- _hash_index


@pytest.fixture
def folder(tmp_path: Path) -> Path:
    f = tmp_path / "wheels"
    f.mkdir()
    (f / "a-1.0-py3-none-any.whl").write_bytes(b"alpha")
    (f / "b-2.0-py3-none-any.whl").write_bytes(b"beta")
    return f


def sha(data: bytes) -> str:
    import hashlib

    return hashlib.sha256(data).hexdigest()


def test_hash_index_hashes_files(folder: Path) -> None:
    (folder / ".hidden").write_bytes(b"skip")
    (folder / "subdir").mkdir()
    index = _hash_index(folder)
    assert index == {
        "a-1.0-py3-none-any.whl": sha(b"alpha"),
        "b-2.0-py3-none-any.whl": sha(b"beta"),
    }
    stored = json.loads((folder / ".index.json").read_text())
    assert set(stored) == set(index)
    st = (folder / "a-1.0-py3-none-any.whl").stat()
    assert stored["a-1.0-py3-none-any.whl"] == [st.st_size, wheels.CACHED_MTIME_NS, sha(b"alpha")]
    # every cached file at the cache's one fixed time, whenever it was downloaded
    assert {p.stat().st_mtime_ns for p in folder.glob("*.whl")} == {wheels.CACHED_MTIME_NS}


def test_hash_index_uses_cache(folder: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    first = _hash_index(folder)
    written = (folder / ".index.json").stat().st_mtime_ns

    def boom(path: Path) -> str:
        raise AssertionError(f"re-hashed {path.name} although its stamp did not change")

    monkeypatch.setattr(wheels, "sha256_file", boom)
    assert _hash_index(folder) == first
    # Nothing changed, so the index file is not rewritten either.
    assert (folder / ".index.json").stat().st_mtime_ns == written


def test_hash_index_rehashes_changed_file_only(
    folder: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    _hash_index(folder)
    changed = folder / "b-2.0-py3-none-any.whl"
    changed.write_bytes(b"beta, rebuilt")
    os.utime(changed, ns=(1, 1))
    hashed: list[str] = []
    real = fsutil.sha256_file

    def spy(path: Path) -> str:
        hashed.append(path.name)
        return real(path)

    monkeypatch.setattr(wheels, "sha256_file", spy)
    index = _hash_index(folder)
    assert hashed == ["b-2.0-py3-none-any.whl"]
    assert index["b-2.0-py3-none-any.whl"] == sha(b"beta, rebuilt")
    assert json.loads((folder / ".index.json").read_text())["b-2.0-py3-none-any.whl"][2] == sha(
        b"beta, rebuilt"
    )


def test_hash_index_same_size_new_mtime_rehashed(folder: Path) -> None:
    _hash_index(folder)
    path = folder / "a-1.0-py3-none-any.whl"
    path.write_bytes(b"ALPHA")  # same size
    os.utime(path, ns=(5, 5))
    assert _hash_index(folder)["a-1.0-py3-none-any.whl"] == sha(b"ALPHA")


def test_wheel_check_finds_a_wheel_changed_in_place(folder: Path, tmp_path: Path) -> None:
    """Damage that keeps size and mtime passes the index (it trusts them; a link into a
    build context moves the ctime), and WheelCheck, run beside the build, names the file."""
    _hash_index(folder)
    path = folder / "a-1.0-py3-none-any.whl"
    st = path.stat()
    path.write_bytes(b"ALPHA")
    os.utime(path, ns=(st.st_atime_ns, st.st_mtime_ns))
    assert _hash_index(folder)["a-1.0-py3-none-any.whl"] == sha(b"alpha")  # trusted
    ctx = tmp_path / "ctx"
    ctx.mkdir()
    for wheel in folder.glob("*.whl"):
        os.link(wheel, ctx / wheel.name)
    lock = tmp_path / "requirements.txt"
    lock.write_text(f"a==1.0 --hash=sha256:{sha(b'alpha')}\nb==2.0 --hash=sha256:{sha(b'beta')}\n")
    with pytest.raises(WheelError, match=f"{path.name}.* does not match the sha256"):
        wheels.WheelCheck(load_lock(lock), ctx, folder).wait()
    path.write_bytes(b"alpha")
    wheels.WheelCheck(load_lock(lock), ctx, folder).wait()  # all good: says nothing


def test_hash_index_refuses_a_needed_wheel_changed_in_place(folder: Path) -> None:
    """A needed wheel whose bytes changed since it was stored: one error, and the index is
    not rewritten (it still names the sha256 the file was stored with)."""
    _hash_index(folder)
    index_before = (folder / ".index.json").read_bytes()
    path = folder / "a-1.0-py3-none-any.whl"
    path.write_bytes(b"ALPHA")
    with pytest.raises(WheelError, match="does not match the sha256 it was stored with"):
        _hash_index(folder, needed=frozenset({sha(b"alpha")}))
    assert (folder / ".index.json").read_bytes() == index_before
    # not needed by this lock: only re-indexed
    assert _hash_index(folder)["a-1.0-py3-none-any.whl"] == sha(b"ALPHA")


def test_hash_index_drops_removed_and_adds_new(folder: Path) -> None:
    _hash_index(folder)
    (folder / "a-1.0-py3-none-any.whl").unlink()
    (folder / "c-3.0-py3-none-any.whl").write_bytes(b"gamma")
    index = _hash_index(folder)
    assert index == {
        "b-2.0-py3-none-any.whl": sha(b"beta"),
        "c-3.0-py3-none-any.whl": sha(b"gamma"),
    }
    assert set(json.loads((folder / ".index.json").read_text())) == set(index)


@pytest.mark.parametrize(
    "garbage", ["not json", "", '{"a-1.0-py3-none-any.whl": 3}', "[]", "null", '"x"']
)
def test_hash_index_survives_corrupt_index(folder: Path, garbage: str) -> None:
    (folder / ".index.json").write_text(garbage)
    assert _hash_index(folder)["a-1.0-py3-none-any.whl"] == sha(b"alpha")
    assert isinstance(json.loads((folder / ".index.json").read_text()), dict)


def test_hash_index_empty_folder(tmp_path: Path) -> None:
    assert _hash_index(tmp_path) == {}


# --------------------------------------------------------------------------- _unmatched


@pytest.fixture
def lock(tmp_path: Path) -> Lock:
    path = tmp_path / "requirements.txt"
    path.write_text(
        f"Alpha_Pkg==1.0 --hash={H['a']}\n"
        f"beta==2.0 \\\n    --hash={H['b']} \\\n    --hash={H['c']}\n"
        f'gamma==3.0 ; python_version < "3" --hash={H["d"]}\n'
    )
    return load_lock(path)


def test_lock_fixture_shape(lock: Lock) -> None:
    assert [(r.name, r.version, r.marker is None) for r in lock.requirements] == [
        ("alpha-pkg", "1.0", True),
        ("beta", "2.0", True),
        ("gamma", "3.0", False),
    ]


def test_unmatched_empty_cache(lock: Lock) -> None:
    assert _unmatched(lock, {}) == ["alpha-pkg==1.0", "beta==2.0"]


def test_unmatched_all_matched(lock: Lock) -> None:
    index = {"alpha.whl": "a" * 64, "beta.whl": "b" * 64}
    assert _unmatched(lock, index) == []


def test_unmatched_any_of_several_hashes_is_enough(lock: Lock) -> None:
    index = {"alpha.whl": "a" * 64, "beta-other.whl": "c" * 64}
    assert _unmatched(lock, index) == []


def test_unmatched_lists_only_the_missing(lock: Lock) -> None:
    assert _unmatched(lock, {"beta.whl": "b" * 64}) == ["alpha-pkg==1.0"]
    assert _unmatched(lock, {"alpha.whl": "a" * 64}) == ["beta==2.0"]


def test_unmatched_ignores_file_names(lock: Lock) -> None:
    # The file name says alpha, but its content hash is nobody's: it matches nothing.
    index = {"alpha_pkg-1.0-py3-none-any.whl": "e" * 64, "beta-2.0-py3-none-any.whl": "b" * 64}
    assert _unmatched(lock, index) == ["alpha-pkg==1.0"]


def test_unmatched_skips_marker_requirements(lock: Lock) -> None:
    # gamma has a marker: it may not apply to the target, so it is never required here.
    index = {"alpha.whl": "a" * 64, "beta.whl": "b" * 64}
    assert "gamma==3.0" not in _unmatched(lock, index)
    assert "gamma==3.0" not in _unmatched(lock, {})


def test_non_sha256_only_pin_is_refused_before_the_cache_is_consulted(tmp_path: Path) -> None:
    # The cache is keyed by sha256: a sha384-only pin could never be satisfied from it, so the
    # lock is refused when read (file:line), not left to fail inside the build.
    path = tmp_path / "requirements.txt"
    path.write_text(f"delta==1.0 --hash=sha384:{'ab' * 48}\n")
    with pytest.raises(LockfileError, match=r"requirements\.txt:1: 'delta==1\.0' is hashed only"):
        load_lock(path)
