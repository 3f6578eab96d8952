"""HTTP for the registry client: one deadline over every socket a client opens (a watchdog
that shuts them when the time is up), ``WWW-Authenticate`` challenges parsed, and a failure
worded as one line (split out of :mod:`reprobuild.bases.registry`).
"""

from __future__ import annotations

import contextlib
import os
import re
import socket
import threading
import time
import weakref
from collections.abc import Iterator, Mapping
from typing import Any, ClassVar, NamedTuple, cast
from urllib.parse import urlsplit

import requests
import urllib3
from requests.adapters import HTTPAdapter

from reprobuild._util import jsonload
from reprobuild._util.threads import start as start_thread
from reprobuild.errors import RegistryError

MAX_ERROR_BODY_BYTES = 64 * 1024
MAX_REDIRECTS = 10
# One client (one command) waits this long in all for registries and token services.
DEADLINE_ENV = "REPROBUILD_REGISTRY_TIMEOUT"
DEFAULT_DEADLINE = 60.0


# --- WWW-Authenticate (RFC 9110 section 11.6.1) ------------------------------------------


class Challenge(NamedTuple):
    """One challenge of a ``WWW-Authenticate`` header; the scheme and keys are lowercased."""

    scheme: str
    params: Mapping[str, str]


_TOKEN = r"[!#$%&'*+.^_`|~0-9A-Za-z-]+"
_SCHEME_RE = re.compile(rf"({_TOKEN})")
_PARAM_RE = re.compile(rf'[ \t]*,?[ \t]*({_TOKEN})[ \t]*=[ \t]*("(?:[^"\\]|\\.)*"|{_TOKEN})')
_TOKEN68_RE = re.compile(r"[ \t]+([A-Za-z0-9._~+/-]+=*)[ \t]*(?=,|$)")


def parse_challenges(header: str) -> list[Challenge]:
    """Parse a ``WWW-Authenticate`` value into its challenges.

    Quoted values may hold commas, ``=`` and backslash escapes; several challenges may
    share one header (``Basic realm="a", Bearer realm="b"``). Unparseable text is skipped.
    """
    out: list[Challenge] = []
    pos, end = 0, len(header)
    while True:
        while pos < end and header[pos] in " \t,":
            pos += 1
        if pos >= end:
            return out
        scheme = _SCHEME_RE.match(header, pos)
        if scheme is None:  # garbage: resynchronise at the next comma
            comma = header.find(",", pos)
            if comma < 0:
                return out
            pos = comma + 1
            continue
        pos = scheme.end()
        params: dict[str, str] = {}
        token68 = _TOKEN68_RE.match(header, pos)
        if token68 is not None and not _PARAM_RE.match(header, pos):
            params[""] = token68.group(1)
            pos = token68.end()
        while (param := _PARAM_RE.match(header, pos)) is not None:
            # "Basic realm=x, Bearer realm=y": "Bearer realm" is no parameter, so the
            # regex stops there and the next turn of the outer loop reads a new scheme.
            value = param.group(2)
            if value.startswith('"'):
                value = re.sub(r"\\(.)", r"\1", value[1:-1])
            params[param.group(1).lower()] = value
            pos = param.end()
        out.append(Challenge(scheme.group(1).lower(), params))


def deadline_from_env() -> float:
    """The total wait of one command, from ``$REPROBUILD_REGISTRY_TIMEOUT`` (seconds)."""
    raw = os.environ.get(DEADLINE_ENV, "").strip()
    if not raw:
        return DEFAULT_DEADLINE
    try:
        value = float(raw)
    except ValueError:
        value = -1.0
    if not 0 < value <= 86400:
        raise RegistryError(
            f"{DEADLINE_ENV}={raw[:40]!r} is not a number of seconds between 0 and 86400"
        )
    return value


def host_of(url: str) -> str:
    return urlsplit(url).netloc or url[:80]


class Watchdog:
    """Shuts down every socket a client opened once its deadline passes.

    requests' ``timeout`` bounds each socket read, not a request: a server that trickles a
    byte a second answers every read in time, forever. The connections a client opens are
    tracked (a weak set), and a timer armed around each wait shuts them down when the
    client's time is up, so the blocked read returns at once wherever it is (status line,
    headers, body) and in whatever thread it runs."""

    def __init__(self, seconds: float) -> None:
        self.seconds = seconds
        self.ends = time.monotonic() + seconds
        self.fired = False
        self.waiting_on = ""  # the URL last sent (redirects included): whom a timeout names
        self.sockets: weakref.WeakSet[socket.socket] = weakref.WeakSet()
        self._lock = threading.Lock()

    def remaining(self) -> float:
        return self.ends - time.monotonic()

    def expired(self) -> bool:
        return self.fired or self.remaining() <= 0

    def add(self, sock: socket.socket | None) -> None:
        if sock is not None:
            with self._lock:
                self.sockets.add(sock)
                fired = self.fired
            if fired:
                self._shut(sock)

    @staticmethod
    def _shut(sock: socket.socket) -> None:
        # socket.socket's own shutdown, not SSLSocket's (which drops its SSL object under
        # a reader in another thread): the reader sees EOF and returns.
        with contextlib.suppress(OSError):
            socket.socket.shutdown(sock, socket.SHUT_RDWR)

    def fire(self) -> None:
        with self._lock:
            self.fired = True
            sockets = list(self.sockets)
        for sock in sockets:
            self._shut(sock)

    @contextlib.contextmanager
    def armed(self) -> Iterator[None]:
        timer = threading.Timer(max(self.remaining(), 0.0), self.fire)
        timer.daemon = True
        start_thread(timer)
        try:
            yield
        finally:
            timer.cancel()


class _TrackedHTTPConnection(urllib3.connection.HTTPConnection):
    watchdog: ClassVar[Watchdog]

    def connect(self) -> None:
        super().connect()
        self.watchdog.add(self.sock)


class _TrackedHTTPSConnection(urllib3.connection.HTTPSConnection):
    watchdog: ClassVar[Watchdog]

    def connect(self) -> None:
        super().connect()
        self.watchdog.add(self.sock)


class DeadlineAdapter(HTTPAdapter):
    """An adapter whose connections register their sockets with one :class:`Watchdog`."""

    def __init__(self, watchdog: Watchdog) -> None:
        self._watchdog = watchdog
        super().__init__(max_retries=0)

    def send(self, request: requests.PreparedRequest, *args: Any, **kwargs: Any) -> Any:
        self._watchdog.waiting_on = request.url or ""
        return super().send(request, *args, **kwargs)

    def init_poolmanager(self, *args: Any, **kwargs: Any) -> None:
        super().init_poolmanager(*args, **kwargs)
        attrs = {"watchdog": self._watchdog}
        http_conn = type("_Conn", (_TrackedHTTPConnection,), attrs)
        https_conn = type("_TLSConn", (_TrackedHTTPSConnection,), attrs)
        pools = {
            "http": type("_Pool", (urllib3.HTTPConnectionPool,), {"ConnectionCls": http_conn}),
            "https": type(
                "_TLSPool", (urllib3.HTTPSConnectionPool,), {"ConnectionCls": https_conn}
            ),
        }
        self.poolmanager.pool_classes_by_scheme = cast(Any, pools)


def failure_reason(exc: requests.RequestException, timeout: float) -> str:
    """One line saying why a request got no answer (requests' own text is a nested repr)."""
    if isinstance(exc, requests.Timeout):
        return f"no answer within {timeout:g}s"
    if isinstance(exc, requests.TooManyRedirects):
        return f"more than {MAX_REDIRECTS} redirects"
    text = str(exc)
    if isinstance(exc, requests.exceptions.SSLError):
        return "TLS handshake failed"
    if "refused" in text.lower():
        return "connection refused"
    if any(
        marker in text
        for marker in (
            "Name or service not known",
            "Temporary failure in name resolution",
            "nodename nor servname",
            "getaddrinfo failed",
            "No address associated with hostname",
            "NameResolutionError",
        )
    ):
        return "host name could not be resolved"
    if "Network is unreachable" in text or "No route to host" in text:
        return "no route to host"
    return type(exc).__name__


def registry_message(body: bytes) -> str:
    """The first error message of a registry's JSON error body, or ''."""
    try:
        document = jsonload.loads(
            body, "error body", error=RegistryError, max_bytes=MAX_ERROR_BODY_BYTES
        )
        first = document["errors"][0]
        message = str(first.get("message") or first.get("code") or "")
    except (RegistryError, ValueError, KeyError, IndexError, TypeError, AttributeError):
        return ""
    return " ".join(message.split())[:200]
