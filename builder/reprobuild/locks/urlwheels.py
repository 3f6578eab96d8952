"""Direct-URL wheels: a wheel the lock names by its URL (uv's ``source = { url = ... }``,
``name @ https://.../x.whl`` in a requirements file), fetched on the host, never in the build.

The URL is data: it is checked like an index's (https, or plain http to a loopback host only;
no credentials, no shell characters) and only ever handed to :mod:`urllib`. A fetch
streams the file into a temporary file beside the cache and hashes it as it comes: it is
refused past :data:`MAX_BYTES` (or earlier, when the server's ``Content-Length`` says so), on a
redirect to anything but https (at most :data:`MAX_REDIRECTS` of them), or when its sha256
is not the lock's; only then is it renamed into the wheel cache, under the name the URL's path
ends in, where the image build finds it by its hash as it finds an index's wheels.
"""

from __future__ import annotations

import hashlib
import http.client
import os
import re
import shutil
import socket
import tempfile
import urllib.error
import urllib.request
from collections.abc import Callable, Collection, Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import IO
from urllib.parse import unquote, urljoin, urlsplit

from packaging.tags import Tag, compatible_tags, cpython_tags
from packaging.utils import InvalidWheelFilename, parse_wheel_filename

from reprobuild._util import leftovers
from reprobuild.errors import LockfileError, ReprobuildError
from reprobuild.locks.fetchnet import MAX_REDIRECTS as MAX_REDIRECTS
from reprobuild.locks.hashrecord import RECORD_HINT, hash_for
from reprobuild.locks.native import Selection, wheel_hashes
from reprobuild.locks.records import (
    URL_CHARS_RE,
    Requirement,
    plain_http_problem,
    quoted,
    url_problem,
)

Log = Callable[[str], None]

# The largest wheels there are (CUDA builds of torch, flash-attn) are a few GiB.
MAX_BYTES = 8 << 30
# Seconds a connect or a read may wait: a dead host fails in this, not in minutes.
TIMEOUT_S = 30.0
_BLOCK = 1 << 20
_PREFIX = ".url-"


# The file name the wheel is saved under (the last part of the URL's path, unescaped).
_WHEEL_NAME_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._+-]*\.whl$")


class UrlWheelError(ReprobuildError):
    """A direct-URL wheel could not be fetched, or was not the file the lock pins."""


class _Refused(Exception):
    """A redirect to a URL the host may not fetch (the reason is the message)."""


def wheel_url_problem(url: str, *, what: str) -> str | None:
    """Why the host may not fetch a wheel from ``url`` (``None`` when it may): https, or
    plain http to a loopback host (a local test server); no credentials, only URL characters."""
    scheme = url.partition(":")[0]
    if URL_CHARS_RE.fullmatch(url) and scheme.lower() not in ("https", "http"):
        return (
            f"{what} {quoted(url)}: scheme '{scheme}' is not allowed, only https:// "
            "(http:// to a loopback host)"
        )
    problem = url_problem(url, schemes=("https", "http"), what=what)
    if problem is not None:
        return problem
    if not _WHEEL_NAME_RE.fullmatch(wheel_filename(url)):
        return (
            f"{what} {quoted(url)}: its path does not end in a wheel's file name "
            "(letters, digits, '._+-', ending in .whl)"
        )
    return plain_http_problem(url, what=what)


def wheel_filename(url: str) -> str:
    """The file name a wheel's URL path ends in (percent-escapes decoded)."""
    return unquote(urlsplit(url).path.rsplit("/", 1)[-1])


def is_wheel_url(url: object) -> bool:
    """``url`` is a string whose path ends in ``.whl`` (a direct-URL wheel, not an sdist)."""
    return isinstance(url, str) and wheel_filename(url).endswith(".whl")


def native_url_wheel(
    url: object,
    digest: object,
    name: str,
    version: str,
    selection: Selection,
    path: Path,
    line: int | None,
    hint: str,
) -> tuple[tuple[str, ...], str]:
    """A native lock's direct-URL wheel of ``name`` ``version`` with its hash as the lock
    writes it: the sha256 hashes and the URL the host fetches it from. Refused, each as one
    ``file:line`` line: a URL the host may not fetch, a wheel of another package or version,
    one that does not fit ``selection`` (naming the URL), a missing or non-sha256 hash."""
    label = f"package {name}"
    if not isinstance(url, str):
        raise LockfileError(path, line, f"{label}: its direct URL is not a string", hint=hint)
    problem = wheel_url_problem(url, what=f"{label}: wheel")
    if problem is not None:
        raise LockfileError(path, line, problem)
    filename = wheel_filename(url)
    if not selection.wheel_fits(filename):
        raise LockfileError(
            path,
            line,
            f"{label}: its wheel {quoted(url)} does not fit {selection.label}",
            hint="lock a wheel built for this platform, or choose another --python",
        )
    if not digest:
        digest = f"sha256:{unhashed(url, path, line, label)}"
    files = [(filename, digest)]
    return wheel_hashes(files, name, version, selection, path, lambda _: line, hint), url


def unhashed(url: str, path: Path, line: int | None, label: str) -> str:
    """The sha256 hex of a wheel the lock names by ``url`` with no hash: recorded in the
    hashes file beside the lock (:mod:`reprobuild.locks.hashrecord`), else refused."""
    found = hash_for(path, url)
    if found is None:
        raise LockfileError(
            path, line, f"{label}: wheel {quoted(url)} has no hash in the lock", hint=RECORD_HINT
        )
    return found


def sha256_of_url(url: str) -> str:
    """Fetch the wheel at ``url`` once (every check of :func:`fetch_url_wheel`) for its
    sha256 hex, keeping nothing: what ``init --record-hashes`` records."""
    with tempfile.TemporaryDirectory(prefix=_PREFIX) as tmp:
        return fetch_url_wheel(url, None, Path(tmp), what=f"recording {wheel_filename(url)}").sha256


def target_tags(python_version: str, abi: str, platforms: list[str]) -> frozenset[Tag]:
    """The tags a wheel may carry for a target: those ``pip download`` accepts for the index
    wheels (``--python-version``, ``--abi`` ``abi``/abi3/none, ``--platform`` each of
    ``platforms``)."""
    major, minor = (int(p) for p in python_version.split(".")[:2])
    tags = set(cpython_tags((major, minor), [abi, "abi3", "none"], platforms))
    tags.update(compatible_tags((major, minor), abi, platforms))
    return frozenset(tags)


def wheel_fits(filename: str, tags: frozenset[Tag]) -> bool:
    try:
        return not parse_wheel_filename(filename)[3].isdisjoint(tags)
    except InvalidWheelFilename:
        return False


class _HttpsRedirects(urllib.request.HTTPRedirectHandler):
    """Follow at most :data:`MAX_REDIRECTS` redirects, each to a URL a lock could name
    itself (https; http only to a loopback host): never to ``file:``, ``ftp:`` or plain http
    out of the machine."""

    max_redirections = MAX_REDIRECTS

    def http_error_302(
        self,
        req: urllib.request.Request,
        fp: IO[bytes],
        code: int,
        msg: str,
        headers: http.client.HTTPMessage,
    ) -> IO[bytes] | None:
        location = headers.get("location") or headers.get("uri")
        if location is not None:
            problem = wheel_url_problem(urljoin(req.full_url, location), what="it redirects to")
            if problem is not None:
                fp.close()  # urllib closes it only after a redirect it follows
                raise _Refused(problem)
        return super().http_error_302(req, fp, code, msg, headers)

    http_error_301 = http_error_303 = http_error_307 = http_error_308 = http_error_302


def _opener() -> urllib.request.OpenerDirector:
    # The environment's proxies (as pip honours them); no file:, ftp: or data: handler.
    opener = urllib.request.OpenerDirector()
    for handler in (
        urllib.request.ProxyHandler(),
        urllib.request.HTTPHandler(),
        urllib.request.HTTPSHandler(),
        urllib.request.HTTPDefaultErrorHandler(),
        urllib.request.HTTPErrorProcessor(),
        _HttpsRedirects(),
    ):
        opener.add_handler(handler)
    return opener


@dataclass(frozen=True)
class Fetched:
    path: Path
    sha256: str


def _stream(
    response: IO[bytes], out: IO[bytes], limit: int, fail: Callable[[str], Exception]
) -> str:
    """Copy ``response`` into ``out``, hashing it; refuse past ``limit`` bytes."""
    digest = hashlib.sha256()
    total = 0
    while block := response.read(_BLOCK):
        total += len(block)
        if total > limit:
            raise fail(f"it is larger than {limit} bytes, the most a wheel may be here")
        digest.update(block)
        out.write(block)
    return digest.hexdigest()


def _unreachable(url: str, exc: BaseException) -> str:
    host = urlsplit(url).hostname or url
    if isinstance(exc, urllib.error.HTTPError):
        exc.close()
        if 300 <= exc.code < 400:
            return f"it redirects more than {MAX_REDIRECTS} times"
        return f"the server answered HTTP {exc.code} {exc.reason}"
    if isinstance(exc, http.client.HTTPException):
        return f"the connection broke off ({type(exc).__name__})"
    reason = exc.reason if isinstance(exc, urllib.error.URLError) else exc
    if isinstance(reason, (TimeoutError, socket.timeout)):
        return f"host {host} did not answer within {TIMEOUT_S:g} s"
    if isinstance(reason, socket.gaierror):
        return f"host {host} is unknown ({reason.strerror or reason})"
    text = getattr(reason, "strerror", None) or str(reason)
    return f"host {host} is unreachable ({text})"


def fetch_url_wheel(
    url: str,
    want: Collection[str] | None,
    folder: Path,
    *,
    what: str,
    limit: int = MAX_BYTES,
) -> Fetched:
    """Fetch the wheel at ``url`` into ``folder`` (the wheel cache), checked against ``want``
    (the sha256 hexes it may have; ``None``: recorded, not checked). ``what`` names it in
    errors (``lock:line: X``). A refusal leaves nothing in ``folder``."""
    problem = wheel_url_problem(url, what=f"{what}: wheel")
    if problem is not None:
        raise UrlWheelError(problem)
    filename = wheel_filename(url)

    def fail(reason: str) -> UrlWheelError:
        return UrlWheelError(
            f"{what}: cannot fetch {quoted(filename)} from {url}: {reason}",
            hint="check the URL in the lock is still served, and the network to its host",
        )

    # a folder of this run's (reaped once the run is gone, were it killed mid-download)
    staging = Path(tempfile.mkdtemp(prefix=f"{_PREFIX}{leftovers.owner()}-", dir=folder))
    tmp = staging / filename
    try:
        with tmp.open("wb") as out:
            try:
                with _opener().open(url, timeout=TIMEOUT_S) as response:
                    length = response.headers.get("Content-Length")
                    if length is not None and length.isdigit() and int(length) > limit:
                        raise fail(f"it is {length} bytes, more than the {limit} a wheel may be")
                    got = _stream(response, out, limit, fail)
            except _Refused as exc:
                raise fail(str(exc)) from None
            except (OSError, ValueError, http.client.HTTPException) as exc:
                raise fail(_unreachable(url, exc)) from None
        if want is not None and got not in want:
            raise UrlWheelError(
                f"{what}: the downloaded {filename} has sha256 {got}, which the lock pins as "
                f"{' or '.join(sorted(want))}: the file changed at its URL",
                hint="if the change is expected, relock; else the file was tampered with",
            )
        final = folder / filename
        os.replace(tmp, final)
        return Fetched(final, got)
    finally:
        shutil.rmtree(staging, ignore_errors=True)


def fetch_direct(
    requirements: Iterable[Requirement],
    tags: frozenset[Tag],
    label: str,
    folder: Path,
    have: set[str],
    *,
    where: Callable[[Requirement], str],
    holds: Callable[[str | None], bool],
    log: Log,
) -> None:
    """Fetch into ``folder`` each direct-URL wheel of ``requirements`` (``url`` set) whose
    marker ``holds`` and whose sha256 no cached file (``have``) has yet; a wheel with none of
    the target's ``tags`` (:func:`target_tags`; ``label`` names the target) is refused before
    any byte is fetched."""
    leftovers.reap_dir(folder, _PREFIX)
    for req in requirements:
        if req.url is None or not holds(req.marker):
            continue
        hexes = {h.split(":", 1)[1] for h in req.hashes if h.startswith("sha256:")}
        if have.intersection(hexes):
            continue
        filename = wheel_filename(req.url)
        if not wheel_fits(filename, tags):
            raise UrlWheelError(
                f"{where(req)}: package {req.name}: wheel {req.url} does not fit "
                f"{label} (its tags are not among the ones this base installs)",
                hint="lock a wheel built for the base's Python and platform",
            )
        log(f"fetching {filename} from its URL")
        fetched = fetch_url_wheel(req.url, hexes, folder, what=f"{where(req)}: {req.name}")
        have.add(fetched.sha256)
