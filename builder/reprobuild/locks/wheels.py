"""Hermetic installs: download the locked wheels on the host, hash-checked, into a cache.

The build then installs them with ``--no-index``, so the image build needs no network.
The cache is keyed by target (Python version, ABI, platform), and a file is used only when its
sha256 is one of the lock's hashes for that requirement.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Callable
from dataclasses import dataclass, replace
from pathlib import Path

from packaging.utils import canonicalize_name

from reprobuild._util import jsonload, leftovers
from reprobuild._util.fsutil import write_atomic
from reprobuild.errors import ReprobuildError
from reprobuild.locks.lockfile import Lock

Log = Callable[[str], None]
_MANYLINUX_LEGACY = {5: "manylinux1", 12: "manylinux2010", 17: "manylinux2014"}


class WheelError(ReprobuildError):
    """The locked wheels could not be fetched for the base's platform."""


@dataclass(frozen=True)
class Target:
    """The interpreter and platform the wheels must fit (read from the base image)."""

    python_version: str  # "3.11"
    machine: str  # "x86_64"
    glibc: tuple[int, int] | None  # (2, 36); None for musl/unknown

    @property
    def abi(self) -> str:
        return "cp" + self.python_version.replace(".", "")

    @property
    def key(self) -> str:
        libc = f"glibc{self.glibc[0]}.{self.glibc[1]}" if self.glibc else "nolibc"
        return f"{self.abi}-{self.machine}-{libc}"

    def platforms(self) -> list[str]:
        out: list[str] = []
        if self.glibc and self.glibc[0] == 2:
            for minor in range(self.glibc[1], 4, -1):
                out.append(f"manylinux_2_{minor}_{self.machine}")
                if minor in _MANYLINUX_LEGACY:
                    out.append(f"{_MANYLINUX_LEGACY[minor]}_{self.machine}")
        out.append(f"linux_{self.machine}")
        return out

    @classmethod
    def from_probe(cls, probe: dict[str, object]) -> Target:
        py = probe.get("python")
        plat = probe.get("platform")
        if not isinstance(py, dict) or not isinstance(plat, dict):
            raise WheelError("the base image's probe gave no python/platform facts")
        version = ".".join(str(py.get("version", "")).split(".")[:2])
        glibc: tuple[int, int] | None = None
        if plat.get("libc") == "glibc":
            parts = str(plat.get("libc_version", "")).split(".")
            if len(parts) >= 2 and parts[0].isdigit() and parts[1].isdigit():
                glibc = (int(parts[0]), int(parts[1]))
        return cls(version, str(plat.get("machine", "x86_64")), glibc)


def cache_root() -> Path:
    env = os.environ.get("REPROBUILD_CACHE_DIR")
    if env:
        return Path(env)
    base = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(base) / "reprobuild"


def _sha256(path: Path) -> str:
    digest = hashlib.sha256()
    with path.open("rb") as fh:
        for block in iter(lambda: fh.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def _hash_index(folder: Path) -> dict[str, str]:
    """sha256 of every file in ``folder``, memoised in ``.index.json`` by (name, size, mtime)."""
    index_path = folder / ".index.json"
    try:
        old = jsonload.read_json_file(index_path, str(index_path))
    except (OSError, ReprobuildError):
        old = {}  # only a cache (never waited on, never trusted for more than mtimes)
    if not isinstance(old, dict):
        old = {}  # a damaged index is only a cache: rebuild it
    new: dict[str, list[object]] = {}
    for path in sorted(folder.iterdir()):
        if path.name.startswith(".") or not path.is_file():
            continue
        st = path.stat()
        stamp = [st.st_size, st.st_mtime_ns]
        entry = old.get(path.name)
        digest = entry[2] if isinstance(entry, list) and entry[:2] == stamp else _sha256(path)
        new[path.name] = [*stamp, digest]
    if new != old:
        write_atomic(index_path, json.dumps(new, sort_keys=True))
    return {name: str(v[2]) for name, v in new.items()}


def _needed(lock: Lock, digest: str) -> bool:
    return any(h == f"sha256:{digest}" for r in lock.requirements for h in r.hashes)


def _unmatched(lock: Lock, index: dict[str, str]) -> list[str]:
    """Requirements (without markers) that no cached file's sha256 satisfies."""
    have = set(index.values())
    return [
        f"{r.name}=={r.version}"
        for r in lock.requirements
        if r.marker is None and not any(h.split(":", 1)[1] in have for h in r.hashes)
    ]


def _pip_download(lock: Lock, target: Target, folder: Path, log: Log) -> None:
    """Download the lock's wheels into ``folder`` (a fresh temp dir: pip removes a file it
    finds there with a hash it does not expect, so it never sees the cache itself)."""
    with tempfile.TemporaryDirectory(prefix=leftovers.temp_prefix("lock")) as tmp:
        req = Path(tmp) / "requirements.lock"
        req.write_text(lock.render(index_options=True))
        argv = [
            sys.executable, "-m", "pip", "download",
            "--require-hashes", "--only-binary=:all:", "--no-deps",
            "--disable-pip-version-check", "--progress-bar", "off",
            "--python-version", target.python_version,
            "--implementation", "cp",
            "--abi", target.abi, "--abi", "abi3", "--abi", "none",
            *[arg for p in target.platforms() for arg in ("--platform", p)],
            "-d", str(folder), "-r", str(req),
        ]  # fmt: skip
        log(f"fetching {len(lock.requirements)} locked wheels for {target.key}")
        proc = subprocess.run(argv, capture_output=True, text=True, check=False)
    if proc.returncode != 0:
        mismatch = _hash_mismatch(lock, proc.stderr)
        if mismatch:
            raise mismatch
        lines = [ln for ln in proc.stderr.splitlines() if ln.strip()]
        first = next((ln for ln in lines if "ERROR" in ln), lines[-1] if lines else "pip failed")
        raise WheelError(
            f"cannot fetch the locked wheels for {target.key}: {first.strip()}",
            hint="check the lock was compiled for this Python/platform, or build with --online",
        )


_MISMATCH_RE = re.compile(
    r"^\s+(?P<req>[A-Za-z0-9._-]+)==(?P<ver>\S+) from .*?\n\s+Expected sha256 (?P<want>[0-9a-f]+)"
    r".*?\n\s+Got\s+(?P<got>[0-9a-f]{64})",
    re.MULTILINE | re.DOTALL,
)


def _hash_mismatch(lock: Lock, stderr: str) -> WheelError | None:
    """Turn pip's hash-mismatch report into one line naming the lock line and both hashes."""
    match = _MISMATCH_RE.search(stderr)
    if match is None:
        return None
    name = canonicalize_name(match["req"])
    line = next((r.line for r in lock.requirements if r.name == name), None)
    where = f"{lock.path}:{line}" if line else str(lock.path)
    return WheelError(
        f"{where}: the downloaded {match['req']}=={match['ver']} has sha256 {match['got']}, "
        "which is none of the lock's hashes",
        hint="the lock is wrong or the file was tampered with; regenerate the lock and compare",
    )


_DOWNLOAD_PREFIX = ".download-"


def _download_into_cache(lock: Lock, target: Target, folder: Path, log: Log) -> None:
    """Fetch what the cache lacks into a temp dir inside it; move in only files whose sha256
    is one of the lock's hashes, each by an atomic rename. A failed download changes nothing
    in the cache; a good file replaces a damaged entry of the same name only once verified."""
    have = set(_hash_index(folder).values())
    # Only what the cache lacks (markers included: pip evaluates them for the target). The
    # lock pins every dependency, so each is fetched on its own (--no-deps).
    wanted = replace(
        lock,
        requirements=tuple(
            r for r in lock.requirements if not any(h.split(":", 1)[1] in have for h in r.hashes)
        ),
    )
    allowed = {h.split(":", 1)[1] for r in lock.requirements for h in r.hashes}
    leftovers.reap_dir(folder, _DOWNLOAD_PREFIX)
    staging = Path(tempfile.mkdtemp(prefix=f"{_DOWNLOAD_PREFIX}{leftovers.owner()}-", dir=folder))
    try:
        _pip_download(wanted, target, staging, log)
        for path in sorted(staging.iterdir()):
            if path.is_file() and not path.is_symlink() and _sha256(path) in allowed:
                os.replace(path, folder / path.name)
    finally:
        shutil.rmtree(staging, ignore_errors=True)


def _verified(path: Path, digest: str) -> bool:
    """The cached file's content really has ``digest`` (the index only remembers it by size
    and mtime, which a damaged or replaced file can keep)."""
    try:
        return _sha256(path) == digest
    except OSError:
        return False


def fetch_wheels(lock: Lock, target: Target, dest: Path, *, log: Log = print) -> list[Path]:
    """Fill ``dest`` with exactly the wheels the lock pins for ``target``; return their paths."""
    folder = cache_root() / "wheels" / target.key
    try:
        return _fetch_wheels(lock, target, folder, dest, log)
    except OSError as exc:
        where = exc.filename or folder
        raise WheelError(
            f"cannot use the wheel cache {str(where)!r}: {exc.strerror or exc}",
            hint="make it writable, or point XDG_CACHE_HOME (or REPROBUILD_CACHE_DIR) elsewhere",
        ) from None


def _fetch_wheels(lock: Lock, target: Target, folder: Path, dest: Path, log: Log) -> list[Path]:
    folder.mkdir(parents=True, exist_ok=True)
    if _unmatched(lock, _hash_index(folder)):
        _download_into_cache(lock, target, folder, log)
    else:
        log(f"all {len(lock.requirements)} locked wheels are cached for {target.key}")
    by_hash = {digest: folder / name for name, digest in _hash_index(folder).items()}
    damaged = sorted(str(p) for d, p in by_hash.items() if _needed(lock, d) and not _verified(p, d))
    if damaged:
        raise WheelError(
            f"cached wheel {damaged[0]!r} does not match the sha256 it was stored with",
            hint="the cache was changed behind reprobuild's back: delete that file and build "
            "again to fetch it anew",
        )
    dest.mkdir(parents=True, exist_ok=True)
    chosen: list[Path] = []
    missing: list[str] = []
    for requirement in lock.requirements:
        hexes = {h.split(":", 1)[1] for h in requirement.hashes if h.startswith("sha256:")}
        found = [by_hash[h] for h in sorted(hexes) if h in by_hash]
        if not found:
            if requirement.marker is None:
                missing.append(f"{requirement.name}=={requirement.version}")
            continue
        for src in found:
            out = dest / src.name
            if not out.exists():
                try:
                    os.link(src, out)
                except OSError:
                    shutil.copy2(src, out)
            chosen.append(out)
    if missing:
        raise WheelError(
            f"no wheel matching the lock's hashes was fetched for: {', '.join(missing)}"
        )
    return chosen
