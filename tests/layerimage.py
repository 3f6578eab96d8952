"""Stand-in wheels of a torch-shaped lock and a reader of an image's layers, for the tests and
the benchmark of the venv's layers by package (reprobuild.imaging.layers, issue 52)."""

from __future__ import annotations

import base64
import hashlib
import io
import json
import re
import tarfile
import zipfile
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from docker import DockerClient


def make_wheel(
    folder: Path,
    name: str,
    version: str,
    files: dict[str, bytes],
    *,
    scripts: tuple[str, ...] = (),
) -> Path:
    """A real, installable pure wheel holding ``files``; each of ``scripts`` a console script
    (``bin/NAME``, written by the installer) that calls the package's ``main``."""
    dist = name.replace("-", "_")
    info = f"{dist}-{version}.dist-info"
    body = dict(files)
    body[f"{info}/METADATA"] = f"Metadata-Version: 2.1\nName: {name}\nVersion: {version}\n".encode()
    body[f"{info}/WHEEL"] = b"Wheel-Version: 1.0\nGenerator: test\nRoot-Is-Purelib: true\n"
    body[f"{info}/WHEEL"] += b"Tag: py3-none-any\n"
    if scripts:
        module = next(p for p in files if p.endswith(".py")).removesuffix(".py").replace("/", ".")
        module = module.removesuffix(".__init__")
        entries = "".join(f"{s} = {module}:main\n" for s in scripts)
        body[f"{info}/entry_points.txt"] = f"[console_scripts]\n{entries}".encode()
    record = ""
    for path, data in body.items():
        digest = base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()
        record += f"{path},sha256={digest},{len(data)}\n"
    record += f"{info}/RECORD,,\n"
    wheel = folder / f"{dist}-{version}-py3-none-any.whl"
    with zipfile.ZipFile(wheel, "w", zipfile.ZIP_DEFLATED) as zf:
        for path, data in sorted(body.items()):
            zf.writestr(zipfile.ZipInfo(path, (1980, 1, 1, 0, 0, 0)), data)
        zf.writestr(zipfile.ZipInfo(f"{info}/RECORD", (1980, 1, 1, 0, 0, 0)), record)
    return wheel


def _module(text: str) -> bytes:
    return f"{text}\n\ndef main():\n    print(__name__)\n".encode()


# (name, version, files, console scripts): torch's shape in small, with the shared places a
# venv has: a namespace folder two CUDA wheels ship (nvidia/__init__.py), another two that
# two unrelated-looking packages share (backports/), console scripts in bin/, a .pth file.
STANDINS: tuple[tuple[str, str, dict[str, bytes], tuple[str, ...]], ...] = (
    ("torch", "2.0.0", {"torch/__init__.py": _module("TORCH = 1")}, ("torchrun",)),
    ("triton", "3.0.0", {"triton/__init__.py": _module("TRITON = 1")}, ()),
    (
        "nvidia-cublas-cu12",
        "12.4.0",
        {"nvidia/__init__.py": b"", "nvidia/cublas/__init__.py": _module("CUBLAS = 1")},
        (),
    ),
    (
        "nvidia-cudnn-cu12",
        "9.1.0",
        {"nvidia/__init__.py": b"", "nvidia/cudnn/__init__.py": _module("CUDNN = 1")},
        (),
    ),
    (
        "backports-tarfile",
        "1.2.0",
        {"backports/__init__.py": b"", "backports/tarfile/__init__.py": _module("T = 1")},
        (),
    ),
    (
        "backports-zoneinfo",
        "0.2.1",
        {"backports/__init__.py": b"", "backports/zoneinfo/__init__.py": _module("Z = 1")},
        (),
    ),
    (
        "pthpkg",
        "1.0",
        {"pthpkg.py": _module("P = 1"), "pthpkg-init.pth": b"import pthpkg\n"},
        ("pthpkg",),
    ),
    ("threadpoolctl", "3.5.0", {"threadpoolctl.py": _module("V = '3.5.0'")}, ()),
    ("filelock", "3.16.1", {"filelock/__init__.py": _module("F = 1")}, ()),
    ("sympy", "1.13.3", {"sympy/__init__.py": _module("S = 1")}, ("isympy",)),
    ("networkx", "3.4.2", {"networkx/__init__.py": _module("N = 1")}, ()),
    ("fsspec", "2024.10.0", {"fsspec/__init__.py": _module("FS = 1")}, ()),
)
BUMPED = ("threadpoolctl", "3.6.0", {"threadpoolctl.py": _module("V = '3.6.0'")}, ())


def standin_lock(wheels: Path, bumped: bool = False, nonce: str = "") -> str:
    """A hashed requirements lock of the stand-ins (threadpoolctl 3.6.0 where ``bumped``),
    their wheels written to ``wheels``, which the lock names with --find-links. A ``nonce``
    goes into every module, so that no build of an earlier run is in a builder's cache for
    these wheels: a test that asks what a build installed then sees it install."""
    wheels.mkdir(parents=True, exist_ok=True)
    lines = [f"--find-links {wheels}"]
    for name, version, files, scripts in STANDINS:
        if bumped and name == BUMPED[0]:
            name, version, files, scripts = BUMPED
        version += "+standin"  # a version no index has: pip takes these very files
        if nonce:  # not into empty files: a namespace's __init__.py stays one file's bytes
            files = {k: v + f"# {nonce}\n".encode() if v else v for k, v in files.items()}
        wheel = make_wheel(wheels, name, version, files, scripts=scripts)
        digest = hashlib.sha256(wheel.read_bytes()).hexdigest()
        lines.append(f"{name}=={version} --hash=sha256:{digest}")
    return "\n".join(lines) + "\n"


@dataclass(frozen=True)
class Layer:
    diff_id: str
    size: int
    members: tuple[tarfile.TarInfo, ...]


def image_layers(docker_client: DockerClient, tag: str) -> Iterator[Layer]:
    """Each layer of an image (a ``docker save``), bottom first, with its tar's entries."""
    image = docker_client.images.get(tag)
    saved = b"".join(image.save(named=False))
    with tarfile.open(fileobj=io.BytesIO(saved)) as outer:
        index = outer.extractfile("manifest.json")
        assert index is not None
        paths = json.load(index)[0]["Layers"]
        for path, diff_id in zip(paths, image.attrs["RootFS"]["Layers"], strict=True):
            raw = outer.extractfile(path)
            assert raw is not None
            data = raw.read()
            with tarfile.open(fileobj=io.BytesIO(data)) as layer:
                yield Layer(diff_id, len(data), tuple(layer.getmembers()))


def dist_infos(layer: Layer) -> set[str]:
    """The distributions whose dist-info a layer holds (their names as the folders spell them)."""
    found = set()
    for m in layer.members:
        hit = re.fullmatch(r"opt/venv/lib/python[0-9.]+/site-packages/([^/]+)\.dist-info", m.name)
        if hit:
            found.add(hit.group(1).rsplit("-", 1)[0].lower())
    return found


def overlaps(layers: list[Layer]) -> list[str]:
    """What one layer would rewrite of another's: a whiteout, a file or link in two layers, or a
    folder in two with other owners or modes."""
    seen: dict[str, tuple[int, int, int, int]] = {}
    found: list[str] = []
    for n, layer in enumerate(layers):
        for m in layer.members:
            name = m.name.rstrip("/")
            if name.rsplit("/", 1)[-1].startswith(".wh."):
                found.append(f"layer {n}: whiteout {name}")
                continue
            meta = (n, m.mode, m.uid, m.gid) if m.isdir() else (n, -1, -1, -1)
            before = seen.get(name)
            if before is not None and (not m.isdir() or before[1:] != meta[1:]):
                found.append(f"layers {before[0]} and {n}: {name}")
            seen[name] = meta
    return found


ALLOWED = ("app", "tmp", "home/repro")


def writable_by(layers: list[Layer], uid: int) -> list[str]:
    """Entries outside /app, /tmp and the user's home that ``uid`` (and its own group, of the
    same number) may write, or that anyone may."""
    found = []
    for layer in layers:
        for m in layer.members:
            name = m.name.rstrip("/")
            if any(name == a or name.startswith(a + "/") for a in ALLOWED) or m.issym():
                continue
            if m.uid == uid or (m.gid == uid and m.mode & 0o020) or m.mode & 0o002:
                found.append(f"{name} ({oct(m.mode)} {m.uid}:{m.gid})")
    return found
