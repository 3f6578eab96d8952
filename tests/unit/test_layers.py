"""Which locked wheels share a layer (reprobuild.imaging.layers, issue 52): the frameworks get
a layer each, the rest go to buckets that a bump or an added package does not reshuffle, and
each group's requirements (the stage's cache key) follow from its own pins alone."""

from __future__ import annotations

import hashlib
import os
import tarfile
from pathlib import Path
from typing import Any

from layerimage import Layer, overlaps, writable_by
from reprobuild.imaging.layers import (
    BUCKET_NAMES,
    BUCKETS,
    FRAMEWORKS,
    HEAVY,
    bucket,
    in_place,
    link_wheels,
    plan_groups,
)
from reprobuild.locks.lockfile import parse_lock_bytes

# A torch-shaped lock: torch with its CUDA wheels and triton, jax, and a tail of small ones.
NAMES = [
    ("torch", "2.5.1"),
    ("triton", "3.1.0"),
    ("nvidia-cublas-cu12", "12.4.5.8"),
    ("nvidia-cudnn-cu12", "9.1.0.70"),
    ("jax", "0.4.35"),
    ("jaxlib", "0.4.35"),
    ("jax-cuda12-plugin", "0.4.35"),
    ("numpy", "2.1.3"),
    ("threadpoolctl", "3.5.0"),
    ("backports-tarfile", "1.2.0"),
    ("backports-zoneinfo", "0.2.1"),
    ("jaraco-classes", "3.4.0"),
    ("jaraco-functools", "4.1.0"),
    ("filelock", "3.16.1"),
    ("six", "1.17.0"),
]


def lock_of(pins: list[tuple[str, str]]) -> bytes:
    lines = []
    for name, version in pins:
        digest = hashlib.sha256(f"{name}=={version}".encode()).hexdigest()
        lines.append(f"{name}=={version} --hash=sha256:{digest}")
    return ("\n".join(lines) + "\n").encode()


def groups_of(pins: list[tuple[str, str]]) -> dict[str, str]:
    lock = parse_lock_bytes(lock_of(pins), Path("requirements.lock"))
    return {g.name: g.text() for g in plan_groups(lock)}


def test_frameworks_get_a_layer_each_and_the_cuda_wheels_follow_torch() -> None:
    lock = parse_lock_bytes(lock_of(NAMES), Path("requirements.lock"))
    groups = {g.name: [r.name for r in g.requirements] for g in plan_groups(lock)}
    assert groups["torch"] == ["nvidia-cublas-cu12", "nvidia-cudnn-cu12", "torch", "triton"]
    assert groups["jax"] == ["jax", "jax-cuda12-plugin", "jaxlib"]
    assert list(groups)[:2] == ["torch", "jax"]  # the frameworks first, in FRAMEWORKS' order
    rest = [n for g, names in groups.items() if g not in ("torch", "jax") for n in names]
    assert sorted(rest) == sorted(n for n, _ in NAMES[7:])
    assert len(groups) <= len(FRAMEWORKS) + 1 + len(HEAVY) + BUCKETS


def test_without_a_framework_the_cuda_wheels_share_a_layer_of_their_own() -> None:
    pins = [("nvidia-cuda-cupti", "13.0.85"), ("nvidia-nvtx", "13.0.85"), ("numpy", "2.1.3")]
    lock = parse_lock_bytes(lock_of(pins), Path("requirements.lock"))
    groups = {g.name: [r.name for r in g.requirements] for g in plan_groups(lock)}
    assert groups["cuda"] == ["nvidia-cuda-cupti", "nvidia-nvtx"]


def test_the_big_libraries_come_after_the_frameworks_and_before_the_buckets() -> None:
    """What a bump re-does is its layer and every layer above it: the big libraries get a
    layer each, in HEAVY's order, below the small buckets; a family by its first word."""
    pins = [
        ("six", "1.17.0"),
        ("scikit-learn", "1.6.1"),
        ("scikit-image", "0.25.0"),
        ("numpy", "2.1.3"),
        ("torch", "2.5.1"),
        ("opencv-python-headless", "4.10.0.84"),
        ("scipy", "1.15.1"),
    ]
    lock = parse_lock_bytes(lock_of(pins), Path("requirements.lock"))
    groups = {g.name: [r.name for r in g.requirements] for g in plan_groups(lock)}
    assert list(groups) == ["torch", "scipy", "opencv", "numpy", "scikit", bucket("six")]
    assert groups["scikit"] == ["scikit-image", "scikit-learn"]
    # the frameworks' and the big libraries' installed in place, the buckets as stages
    assert in_place(plan_groups(lock)) == 5
    assert list(HEAVY) == sorted(set(HEAVY), key=HEAVY.index)  # no word twice
    assert not set(BUCKET_NAMES) & set(HEAVY)


def test_a_lock_of_small_packages_has_its_first_group_in_place() -> None:
    pins = [("six", "1.17.0"), ("idna", "3.10")]
    assert in_place(plan_groups(parse_lock_bytes(lock_of(pins), Path("r.lock")))) == 1
    assert in_place(()) == 0


def test_a_namespace_family_shares_one_bucket() -> None:
    assert bucket("backports-tarfile") == bucket("backports.zoneinfo")
    assert bucket("jaraco-classes") == bucket("jaraco_functools")


def test_a_bump_or_an_added_package_moves_only_its_own_group() -> None:
    before = groups_of(NAMES)
    bumped = [(n, "3.6.0" if n == "threadpoolctl" else v) for n, v in NAMES]
    after = groups_of(bumped)
    changed = {g for g in before if before[g] != after.get(g)}
    assert changed == {bucket("threadpoolctl")}, changed
    assert set(after) == set(before)
    added = groups_of([*NAMES, ("zipp", "3.21.0")])
    changed = {g for g in added if added[g] != before.get(g)}
    assert changed == {bucket("zipp")}, changed
    removed = groups_of([p for p in NAMES if p[0] != "six"])
    changed = {g for g in before if before[g] != removed.get(g)}
    assert changed == {bucket("six")}, changed


def test_buckets_spread_the_names() -> None:
    """Names of a real lock do not pile into a few buckets (which would make big layers)."""
    names = [f"package{n}" for n in range(400)]
    used = {bucket(n) for n in names}
    assert len(used) == BUCKETS


def test_wheels_are_linked_into_their_groups_folder(tmp_path: Path) -> None:
    lock = parse_lock_bytes(lock_of(NAMES), Path("requirements.lock"))
    groups = plan_groups(lock)
    wheels = tmp_path / "wheels"
    wheels.mkdir()
    names = ["torch-2.5.1-cp311-cp311-manylinux_2_28_x86_64.whl", "six-1.17.0-py2.py3-none-any.whl"]
    for name in [*names, ".keep", "stray-1.0-py3-none-any.whl"]:
        (wheels / name).write_bytes(name.encode())
    for group in groups:
        (tmp_path / group.folder / "wheels").mkdir(parents=True)
    link_wheels(groups, wheels, tmp_path)
    torch = tmp_path / "groups" / "torch" / "wheels" / names[0]
    six = tmp_path / "groups" / bucket("six") / "wheels" / names[1]
    assert os.path.samefile(torch, wheels / names[0]) and os.path.samefile(six, wheels / names[1])
    linked = sorted(p.name for p in (tmp_path / "groups").rglob("*.whl"))
    assert linked == sorted(names)


def _entry(name: str, kind: bytes = tarfile.REGTYPE, mode: int = 0o644, uid: int = 0) -> Any:
    info = tarfile.TarInfo(name)
    info.type, info.mode, info.uid, info.gid = kind, mode, uid, uid
    return info


def test_the_layer_checks_find_what_they_look_for() -> None:
    """The engine tests' checks (tests/layerimage.py) catch each kind of rewrite and each
    writable entry, and let a folder two layers share with one owner and mode pass."""
    folder = _entry("opt/venv", tarfile.DIRTYPE, 0o755)
    one = Layer("a", 0, (folder, _entry("opt/venv/bin/tool")))
    assert overlaps([one, Layer("b", 0, (folder, _entry("opt/venv/x")))]) == []
    shadow = Layer("b", 0, (_entry("opt/venv/bin/tool"),))
    assert overlaps([one, shadow]) == ["layers 0 and 1: opt/venv/bin/tool"]
    other_mode = Layer("b", 0, (_entry("opt/venv", tarfile.DIRTYPE, 0o775),))
    assert overlaps([one, other_mode]) == ["layers 0 and 1: opt/venv"]
    whiteout = Layer("b", 0, (_entry("opt/venv/bin/.wh.tool"),))
    assert overlaps([one, whiteout]) == ["layer 1: whiteout opt/venv/bin/.wh.tool"]
    entries = (
        _entry("app", tarfile.DIRTYPE, 0o755, uid=10001),
        _entry("home/repro/.profile", uid=10001),
        _entry("opt/venv/.lock", uid=10001),
        _entry("etc/motd", mode=0o666),
        _entry("opt/venv/pyvenv.cfg"),
    )
    assert writable_by([Layer("c", 0, entries)], 10001) == [
        "opt/venv/.lock (0o644 10001:10001)",
        "etc/motd (0o666 0:0)",
    ]
