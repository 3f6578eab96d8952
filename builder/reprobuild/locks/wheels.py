"""Hermetic installs: download the locked wheels on the host, hash-checked, into a cache.

The build then installs them with ``--no-index``, so the image build needs no network.
The cache is keyed by target (Python version, ABI, platform), and a file is used only when its
sha256 is one of the lock's hashes for that requirement.
"""

from __future__ import annotations

import contextlib
import hashlib
import html.parser
import importlib.metadata
import json
import os
import platform
import queue
import re
import shutil
import subprocess
import sys
import tempfile
import threading
from collections.abc import Callable
from dataclasses import dataclass, replace
from pathlib import Path
from typing import IO, TextIO
from urllib.parse import unquote, urljoin, urlsplit

from packaging.utils import canonicalize_name
from packaging.version import InvalidVersion, Version

from reprobuild._util import jsonload, leftovers
from reprobuild._util.fsutil import sha256_file, write_atomic
from reprobuild._util.progress import Parallel, Transfers
from reprobuild._util.threads import start as start_thread
from reprobuild.errors import LockfileError, ReprobuildError
from reprobuild.locks import fetchnet, parfetch
from reprobuild.locks.lockfile import Lock, Selection
from reprobuild.locks.records import (
    HASH_ONLY_FORMATS,
    SOURCE_ARCHIVE_RE,
    IndexOptions,
    Requirement,
    SourceArchive,
    index_url_problem,
    quoted,
)
from reprobuild.locks.urlwheels import fetch_direct, target_tags

Log = Callable[[str], None]
Show = Callable[[int], Transfers]  # the progress display for a download of N files
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


def _sha256_hexes(requirement: Requirement) -> set[str]:
    """The hex digests of a requirement's locked sha256 hashes (its other algorithms left out)."""
    return {h.split(":", 1)[1] for h in requirement.hashes if h.startswith("sha256:")}


# Every cached wheel's mtime (ns). The context's wheels are hard links into the cache, and
# buildah 1.39 digests a RUN bind mount's source, mtimes included, into the image's history
# (issue 29): one fixed time for every cached file, whatever day it was downloaded, lets the
# build use the links as they are (no copy of a wheel set of gigabytes per build) and keeps
# the image ID independent of when the cache was filled.
CACHED_MTIME_NS = 0


def _hash_index(folder: Path, *, needed: frozenset[str] = frozenset()) -> dict[str, str]:
    """sha256 of every file in ``folder``, memoised in ``.index.json`` by (name, size,
    mtime). A file whose mtime is not :data:`CACHED_MTIME_NS` was written or touched since it
    was indexed: it is hashed again, then given that time. (Not the ctime: linking a wheel
    into a build context moves it.) A file changed in place that kept its size and time is
    caught by :class:`WheelCheck` during the build, and by pip's own hash check in it.

    A file stored with one of the ``needed`` sha256s whose bytes now have another is refused
    (a damaged or replaced cache entry), before the index is written."""
    index_path = folder / ".index.json"
    try:
        old = jsonload.read_json_file(index_path, str(index_path))
    except (OSError, ReprobuildError):
        old = {}  # only a cache (never waited on, never trusted for more than its stamps)
    if not isinstance(old, dict):
        old = {}  # a damaged index is only a cache: rebuild it
    new: dict[str, list[object]] = {}
    for path in sorted(folder.iterdir()):
        if path.name.startswith(".") or not path.is_file():
            continue
        st = path.stat()
        stamp = [st.st_size, st.st_mtime_ns]
        entry = old.get(path.name)
        stored = entry if isinstance(entry, list) and len(entry) == 3 else None
        settled = st.st_mtime_ns == CACHED_MTIME_NS
        trusted = stored is not None and settled and stored[:2] == stamp
        digest = stored[2] if stored is not None and trusted else sha256_file(path)
        if stored is not None and stored[2] != digest and stored[2] in needed:
            raise WheelError(
                f"cached wheel {str(path)!r} does not match the sha256 it was stored with",
                hint="the cache was changed behind reprobuild's back: delete that file and build "
                "again to fetch it anew",
            )
        if not settled:
            with contextlib.suppress(OSError):  # a read-only cache: the context copies
                os.utime(path, ns=(CACHED_MTIME_NS, CACHED_MTIME_NS))
                stamp[1] = path.stat().st_mtime_ns
        new[path.name] = [*stamp, digest]
    if new != old:
        write_atomic(index_path, json.dumps(new, sort_keys=True))
    return {name: str(v[2]) for name, v in new.items()}


def _verified(path: Path, digest: str) -> bool:
    """The file's content really has ``digest`` (for the small source archives, checked
    whole on every use)."""
    try:
        return sha256_file(path) == digest
    except OSError:
        return False


class WheelCheck:
    """Hashes the wheels a build uses while it runs (a thread: hashlib lets go of the GIL),
    instead of before it: a few seconds per gigabyte off every build, where the index alone
    would trust a file changed in place that kept its size and time. ``wait`` raises the
    first mismatch as one line naming the cached file; the image build calls it before it
    stamps or loads anything, and when the build failed (pip in the build refuses such a
    file too, in more words)."""

    def __init__(self, lock: Lock, wheels: Path, folder: Path) -> None:
        self._allowed = {h.split(":", 1)[1] for r in lock.requirements for h in r.hashes}
        self._wheels, self._folder = wheels, folder
        self._error: WheelError | None = None
        self._thread = threading.Thread(target=self._run, name="wheel-check", daemon=True)
        start_thread(self._thread)

    def _run(self) -> None:
        try:
            for path in sorted(self._wheels.iterdir()):
                if path.name.startswith("."):  # the context's own .keep
                    continue
                if path.is_file() and sha256_file(path) not in self._allowed:
                    self._error = WheelError(
                        f"cached wheel {str(self._folder / path.name)!r} does not match the "
                        "sha256 it was stored with",
                        hint="the cache was changed behind reprobuild's back: delete that file "
                        "and build again to fetch it anew",
                    )
                    return
        except OSError as exc:  # the context went away (an interrupted build): nothing to say
            self._error = (
                None
                if not self._wheels.exists()
                else WheelError(f"cannot read the build's wheels: {exc.strerror or exc}")
            )

    def wait(self) -> None:
        self._thread.join()
        if self._error is not None:
            raise self._error


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


def _pip_download(lock: Lock, target: Target, folder: Path, log: Log, show: Show) -> None:
    """Download the lock's wheels into ``folder`` (a fresh temp dir: pip removes a file it
    finds there with a hash it does not expect, so it never sees the cache itself). pip runs
    isolated from the host's pip configuration (:mod:`~reprobuild.locks.fetchnet`), with its
    HTTP cache in reprobuild's: what a failed run downloaded is not downloaded again."""
    with tempfile.TemporaryDirectory(prefix=leftovers.temp_prefix("lock")) as tmp:
        req = Path(tmp) / "requirements.lock"
        req.write_text(lock.render(index_options=True))
        argv = [
            sys.executable, "-m", "pip", "--isolated", "download",
            "--require-hashes", "--only-binary=:all:", "--no-deps",
            "--cache-dir", str(pip_cache()), *fetchnet.pip_network_args(),
            *[arg for link in fetchnet.find_links() for arg in ("--find-links", link)],
            "--disable-pip-version-check", "--progress-bar", _pip_progress_bar(),
            "--python-version", target.python_version,
            "--implementation", "cp",
            "--abi", target.abi, "--abi", "abi3", "--abi", "none",
            *[arg for p in target.platforms() for arg in ("--platform", p)],
            "-d", str(folder), "-r", str(req),
        ]  # fmt: skip
        progress = show(len(lock.requirements))
        code, stderr = _run_pip(argv, Path(tmp), progress)
    if code == 0:  # the exact bytes, where pip's own lines may have given rounded sizes
        files = [p for p in folder.iterdir() if p.is_file()]
        log(progress.summary(len(files), sum(p.stat().st_size for p in files)))
        return
    mismatch = _hash_mismatch(lock, stderr) or _no_wheel(lock, stderr, target)
    if mismatch:
        raise mismatch
    raise WheelError(
        f"cannot fetch the locked wheels for {target.key}: "
        f"{fetchnet.tool_error(stderr, f'pip exited with status {code}')[:400]}",
        hint="check the lock was compiled for this Python/platform, or build with --online",
    )


def _pip_progress_bar() -> str:
    """``raw`` where this interpreter's pip has it (24.1 and later: ``Progress N of M`` lines,
    the bytes of the file in flight); else ``off`` (then progress is file by file, from pip's
    ``Downloading NAME (SIZE)`` lines). pip runs as ``sys.executable -m pip``: the same pip."""
    try:
        version = Version(importlib.metadata.version("pip"))
    except (importlib.metadata.PackageNotFoundError, InvalidVersion):
        return "off"
    return "raw" if version >= Version("24.1") else "off"


# What pip says on stdout while it downloads (the parts of it progress is read from).
_PIP_FILE_RE = re.compile(
    r"^\s*(?:Downloading|Using cached|Resuming download)\s+(?P<url>\S+)"
    r"(?:\s+\((?:(?P<from>[0-9.]+ \S+)/)?(?P<size>[0-9.]+ (?:bytes|kB|MB|GB|TB))\))?\s*$"
)
_PIP_LOCAL_RE = re.compile(r"^\s*Processing (?P<path>/\S+\.whl)(?:\s+\(from .*\))?\s*$")
_PIP_RAW_RE = re.compile(r"^Progress (?P<done>\d+) of (?P<total>\d+)\s*$")
_PIP_SAVED_RE = re.compile(r"^\s*(?:Saved |Successfully downloaded |File was already downloaded )")
_UNITS = {"bytes": 1, "kB": 10**3, "MB": 10**6, "GB": 10**9, "TB": 10**12}
_TICK_S = 0.5  # how often the total is looked at while pip says nothing


def _pip_size(text: str | None) -> int | None:
    """pip's rounded ``12.3 MB`` as bytes (an estimate until its own count says more)."""
    if not text:
        return None
    number, unit = text.split()
    return int(float(number) * _UNITS[unit])


def _follow_pip(line: str, progress: Transfers) -> None:
    """Feed one line of pip's stdout to ``progress``."""
    if raw := _PIP_RAW_RE.match(line):
        progress.update(int(raw["done"]), int(raw["total"]) or None)
    elif started := _PIP_FILE_RE.match(line):
        name = unquote(urlsplit(started["url"]).path.rsplit("/", 1)[-1]) or started["url"]
        if name.endswith(".metadata"):  # PEP 658 metadata, fetched while resolving
            progress.finish()
            return
        progress.start(name, _pip_size(started["size"]))
        if started["from"]:
            progress.update(_pip_size(started["from"]) or 0)
    elif local := _PIP_LOCAL_RE.match(line):  # a file: index or --find-links: copied
        path = Path(local["path"])
        with contextlib.suppress(OSError):
            progress.start(path.name, path.stat().st_size)
            progress.update(path.stat().st_size)
    elif line.lstrip().startswith("Collecting ") or _PIP_SAVED_RE.match(line):
        progress.finish()
    else:
        progress.tick()


def _run_pip(argv: list[str], tmp: Path, progress: Transfers) -> tuple[int, str]:
    """Run pip with its stdout followed line by line into ``progress`` (a reader thread, so
    the total is said on time while pip is silent) and its stderr kept for the error."""
    lines: queue.Queue[str | None] = queue.Queue()
    with (tmp / "pip.stderr").open("w+") as err, progress:
        proc = subprocess.Popen(
            argv, stdout=subprocess.PIPE, stderr=err, stdin=subprocess.DEVNULL, text=True,
            errors="replace", env=fetchnet.isolated_env(),
        )  # fmt: skip
        assert proc.stdout is not None

        def read(stdout: IO[str]) -> None:
            for line in stdout:
                lines.put(line.rstrip("\n"))
            lines.put(None)

        reader = threading.Thread(target=read, args=(proc.stdout,), daemon=True)
        start_thread(reader)
        try:
            while True:
                try:
                    line = lines.get(timeout=_TICK_S)
                except queue.Empty:
                    progress.tick()
                    continue
                if line is None:
                    break
                _follow_pip(line, progress)
            code = proc.wait()
            if code != 0:  # the file pip was on when it failed did not arrive
                progress.drop()
        finally:
            if proc.poll() is None:  # interrupted: pip must not go on alone
                proc.kill()
                proc.wait()
            reader.join(timeout=5)
            proc.stdout.close()
        err.seek(0)
        return code, err.read()


_MISMATCH_RE = re.compile(
    r"^\s+(?P<req>[A-Za-z0-9._-]+)==(?P<ver>\S+) from (?P<url>[^\s:]+(?::[^\s:]+)*)[^\n]*\n"
    r"\s+Expected sha256 (?P<want>[0-9a-f]+).*?\n\s+Got\s+(?P<got>[0-9a-f]{64})",
    re.MULTILINE | re.DOTALL,
)


_NO_MATCH_RE = re.compile(
    r"No matching distribution found for (?P<req>[A-Za-z0-9._-]+)==(?P<ver>\S+)"
)


def _no_wheel(lock: Lock, stderr: str, target: Target) -> WheelError | None:
    """pip's "no matching distribution" as one line naming the lock's line and the target: a
    lock that pins no wheel of that package for this platform (pip stops at the first)."""
    match = _NO_MATCH_RE.search(stderr)
    if match is None:
        return None
    name = canonicalize_name(match["req"])
    pins = [r for r in lock.requirements if r.name == name]  # one per machine, by markers
    line = next((r.line for r in pins if r.version == match["ver"]), pins[0].line if pins else 0)
    where = f"{lock.path}:{line}" if line else str(lock.path)
    hint = (
        "lock that package for this platform (a marker per machine where the pins differ), "
        "or build for a platform the lock covers"
    )
    if lock.format in HASH_ONLY_FORMATS and not any(r.source for r in pins):
        # a hashes-only lock names no file: the locked hash may be an sdist's, which only
        # `reprobuild build-lock` finds (it records it in the build lock the image reads)
        hint = (
            "if its index has only its sdist, `reprobuild build-lock` finds it by the locked "
            "hash and pins what building it needs (name the file in reprobuild.yaml's "
            f"build_lock:); else {hint}"
        )
    return WheelError(
        f"{where}: {match['req']}=={match['ver']} has no wheel for CPython "
        f"{target.python_version} on linux {target.machine} ({target.key}) on the indexes asked",
        hint=hint,
    )


def _hash_mismatch(lock: Lock, stderr: str) -> WheelError | None:
    """Turn pip's hash-mismatch report into one line naming the lock line and both hashes."""
    match = _MISMATCH_RE.search(stderr)
    if match is None:
        return None
    name = canonicalize_name(match["req"])
    line = next((r.line for r in lock.requirements if r.name == name), None)
    where = f"{lock.path}:{line}" if line else str(lock.path)
    filename = unquote(match["url"].rsplit("/", 1)[-1].split("#", 1)[0])
    took = f" ({filename})" if filename.endswith((".whl", ".tar.gz", ".zip")) else ""
    # The lock names hashes, not files: pip took the file that fits the base best, and the lock
    # may pin that release's files for another Python or platform only. Not said to be tampered
    # with: nothing here shows it is the file the lock pins.
    return WheelError(
        f"{where}: the file pip took for {match['req']}=={match['ver']}{took} has sha256 "
        f"{match['got']}, which is none of the lock's hashes for it",
        hint="the lock was made for another Python or platform than the base's (relock for "
        "the base: `reprobuild init --base` reads it), or, if the lock pins this very file, "
        "its bytes changed at the index",
    )


_DOWNLOAD_PREFIX = ".download-"


def _download_into_cache(lock: Lock, target: Target, folder: Path, log: Log, show: Shows) -> None:
    """Fetch what the cache lacks into a temp dir inside it; move in only files whose sha256
    is one of the lock's hashes, each by an atomic rename. A failed download changes nothing
    in the cache; a good file replaces a damaged entry of the same name only once verified.

    The files found on this machine or at a known URL are fetched side by side
    (:mod:`~reprobuild.locks.parfetch`); pip downloads the rest, as before."""
    have = set(_hash_index(folder).values())
    # Only what the cache lacks (markers included: evaluated for the target). The lock pins
    # every dependency, so each is fetched on its own.
    wanted = replace(
        lock,
        requirements=tuple(
            r for r in lock.requirements if not any(h.split(":", 1)[1] in have for h in r.hashes)
        ),
    )
    allowed = {h.split(":", 1)[1] for r in lock.requirements for h in r.hashes}
    groups = _index_groups(wanted)
    problem = fetchnet.probe_indexes(_index_needs(groups), fetchnet.probe_timeout())
    if problem is not None:
        raise WheelError(
            f"cannot fetch the locked wheels for {target.key}: {problem}",
            hint="check the network to that host (a proxy: HTTPS_PROXY), or relock from an "
            "index this machine reaches",
        )
    leftovers.reap_dir(folder, _DOWNLOAD_PREFIX)
    staging = Path(tempfile.mkdtemp(prefix=f"{_DOWNLOAD_PREFIX}{leftovers.owner()}-", dir=folder))
    log(f"fetching {len(wanted.requirements)} locked wheels for {target.key}")
    try:
        rest = _fetch_parallel(wanted, target, folder, staging, log, show)
        if rest.requirements:
            log(f"pip downloads the {len(rest.requirements)} not found here or at a known URL")
        for group in _index_groups(rest) if rest.requirements else []:
            _pip_download(group, target, staging, log, show.one)
            _keep_checked(staging, folder, allowed)
    finally:
        shutil.rmtree(staging, ignore_errors=True)
    shutil.rmtree(pip_cache(), ignore_errors=True)  # all in the wheel cache now


@dataclass(frozen=True)
class Shows:
    """The progress displays of a fetch: pip's (one file at a time) and the parallel one."""

    one: Show
    many: parfetch.ShowMany


def _fetch_parallel(
    lock: Lock, target: Target, folder: Path, staging: Path, log: Log, show: Shows
) -> Lock:
    """Fetch side by side every wanted wheel found on this machine or at a known URL
    (:mod:`~reprobuild.locks.parfetch`); ``lock`` with what is left for pip."""
    threads = fetchnet.fetch_threads()
    environment = Selection(target.python_version, target.machine, target.glibc or (2, 17))
    ranks = parfetch.target_ranks(target.python_version, target.abi, target.platforms())
    planned = parfetch.plan(lock, lock.requirements, environment, ranks=ranks, threads=threads)
    if planned.jobs:
        where = lambda r: f"{lock.path}:{r.line}" if r.line else str(lock.path)  # noqa: E731
        try:
            got = parfetch.fetch(
                planned.jobs, folder, staging, where=where, threads=threads, show=show.many,
                log=log,
            )  # fmt: skip
            _note_checked(folder, got)
        except parfetch.FetchFailed as exc:
            _note_checked(folder, exc.kept)
            raise WheelError(
                f"cannot fetch the locked wheels for {target.key}: {exc.message}", hint=exc.hint
            ) from None
    return replace(lock, requirements=planned.unlocated)


def _note_checked(folder: Path, checked: dict[Path, str]) -> None:
    """Record files just brought into the cache, each with the sha256 taken as its bytes
    streamed, in the cache's index at the one fixed time (:func:`_hash_index` then trusts
    them, as it trusts the files it hashed itself, instead of reading them all again)."""
    if not checked:
        return
    index_path = folder / ".index.json"
    try:
        old = jsonload.read_json_file(index_path, str(index_path))
    except (OSError, ReprobuildError):
        old = {}
    entries = dict(old) if isinstance(old, dict) else {}
    for path, digest in checked.items():
        try:
            os.utime(path, ns=(CACHED_MTIME_NS, CACHED_MTIME_NS))
            st = path.stat()
        except OSError:
            continue  # hashed again by the next look at the cache
        entries[path.name] = [st.st_size, st.st_mtime_ns, digest]
    write_atomic(index_path, json.dumps(entries, sort_keys=True))


def _keep_checked(staging: Path, folder: Path, allowed: set[str]) -> None:
    """Move each file of ``staging`` whose sha256 the lock allows into the cache (a rename)."""
    for path in sorted(staging.iterdir()):
        if path.is_file() and not path.is_symlink() and sha256_file(path) in allowed:
            os.replace(path, folder / path.name)


def pip_cache() -> Path:
    """pip's HTTP cache for the fetch (reprobuild's, not the host's): it keeps what a failed
    fetch downloaded, and is emptied once a fetch has put everything in the wheel cache."""
    return cache_root() / "pip-http"


def _index_groups(lock: Lock) -> list[Lock]:
    """``lock`` split by the index its packages come from: a native lock's package
    (:attr:`Requirement.index`) is fetched from its own index alone (an explicit index serves
    only the packages pinned to it, and no other index is asked for them); the others from
    every index of the lock, as pip does. A ``file:`` index is also read as a folder of wheels
    (uv's flat index). The local simple indexes of ``REPROBUILD_LOCAL_INDEXES`` are asked
    beside PyPI (or the lock's default index), never beside an explicit one."""
    by_index: dict[str | None, list[Requirement]] = {}
    for req in lock.requirements:
        by_index.setdefault(req.index, []).append(req)
    local = tuple(fetchnet.local_indexes())
    out: list[Lock] = []
    for index, reqs in by_index.items():
        options = lock.options
        if index is not None:
            flat = (index,) if index.startswith("file:") else ()
            options = IndexOptions(index_url=index, find_links=(*options.find_links, *flat))
        if index is None or index.rstrip("/") == PYPI_SIMPLE:  # a PyPI mirror on disk
            extra = (*options.extra_index_urls, *local)
            options = replace(options, extra_index_urls=extra)
        out.append(replace(lock, requirements=tuple(reqs), options=options))
    return out


def _index_needs(groups: list[Lock]) -> dict[str, str]:
    """Each index the fetch will ask (PyPI where a group names none), with the first package
    that needs it: the first of its group with no wheel of its name and version in a local
    wheel folder (an air-gapped host's folder serves it; pip checks its hash)."""
    needs: dict[str, str] = {}
    for group in groups:
        local = _local_wheel_names(group)
        first = next(
            (
                r.name
                for r in group.requirements
                if not any(_wheel_of(n, r.name, r.version) for n in local)
            ),
            None,
        )
        if first is None:
            continue
        options = group.options
        for index in (options.index_url or PYPI_SIMPLE, *options.extra_index_urls):
            needs.setdefault(index, first)
    return needs


def _local_wheel_names(lock: Lock) -> list[str]:
    """The wheel file names in the local folders the fetch reads (the lock's ``--find-links``
    paths, ``REPROBUILD_FIND_LINKS``)."""
    names: list[str] = []
    for link in (*lock.options.find_links, *fetchnet.find_links()):
        if not link.startswith(("/", "file:///")):
            continue
        with contextlib.suppress(OSError):
            names += [p.name for p in Path(link.removeprefix("file://")).glob("*.whl")]
    return names


def wheel_folder(target: Target) -> Path:
    """The cache's folder for one target's wheels."""
    return cache_root() / "wheels" / target.key


def fetch_wheels(
    lock: Lock,
    target: Target,
    dest: Path,
    *,
    log: Log = print,
    bar: TextIO | None = None,
    every: float = 10.0,
) -> list[Path]:
    """Fill ``dest`` with exactly the wheels the lock pins for ``target``; return their paths.

    The download's progress (per file and in total, bytes and rate) is a live bar on ``bar``
    where that is a terminal, else plain lines through ``log``: one per file fetched and a
    total every ``every`` seconds (:class:`~reprobuild._util.progress.Transfers`)."""
    folder = wheel_folder(target)
    # A package built from its sdist has no wheel to fetch (fetch_sources brings the sdist).
    lock = for_target(replace(lock, requirements=lock.wheel_requirements), target)

    def show(count: int) -> Transfers:
        return Transfers(log, count=count, bar=bar, every=every)

    def many(count: int) -> Parallel:
        return Parallel(log, count=count, bar=bar, every=every)

    try:
        return _fetch_wheels(lock, target, folder, dest, log, Shows(show, many))
    except OSError as exc:
        where = exc.filename or folder
        raise WheelError(
            f"cannot use the wheel cache {str(where)!r}: {exc.strerror or exc}",
            hint="make it writable, or point XDG_CACHE_HOME (or REPROBUILD_CACHE_DIR) elsewhere",
        ) from None


def for_target(lock: Lock, target: Target) -> Lock:
    """``lock`` as pip must fetch it for ``target``. pip evaluates a requirement's marker for
    the interpreter that runs it, whatever ``--platform`` says: for a target of another machine
    (``--platform linux/arm64`` on an x86-64 host) the markers are evaluated here, for the
    target, and pip gets the requirements that hold, without their markers (each one without a
    wheel is then missing, and named). The host's own machine: ``lock`` as it is."""
    if target.machine == _host_machine():
        return lock
    env = Selection(target.python_version, target.machine, target.glibc or (2, 17))
    kept = tuple(replace(r, marker=None) for r in lock.requirements if env.marker_holds(r.marker))
    return replace(lock, requirements=kept)


def _host_machine() -> str:
    machine = platform.machine().lower()
    return {"amd64": "x86_64", "arm64": "aarch64"}.get(machine, machine)


def _fetch_wheels(
    lock: Lock, target: Target, folder: Path, dest: Path, log: Log, show: Shows
) -> list[Path]:
    folder.mkdir(parents=True, exist_ok=True)
    needed = frozenset(h.split(":", 1)[1] for r in lock.requirements for h in r.hashes)
    # the direct-URL wheels are fetched from their URLs, not by pip from the indexes
    indexed = replace(lock, requirements=tuple(r for r in lock.requirements if r.url is None))
    if _unmatched(indexed, _hash_index(folder, needed=needed)):
        _download_into_cache(indexed, target, folder, log, show)
    elif indexed.requirements:
        log(f"all {len(indexed.requirements)} locked wheels are cached for {target.key}")
    if len(indexed.requirements) < len(lock.requirements):
        _fetch_direct(lock, target, folder, log)
    by_hash = {digest: folder / name for name, digest in _hash_index(folder).items()}
    dest.mkdir(parents=True, exist_ok=True)
    chosen: list[Path] = []
    missing: list[str] = []
    for requirement in lock.requirements:
        hexes = _sha256_hexes(requirement)
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


def _fetch_direct(lock: Lock, target: Target, folder: Path, log: Log) -> None:
    """The lock's direct-URL wheels the cache lacks, fetched into it from their URLs."""
    environment = Selection(target.python_version, target.machine, target.glibc or (2, 17))
    fetch_direct(
        lock.requirements,
        target_tags(target.python_version, target.abi, target.platforms()),
        target.key,
        folder,
        set(_hash_index(folder).values()),
        where=lambda r: f"{lock.path}:{r.line}" if r.line else str(lock.path),
        holds=environment.marker_holds,
        log=log,
    )


_SOURCE_PREFIX = ".fetch-"


def fetch_sources(lock: Lock, dest: Path, *, log: Log = print) -> dict[str, Path]:
    """Put each source archive ``lock`` builds (:attr:`Lock.sources`) into ``dest``, its
    sha256 checked: from the cache (``sources/`` beside the wheels'), else fetched from its
    URL (or copied from its local path) into the cache first. Return name -> file."""
    folder = cache_root() / "sources"
    out: dict[str, Path] = {}
    try:
        folder.mkdir(parents=True, exist_ok=True)
        dest.mkdir(parents=True, exist_ok=True)
        for req in lock.sources:
            source = req.source
            assert source is not None
            cached = folder / f"{source.hex}-{source.filename}"
            if not (cached.is_file() and _verified(cached, source.hex)):
                _fetch_source(lock, req.name, req.version, req.line, cached, log)
            target = dest / source.filename
            target.unlink(missing_ok=True)
            try:
                os.link(cached, target)
            except OSError:
                shutil.copy2(cached, target)
            out[req.name] = target
    except OSError as exc:
        raise WheelError(
            f"cannot use the source cache {str(exc.filename or folder)!r}: {exc.strerror or exc}",
            hint="make it writable, or point XDG_CACHE_HOME (or REPROBUILD_CACHE_DIR) elsewhere",
        ) from None
    return out


_INDEX_PAGE_MAX = 32 << 20  # a simple page of a project with thousands of files is a few MB


class _Links(html.parser.HTMLParser):
    """The ``href`` of every anchor of a simple index page (PEP 503)."""

    def __init__(self) -> None:
        super().__init__()
        self.hrefs: list[str] = []

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        if tag == "a":
            href = dict(attrs).get("href")
            if href:
                self.hrefs.append(href)


def _index_links(index: str, project: str) -> list[str] | None:
    """The links (absolute, fragments kept) on ``project``'s page of the simple index
    ``index``, read as PEP 503 HTML; None when the page cannot be read. A link of a scheme
    the host does not fetch from, or from a remote page to a ``file:`` URL, is left out."""
    import urllib.request

    page = index.rstrip("/") + f"/{canonicalize_name(project)}/"
    # a file: index is a tree of folders, each page its index.html (as pip reads one)
    read = page + "index.html" if urlsplit(page).scheme == "file" else page
    try:
        with urllib.request.urlopen(read, timeout=60) as response:
            body = response.read(_INDEX_PAGE_MAX + 1)
    except (OSError, ValueError):
        return None  # not on this index (or not reachable)
    links = _Links()
    links.feed(body[:_INDEX_PAGE_MAX].decode("utf-8", errors="replace"))
    out: list[str] = []
    for href in links.hrefs:
        url = urljoin(page, href)
        bare = url.split("#", 1)[0]
        remote_page_to_file = urlsplit(page).scheme != "file" and bare.startswith("file:")
        if not remote_page_to_file and index_url_problem(bare, what="a link") is None:
            out.append(url)
    return out


def _link_name(url: str) -> str:
    return unquote(urlsplit(url.split("#", 1)[0]).path.rsplit("/", 1)[-1])


def _link_sha256(url: str) -> str | None:
    """The ``#sha256=<hex>`` a simple page gives a link (PEP 503), None where it gives none."""
    fragment = urlsplit(url).fragment
    key, _, value = fragment.partition("=")
    value = value.lower()
    return value if key == "sha256" and re.fullmatch(r"[0-9a-f]{64}", value) else None


def _lock_indexes(lock: Lock, first: str | None = None) -> list[str]:
    """The indexes a lock's package is looked up on, in order: ``first``, then the lock's
    own (PyPI where it names none, as pip does)."""
    wanted = [first, lock.options.index_url or PYPI_SIMPLE, *lock.options.extra_index_urls]
    return list(dict.fromkeys(i for i in wanted if i))


def _find_on_index(lock: Lock, name: str, version: str, source: SourceArchive) -> str:
    """Where the sdist a lock names but does not locate (poetry.lock, pdm.lock, and the sdists
    found for hashed requirements and Pipfile.lock by :func:`locate_sdists`) lies: its
    project's page on the simple index the record names, then on the lock's other indexes,
    read as PEP 503 HTML. Only a link of a scheme the host may fetch from counts (its bytes
    are checked against the lock's sha256 after)."""
    wanted = [source.index, lock.options.index_url, *lock.options.extra_index_urls]
    indexes = list(dict.fromkeys(i for i in wanted if i))
    for index in indexes:
        for url in _index_links(index, name) or []:
            if _link_name(url) == source.filename:
                return url.split("#", 1)[0]
    raise WheelError(
        f"the sdist {source.filename} of {name} {version} is on none of the lock's indexes "
        f"({', '.join(indexes)})",
        hint="check the network to the lock's index, or that the index still has the file",
    )


PYPI_SIMPLE = "https://pypi.org/simple"


# Set to 0 (or off/no/false): init and build-lock never read an index to tell a hash-only
# lock's sdists from its wheels (an air-gapped host; the unit tests). Such a package is then
# fetched as a wheel, and the fetch says there is none, as before.
LOOKUP_VAR = "REPROBUILD_SDIST_LOOKUP"
_LOOKUP_THREADS = 8


def sdist_lookup_enabled() -> bool:
    return os.environ.get(LOOKUP_VAR, "1").strip().lower() not in ("0", "off", "no", "false")


def locate_sdists(lock: Lock, selection: Selection, *, log: Log = print) -> Lock:
    """``lock`` (a hashed requirements file or a Pipfile.lock, which give hashes but no file
    names) with each package that has no wheel for ``selection`` turned into the sdist to
    build: the file on its index whose sha256 is one of the package's locked hashes (a
    :class:`~reprobuild.locks.records.SourceArchive` with that index; the host fetches and
    checks it later, as it does poetry.lock's). Other formats come back as they are.

    No index is read for a package with a fitting wheel in the host's wheel cache (by sha256,
    as the wheel fetch itself decides), nor for one whose marker leaves it out, nor at all
    with ``REPROBUILD_SDIST_LOOKUP=0``. Otherwise the package's simple page is read (a few at
    once): a locked hash on a wheel that fits keeps the package a wheel; on an sdist (and on
    no fitting wheel) makes it one to build; on no file there, one ``file:line`` line naming
    the package and what is allowed. An index that cannot be read, or a lock with
    ``--find-links`` folders the file may be in, leaves the package a wheel for the fetch to
    judge."""
    if lock.format not in HASH_ONLY_FORMATS or not sdist_lookup_enabled():
        return lock
    target = Target(".".join(selection.python.split(".")[:2]), selection.machine, selection.glibc)
    folder = wheel_folder(target)
    try:
        cached = set(_hash_index(folder).values()) if folder.is_dir() else set()
    except (OSError, ReprobuildError):
        cached = set()  # an unreadable cache holds nothing: the index decides
    todo: list[Requirement] = []
    for req in lock.requirements:
        hexes = _sha256_hexes(req)
        if (
            req.source is None
            and req.url is None
            and selection.marker_holds(req.marker)
            and not hexes & cached
        ):
            todo.append(req)
    if not todo:
        return lock
    import concurrent.futures

    firsts = _pipfile_indexes(lock)
    with concurrent.futures.ThreadPoolExecutor(min(_LOOKUP_THREADS, len(todo))) as pool:
        found = list(
            pool.map(lambda r: _sdist_by_hash(lock, r, selection, firsts.get(r.name)), todo)
        )
    sources: dict[str, SourceArchive] = {}
    for req, result in zip(todo, found, strict=True):
        if isinstance(result, LockfileError):
            raise result  # the first in the lock's order
        if result is not None:
            log(f"{req.name} {req.version}: no wheel for {selection.label}; building it from "
                f"{result.filename}")  # fmt: skip
            sources[req.name] = result
    if not sources:
        return lock
    return replace(
        lock,
        requirements=tuple(
            replace(r, hashes=(sources[r.name].sha256,), source=sources[r.name])
            if r.name in sources
            else r
            for r in lock.requirements
        ),
    )


def _pipfile_indexes(lock: Lock) -> dict[str, str]:
    """A Pipfile.lock's index of each package (its ``index`` key, by ``_meta.sources``' name),
    read again from the file the reader checked; empty for other formats."""
    if lock.format != "pipfile":
        return {}
    try:
        doc = json.loads(lock.path.read_text(encoding="utf-8-sig"))
        urls = {s["name"]: s["url"] for s in doc["_meta"]["sources"]}
        return {
            canonicalize_name(name): urls[entry["index"]]
            for section, entries in doc.items()
            if section != "_meta" and isinstance(entries, dict)
            for name, entry in entries.items()
            if isinstance(entry, dict) and entry.get("index") in urls
        }
    except (OSError, ValueError, KeyError, TypeError):
        return {}  # the lock's own order then


def _sdist_by_hash(
    lock: Lock, req: Requirement, selection: Selection, first: str | None = None
) -> SourceArchive | LockfileError | None:
    """The sdist of ``req`` whose sha256 is locked; None where a fitting wheel's is (or the
    index cannot tell); the refusal where the index has no file with a locked hash. ``first``:
    the index the lock names for this package, read before the lock's others."""
    hexes = _sha256_hexes(req)
    indexes = _lock_indexes(lock, first)
    other_wheels: list[str] = []
    read = False
    for index in indexes:
        links = _index_links(index, req.name)
        if links is None:
            continue
        read = True
        sdists = _page_sdists(links, req, hexes, selection, other_wheels)
        if sdists is None:
            return None
        found = _locked_sdist(sdists, req, hexes, index)
        if found is not None:
            return found
    if not read or _in_find_links(lock, req, hexes) is not False:
        return None  # nothing known here: the wheel fetch says what is wrong, as before
    return _no_locked_file(lock, req, selection, indexes, other_wheels)


def _page_sdists(
    links: list[str],
    req: Requirement,
    hexes: set[str],
    selection: Selection,
    other_wheels: list[str],
) -> list[tuple[str, str | None]] | None:
    """The sdists on an index page that may be ``req``'s locked one (URL, sha256 or None where
    the page gives none); None where the page has a fitting wheel pip's fetch takes. Wheels
    with a locked hash for other platforms are added to ``other_wheels``."""
    sdists: list[tuple[str, str | None]] = []
    for url in links:
        filename, digest = _link_name(url), _link_sha256(url)
        if not filename.endswith(".whl"):
            if SOURCE_ARCHIVE_RE.fullmatch(filename) and (digest is None or digest in hexes):
                sdists.append((url.split("#", 1)[0], digest))
            continue
        fits = selection.wheel_fits(filename)
        if digest in hexes and fits:
            return None
        if digest in hexes:
            other_wheels.append(filename)
        elif digest is None and fits and _wheel_of(filename, req.name, req.version):
            return None  # an unhashed link: pip's download checks its hash
    return sdists


def _locked_sdist(
    sdists: list[tuple[str, str | None]], req: Requirement, hexes: set[str], index: str
) -> SourceArchive | None:
    """The first of ``sdists`` that is ``req``'s and has a locked sha256 (read from the file's
    bytes where the page gives no hash)."""
    for url, digest in sdists:
        filename = _link_name(url)
        if not _sdist_of(filename, req.name, req.version):
            continue
        if digest is None:  # the page gives no hash: the file's bytes tell
            digest = _url_sha256(url)
            if digest not in hexes:
                continue
        return SourceArchive(filename=filename, sha256=f"sha256:{digest}", index=index)
    return None


def _no_locked_file(
    lock: Lock, req: Requirement, selection: Selection, indexes: list[str], other_wheels: list[str]
) -> LockfileError:
    # kept short: the lock's path (file:line) and the index come first, both of any length
    what = (
        f" (its locked wheels are for other platforms: {quoted(sorted(other_wheels)[0], 50)}"
        f"{f' and {len(other_wheels) - 1} more' if len(other_wheels) > 1 else ''})"
        if other_wheels
        else ""
    )
    return LockfileError(
        lock.path,
        req.line or None,
        f"package {req.name} {req.version}: no wheel for {selection.label} and no sdist with a "
        f"locked sha256 on {quoted(', '.join(indexes), 60)}{what}; allowed: a wheel that "
        "fits or an sdist (.tar.gz, .zip) with a locked hash",
        hint="relock with hashes of a wheel for this platform or of the package's sdist",
    )


def locked_files(lock: Lock, req: Requirement) -> list[str] | None:
    """The file names (wheels and sdists) on the lock's indexes whose sha256, as the simple
    page gives it (PEP 503 ``#sha256=``), is one of ``req``'s locked hashes: what a hash-only
    lock's files are, read as :func:`locate_sdists` reads them. None when no page was read."""
    hexes = _sha256_hexes(req)
    found: list[str] = []
    read = False
    for index in _lock_indexes(lock):
        links = _index_links(index, req.name)
        if links is None:
            continue
        read = True
        found += [_link_name(u) for u in links if _link_sha256(u) in hexes]
    return sorted(set(found)) if read else None


def _in_find_links(lock: Lock, req: Requirement, hexes: set[str]) -> bool | None:
    """Whether a file of ``req`` with a locked hash is in the --find-links folders pip's fetch
    also reads (the lock's and ``REPROBUILD_FIND_LINKS``); None where one is a URL (unknown)."""
    links = [*lock.options.find_links, *fetchnet.find_links()]
    prefix = req.name.replace("-", "_")
    for link in links:
        folder = Path(link.removeprefix("file://")) if link.startswith(("/", "file:///")) else None
        if folder is None:
            return None
        try:
            names = [p for p in folder.iterdir() if p.is_file()]
        except OSError:
            continue
        for path in names:
            stem = canonicalize_name(path.name.split("-", 1)[0]).replace("-", "_")
            if stem == prefix and _verified_any(path, hexes):
                return True
    return False


def _verified_any(path: Path, hexes: set[str]) -> bool:
    try:
        return sha256_file(path) in hexes
    except OSError:
        return False


def _wheel_of(filename: str, name: str, version: str) -> bool:
    parts = filename[:-4].split("-")
    try:
        return canonicalize_name(parts[0]) == name and Version(parts[1]) == Version(version)
    except (IndexError, InvalidVersion):
        return False


def _sdist_of(filename: str, name: str, version: str) -> bool:
    """``filename`` is an sdist of ``name`` ``version`` (PEP 625, or the older spelling)."""
    stem = filename.removesuffix(".tar.gz").removesuffix(".zip")
    sdist_name, _, sdist_version = stem.rpartition("-")
    try:
        return canonicalize_name(sdist_name) == name and Version(sdist_version) == Version(version)
    except InvalidVersion:
        return False


def _url_sha256(url: str) -> str | None:
    """The sha256 of the file at ``url`` (streamed, nothing kept); None when unreadable."""
    import urllib.request

    digest = hashlib.sha256()
    try:
        with urllib.request.urlopen(url, timeout=60) as response:
            for block in iter(lambda: response.read(1 << 20), b""):
                digest.update(block)
    except (OSError, ValueError):
        return None
    return digest.hexdigest()


def _fetch_source(lock: Lock, name: str, version: str, line: int, cached: Path, log: Log) -> None:
    """Fetch one source archive into a temp file beside ``cached``; renamed in only when its
    sha256 is the locked one (a mismatch is one line naming both, nothing kept)."""
    import urllib.request

    req = next(r for r in lock.sources if r.name == name)
    source = req.source
    assert source is not None
    fd, tmp_name = tempfile.mkstemp(
        prefix=f"{_SOURCE_PREFIX}{leftovers.owner()}-", dir=cached.parent
    )
    tmp = Path(tmp_name)
    try:
        with os.fdopen(fd, "wb") as out:
            if source.local is not None:
                with source.local.open("rb") as fh:
                    shutil.copyfileobj(fh, out)
            else:
                url = source.url or _find_on_index(lock, name, version, source)
                log(f"fetching {source.filename}")
                try:
                    with urllib.request.urlopen(url, timeout=60) as response:
                        shutil.copyfileobj(response, out)
                except (OSError, ValueError) as exc:
                    raise WheelError(
                        f"cannot fetch the sdist of {name} {version} from {url}: {exc}",
                        hint="check the network to the lock's index, and that the file is there",
                    ) from None
        got = sha256_file(tmp)
        if got != source.hex:
            where = f"{lock.path}:{line}" if line else str(lock.path)
            raise WheelError(
                f"{where}: the downloaded {source.filename} has sha256 {got}, which is not the "
                f"lock's {source.hex}",
                hint="the lock is wrong or the file was tampered with; regenerate the lock and "
                "compare",
            )
        os.replace(tmp, cached)
    finally:
        tmp.unlink(missing_ok=True)
