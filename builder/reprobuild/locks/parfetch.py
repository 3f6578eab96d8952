"""The locked wheels fetched side by side, each checked as its bytes arrive.

For each requirement the cache lacks (and whose marker holds for the target), one wheel is
chosen among the files whose sha256 the lock pins: the one whose tags rank best for the target
(:mod:`packaging.tags`' order, as pip chooses), found

1. **on this machine first**: a wheel of its name and version in a ``REPROBUILD_FIND_LINKS``
   folder (or the lock's own ``--find-links`` folder), or listed by a ``REPROBUILD_LOCAL_INDEXES``
   page (only for a package taken from PyPI or the lock's default index, never one pinned to
   an explicit index), or in a ``file:`` index the package is pinned to; copied, not fetched;
2. **at the URL the lock gives it** (uv.lock, pylock.toml, pdm.lock:
   :func:`~reprobuild.locks.lockurls.native_wheel_urls`);
3. **on its index's page** (PEP 691 JSON, else PEP 503 HTML), matched by the lock's sha256:
   the package's own index alone when the lock pins it to one, else the lock's indexes in
   order.

What none of these finds is left to ``pip download`` (:func:`fetch` returns it), as before.

The files are then fetched by a pool of ``REPROBUILD_FETCH_THREADS`` threads (default 8), each
into a temporary file in the run's staging folder, hashed as it streams. A connection cut off
mid-file is resumed where it stopped (an HTTP ``Range`` request; a server that answers with
the whole file again is read from the start), at most :data:`RESUMES` times; the hash is of
the whole file either way. A failure of the moment (a DNS server's "try again", a connection
reset, HTTP 408/429/5xx) is tried again the same way, after half a second, then one, then two;
any other (HTTP 404, a name that does not resolve, a refused connection) fails the file at
once. A file is renamed into the cache only once its sha256 is the
lock's; every file checked is kept even when another fails, and the failures come back as one
``error:`` line naming the first (the package, the host, the cause) and how many more.
"""

from __future__ import annotations

import concurrent.futures
import hashlib
import http.client
import os
import socket
import threading
import urllib.error
import urllib.request
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import IO
from urllib.parse import urljoin, urlsplit

from packaging.tags import Tag, compatible_tags, cpython_tags
from packaging.utils import InvalidWheelFilename, canonicalize_name, parse_wheel_filename
from packaging.version import InvalidVersion, Version

from reprobuild._util.progress import Parallel
from reprobuild.errors import ReprobuildError
from reprobuild.locks import fetchnet
from reprobuild.locks.lockfile import Lock
from reprobuild.locks.lockurls import index_files, local_path, native_wheel_urls
from reprobuild.locks.native import Selection
from reprobuild.locks.records import Requirement
from reprobuild.locks.urlwheels import MAX_BYTES, TIMEOUT_S, wheel_filename, wheel_url_problem

Log = Callable[[str], None]
ShowMany = Callable[[int], Parallel]

PYPI_SIMPLE = "https://pypi.org/simple"
# How many times a file cut off mid-transfer is resumed before it counts as failed.
RESUMES = 3
_BLOCK = 1 << 20


class FetchFailed(ReprobuildError):
    """One or more locked wheels could not be fetched; ``kept``: the files checked and kept,
    each with its sha256."""

    def __init__(self, message: str, *, hint: str, kept: dict[Path, str]) -> None:
        super().__init__(message, hint=hint)
        self.kept = kept


@dataclass(frozen=True)
class Job:
    """One wheel to bring into the cache: for ``req``, the file ``filename`` at ``url``
    (``http(s):`` or a local ``file:``), whose bytes must have sha256 ``sha256``."""

    req: Requirement
    filename: str
    url: str
    sha256: str


@dataclass(frozen=True)
class Plan:
    """What :func:`plan` found: the jobs (local ones first), and the requirements it found
    no file for (left to pip)."""

    jobs: tuple[Job, ...]
    unlocated: tuple[Requirement, ...]


def target_ranks(python_version: str, abi: str, platforms: list[str]) -> dict[Tag, int]:
    """The tags a wheel may carry for the target, each with its rank (0: the best), in
    :mod:`packaging.tags`' order: the ones ``pip download`` accepts for the same
    ``--python-version``, ``--abi`` (``abi``, abi3, none) and ``--platform`` options."""
    major, minor = (int(p) for p in python_version.split(".")[:2])
    ranks: dict[Tag, int] = {}
    for tag in (
        *cpython_tags((major, minor), [abi, "abi3", "none"], platforms),
        *compatible_tags((major, minor), abi, platforms),
    ):
        ranks.setdefault(tag, len(ranks))
    return ranks


def _rank(filename: str, req: Requirement, ranks: dict[Tag, int]) -> int | None:
    """The best rank of ``filename``'s tags when it is a wheel of ``req`` that the target
    installs; None otherwise."""
    try:
        name, version, _, tags = parse_wheel_filename(filename)
        if name != canonicalize_name(req.name) or version != Version(req.version):
            return None
    except (InvalidWheelFilename, InvalidVersion):
        return None
    found = [ranks[t] for t in tags if t in ranks]
    return min(found) if found else None


def _best(
    req: Requirement, files: Iterable[tuple[str, str, str]], ranks: dict[Tag, int]
) -> Job | None:
    """The job for the best-ranked of ``files`` (name, URL, sha256 hex) that ``req`` pins."""
    hexes = sha256_hexes(req)
    fits = [
        (rank, Job(req, name, url, digest))
        for name, url, digest in files
        if digest in hexes and (rank := _rank(name, req, ranks)) is not None
    ]
    return min(fits, key=lambda pair: pair[0])[1] if fits else None


def sha256_hexes(req: Requirement) -> set[str]:
    return {h.split(":", 1)[1] for h in req.hashes if h.startswith("sha256:")}


# ------------------------------------------------------------------------------- planning


def plan(lock: Lock, requirements: Iterable[Requirement], selection: Selection, *,
         ranks: dict[Tag, int], threads: int) -> Plan:  # fmt: skip
    """A job for each of ``requirements`` (those the cache lacks) whose marker holds for
    ``selection``: from this machine first, else a URL (module doc)."""
    todo = [r for r in requirements if r.url is None and selection.marker_holds(r.marker)]
    jobs: dict[str, Job] = {}
    for req in todo:
        job = _local_job(lock, req, ranks)
        if job is not None:
            jobs[req.name] = job
    remote = [r for r in todo if r.name not in jobs]
    if remote:
        jobs.update(_lock_url_jobs(lock, remote, selection, ranks))
    lookup = [r for r in remote if r.name not in jobs]
    if lookup:
        jobs.update(_index_jobs(lock, lookup, ranks, threads))
    local = [jobs[r.name] for r in todo if r.name in jobs and jobs[r.name].url.startswith("file:")]
    others = [jobs[r.name] for r in todo if r.name in jobs and jobs[r.name] not in local]
    return Plan(tuple(local + others), tuple(r for r in todo if r.name not in jobs))


def _lock_url_jobs(
    lock: Lock, reqs: list[Requirement], selection: Selection, ranks: dict[Tag, int]
) -> dict[str, Job]:
    """The jobs for ``reqs`` at the URLs the lock's file gives their wheels (module doc, 2.)."""
    urls = native_wheel_urls(lock, selection)
    files = [(_name(url), url, digest) for digest, url in urls.items()]
    out: dict[str, Job] = {}
    for req in reqs:
        job = _best(req, files, ranks) if files else None
        if job is not None:
            out[req.name] = job
    return out


def _index_jobs(
    lock: Lock, reqs: list[Requirement], ranks: dict[Tag, int], threads: int
) -> dict[str, Job]:
    """The jobs for ``reqs`` found on their indexes' pages, ``threads`` pages at once."""
    opener = fetchnet.opener()
    with concurrent.futures.ThreadPoolExecutor(min(threads, len(reqs))) as pool:
        found = list(pool.map(lambda r: _index_job(lock, r, ranks, opener), reqs))
    return {r.name: j for r, j in zip(reqs, found, strict=True) if j is not None}


def _name(url: str) -> str:
    return wheel_filename(url)


def _local_job(lock: Lock, req: Requirement, ranks: dict[Tag, int]) -> Job | None:
    """A wheel of ``req`` on this machine with a locked sha256 (module doc, 1.)."""
    folders = [*lock.options.find_links, *fetchnet.find_links()]
    indexes: list[str] = []
    if req.index is None or req.index.rstrip("/") == PYPI_SIMPLE:
        own = (lock.options.index_url or "", *lock.options.extra_index_urls)
        indexes = [*(i for i in own if i.startswith("file:")), *fetchnet.local_indexes()]
    elif req.index.startswith("file:"):  # a flat folder or a simple index, as pip reads one
        folders, indexes = [*folders, req.index], [req.index]
    files: list[tuple[str, str, str]] = []
    for index in indexes:
        for item in index_files(index, req.name) or []:
            path = local_path(item.url)
            if path is not None and _rank(item.filename, req, ranks) is not None:
                digest = item.sha256 or _file_sha256(path)
                files.append((item.filename, item.url, digest or ""))
    for folder in folders:
        files += _folder_files(folder, req, ranks)
    return _best(req, files, ranks)


def _folder_files(link: str, req: Requirement, ranks: dict[Tag, int]) -> list[tuple[str, str, str]]:
    """The wheels of ``req`` (name, version, tags that fit) in a local folder, hashed."""
    folder = local_path(link) if link.startswith("file:") else Path(link)
    if folder is None or not folder.is_absolute():
        return []  # a URL --find-links page: pip's to read
    try:
        paths = [p for p in folder.glob("*.whl") if _rank(p.name, req, ranks) is not None]
    except OSError:
        return []
    out: list[tuple[str, str, str]] = []
    for path in sorted(paths):
        digest = _file_sha256(path)
        if digest is not None and path.is_file():
            out.append((path.name, path.resolve().as_uri(), digest))
    return out


def _file_sha256(path: Path) -> str | None:
    digest = hashlib.sha256()
    try:
        with path.open("rb") as fh:
            while block := fh.read(_BLOCK):
                digest.update(block)
    except OSError:
        return None
    return digest.hexdigest()


def _index_job(
    lock: Lock, req: Requirement, ranks: dict[Tag, int], opener: urllib.request.OpenerDirector
) -> Job | None:
    """The file of ``req`` with a locked sha256 on its index's page (module doc, 3.)."""
    indexes = (
        [req.index]
        if req.index is not None
        else [lock.options.index_url or PYPI_SIMPLE, *lock.options.extra_index_urls]
    )
    for index in indexes:
        if index.startswith("file:"):
            continue  # read as a local source already
        files = index_files(index, req.name, opener)
        job = _best(req, ((f.filename, f.url, f.sha256 or "") for f in files or []), ranks)
        if job is not None:
            return job
    return None


# ------------------------------------------------------------------------------- fetching


def fetch(jobs: Iterable[Job], folder: Path, staging: Path, *, where: Callable[[Requirement], str],
          threads: int, show: ShowMany, log: Log) -> dict[Path, str]:  # fmt: skip
    """Bring each job's file into ``folder`` (the cache), ``threads`` at a time, through
    ``staging`` (a folder of this run's inside it); every file checked is kept. Each file
    brought in, with its sha256. Raise :class:`FetchFailed` naming the first failure (in
    ``jobs``' order) once all are done."""
    todo = list(jobs)
    if not todo:
        return {}
    with show(len(todo)) as progress:
        run = _Run(folder, staging, _Connections(), progress, where, threading.Event())
        try:
            results = _run_all(run, todo, threads)
        finally:
            run.conns.close()
        paths = {p: j.sha256 for p, j in zip(results, todo, strict=True) if isinstance(p, Path)}
        if len(paths) == len(results):
            log(progress.summary(len(paths), sum(p.stat().st_size for p in paths)))
    failed = [r for r in results if isinstance(r, str)]
    if failed:
        more = f" (and {len(failed) - 1} more failed)" if len(failed) > 1 else ""
        kept = len(results) - len(failed)
        raise FetchFailed(
            f"{failed[0]}{more}; {kept} checked file{'' if kept == 1 else 's'} kept in the cache",
            hint="check the network to that host (a proxy: HTTPS_PROXY), then fetch again: "
            "only what is missing is fetched",
            kept=paths,
        )
    return paths


@dataclass(frozen=True)
class _Run:
    """What every download of one fetch shares; ``stop`` set: the fetch was interrupted."""

    folder: Path
    staging: Path
    conns: _Connections
    progress: Parallel
    where: Callable[[Requirement], str]
    stop: threading.Event


def _run_all(run: _Run, todo: list[Job], threads: int) -> list[Path | str]:
    """Each job's result, ``threads`` at a time. Interrupted (Ctrl-C), the jobs not begun are
    cancelled and the ones in flight stop at their next block, nothing of them kept."""
    pool = concurrent.futures.ThreadPoolExecutor(min(threads, len(todo)))
    try:
        futures = [pool.submit(_fetch_one, job, run) for job in todo]
        return [f.result() for f in futures]
    except BaseException:
        run.stop.set()
        raise
    finally:
        pool.shutdown(wait=True, cancel_futures=True)


def _fetch_one(job: Job, run: _Run) -> Path | str:
    """The job's file checked and renamed into the cache, or why not (one line)."""
    progress, where = run.progress, run.where
    tmp = run.staging / f"{job.sha256}.part"
    progress.start(job.sha256, job.filename, None)
    try:
        with tmp.open("wb") as out:
            sink = _Sink(out, job, run)
            _copy(job, sink, run.conns)
            digest = sink.digest.hexdigest()
    except _Failed as exc:
        progress.drop(job.sha256)
        tmp.unlink(missing_ok=True)
        return str(exc)
    if digest != job.sha256:
        progress.drop(job.sha256)
        tmp.unlink(missing_ok=True)
        return (
            f"{where(job.req)}: the downloaded {job.filename} of {job.req.name}=="
            f"{job.req.version} has sha256 {digest}, which is not the lock's {job.sha256} "
            f"(from {_host(job.url)}); nothing of it was kept"
        )
    final = run.folder / job.filename
    os.replace(tmp, final)
    progress.finish(job.sha256)
    return final


class _Failed(Exception):
    """A file could not be fetched; the message is the whole line."""


class _Cut(Exception):
    """The transfer stopped for a reason worth another try (the message): the connection
    broke off before the whole file came, or the host failed for a moment (a DNS server's
    "try again", a reset, HTTP 429/5xx)."""


class _Sink:
    """Where a job's bytes go: the temp file and the running sha256 of all of it."""

    def __init__(self, out: IO[bytes], job: Job, run: _Run) -> None:
        self.out, self.job, self.progress, self.stop = out, job, run.progress, run.stop
        self.digest = hashlib.sha256()

    @property
    def size(self) -> int:
        return self.out.tell()

    def reset(self) -> None:
        """Drop what came so far (the server sends the whole file again)."""
        self.out.seek(0)
        self.out.truncate()
        self.digest = hashlib.sha256()
        self.progress.restart(self.job.sha256)

    def pour(self, source: IO[bytes]) -> None:
        """Append all of ``source``, hashed as it streams; refused past :data:`MAX_BYTES`."""
        while block := source.read(_BLOCK):
            if self.stop.is_set():
                raise _Failed(_line(self.job, "was not fetched: the fetch was interrupted"))
            if self.size + len(block) > MAX_BYTES:
                raise _Failed(
                    _line(self.job, f"sends more than {MAX_BYTES} bytes, the most a wheel may be")
                )
            self.digest.update(block)
            self.out.write(block)
            self.progress.add(self.job.sha256, len(block))


def _copy(job: Job, sink: _Sink, conns: _Connections) -> None:
    """Stream the job's file into ``sink``; resume a cut transfer (:data:`RESUMES` times)."""
    path = local_path(job.url)
    if path is not None:  # a local source: copied, checked as it is read
        try:
            with path.open("rb") as fh:
                sink.pour(fh)
        except OSError as exc:
            raise _Failed(_line(job, f"cannot be read ({exc.strerror or exc})")) from None
        return
    cuts = 0
    while True:
        try:
            _request(job, sink, conns)
            return
        except _Cut as exc:
            cuts += 1
            if cuts > RESUMES:
                raise _Failed(_line(job, f"{exc} ({cuts} tries)")) from None
            sink.stop.wait(_BACKOFF_S * 2 ** (cuts - 1))


_BACKOFF_S = 0.5  # the wait before the first new try; doubled for each next one
_TRANSIENT_HTTP = frozenset({408, 429, 500, 502, 503, 504})
_CUT = "broke the connection off"


def _transient(exc: BaseException) -> bool:
    """``exc`` (from opening a URL) is a failure of the moment, worth another try."""
    reason = getattr(exc, "reason", exc)
    if isinstance(reason, socket.gaierror):
        return reason.errno == socket.EAI_AGAIN
    return isinstance(reason, (ConnectionResetError, ConnectionAbortedError)) or isinstance(
        exc, http.client.RemoteDisconnected
    )


def _request(job: Job, sink: _Sink, conns: _Connections) -> None:
    """One request for the rest of the job's file (from what ``sink`` holds), or for the
    whole file again where the server ignores the range."""
    got = sink.size
    headers = {"Range": f"bytes={got}-"} if got else {}
    try:
        response = conns.open(job.url, headers)
    except _Refused as exc:
        raise _Failed(_line(job, str(exc))) from None
    except urllib.error.HTTPError as exc:
        exc.close()
        if exc.code == 416 and got:  # no such range (the file changed?): from the start
            sink.reset()
            raise _Cut(f"answers HTTP 416 for bytes {got}-") from None
        why = f"answers HTTP {exc.code} {exc.reason}"
        raise (_Cut(why) if exc.code in _TRANSIENT_HTTP else _Failed(_line(job, why))) from None
    except (OSError, ValueError, http.client.HTTPException) as exc:
        why = fetchnet.network_reason(exc, TIMEOUT_S)
        raise (_Cut(why) if _transient(exc) else _Failed(_line(job, why))) from None
    whole = False
    try:
        whole = _read(job, sink, response, got)
    finally:
        response.close()
        if not whole:  # bytes may be left on the connection: never reused
            conns.drop(response.geturl())


def _read(job: Job, sink: _Sink, response: http.client.HTTPResponse, got: int) -> bool:
    """Pour the answer into ``sink``; True once all of it came."""
    if got and not _resumes(response, got):
        sink.reset()
        got = 0
    length = response.headers.get("Content-Length")
    if length is not None and length.isdigit():
        sink.progress.expect(job.sha256, got + int(length))
    try:
        sink.pour(response)
    except (OSError, http.client.HTTPException) as exc:
        if sink.size > got or isinstance(exc, (http.client.IncompleteRead, ConnectionError)):
            raise _Cut(_CUT) from None
        raise _Failed(_line(job, fetchnet.network_reason(exc, TIMEOUT_S))) from None
    if length is not None and length.isdigit() and sink.size < got + int(length):
        raise _Cut(_CUT)
    return True


class _Refused(Exception):
    """A redirect to a URL the host may not fetch (the reason is the message)."""


class _Connections:
    """Keep-alive connections, one per host and thread (a TLS handshake and a DNS lookup per
    host and thread, not per file: half the time of a new connection per file for PyPI's
    wheels here). A request through a proxy goes through :func:`fetchnet.opener` instead."""

    def __init__(self) -> None:
        self._local = threading.local()
        self._context = fetchnet.tls_context()
        self._proxies = fetchnet.proxies()
        self._opener = fetchnet.opener()
        self._all: list[http.client.HTTPConnection] = []
        self._mutex = threading.Lock()

    def close(self) -> None:
        """Close every connection of every thread (once all are done)."""
        with self._mutex:
            for conn in self._all:
                conn.close()
            self._all.clear()

    def open(self, url: str, headers: dict[str, str]) -> http.client.HTTPResponse:
        """The answer for ``url`` (redirects followed, each checked); an ``HTTPError`` for
        a status of 400 and above."""
        for _ in range(fetchnet.MAX_REDIRECTS + 1):
            if fetchnet.proxied(url, self._proxies):
                request = urllib.request.Request(url, headers=headers)
                response: http.client.HTTPResponse = self._opener.open(request, timeout=TIMEOUT_S)
                return response
            response = self._ask(url, headers)
            location = response.headers.get("Location")
            if response.status in (301, 302, 303, 307, 308) and location:
                response.read()
                target = urljoin(url, location)
                problem = wheel_url_problem(target, what="it redirects to")
                if problem is not None:
                    raise _Refused(problem)
                url = target
                continue
            if response.status >= 400:
                response.read()
                raise urllib.error.HTTPError(
                    url, response.status, response.reason, response.headers, None
                )
            response.url = url  # what geturl() gives
            return response
        raise _Refused(f"it redirects more than {fetchnet.MAX_REDIRECTS} times")

    def _ask(self, url: str, headers: dict[str, str]) -> http.client.HTTPResponse:
        parts = urlsplit(url)
        conn = self._conn(parts.scheme, parts.netloc)
        target = parts.path + (f"?{parts.query}" if parts.query else "")
        try:
            conn.request("GET", target or "/", headers={**headers, "User-Agent": _AGENT})
            return conn.getresponse()
        except (OSError, http.client.HTTPException):
            self.drop(url)
            raise

    def _conn(self, scheme: str, netloc: str) -> http.client.HTTPConnection:
        conns: dict[tuple[str, str], http.client.HTTPConnection] = self._local.__dict__.setdefault(
            "conns", {}
        )
        conn = conns.get((scheme, netloc))
        if conn is None:
            if scheme == "https":
                conn = http.client.HTTPSConnection(netloc, timeout=TIMEOUT_S, context=self._context)
            else:
                conn = http.client.HTTPConnection(netloc, timeout=TIMEOUT_S)
            conns[(scheme, netloc)] = conn
            with self._mutex:
                self._all.append(conn)
        return conn

    def drop(self, url: str) -> None:
        """Close this thread's connection to ``url``'s host (a new one next time)."""
        parts = urlsplit(url)
        conn = self._local.__dict__.get("conns", {}).pop((parts.scheme, parts.netloc), None)
        if conn is not None:
            conn.close()


_AGENT = "reprobuild-fetch"


def _resumes(response: http.client.HTTPResponse, got: int) -> bool:
    """The server answered a range request with the file's rest from byte ``got``."""
    what = response.headers.get("Content-Range", "")
    return response.status == 206 and what.startswith(f"bytes {got}-")


def _host(url: str) -> str:
    parts = urlsplit(url)
    return parts.hostname or parts.path


def _line(job: Job, why: str) -> str:
    """``the host HOST WHY for FILE (URL); PACKAGE VERSION needs it``: fetchnet's words."""
    what = "the file" if job.url.startswith("file:") else f"the host {_host(job.url)}"
    subject = job.filename if job.url.startswith("file:") else f"{job.filename} ({job.url})"
    return f"{what} {why} for {subject}; {job.req.name} {job.req.version} needs it"
