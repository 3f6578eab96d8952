"""What the host-side fetch (pip download, uv pip compile) may see of the host, and a quick
look at the indexes before it starts.

* **Isolated**: the child gets no ``PIP_*``/``UV_*`` variable and no pip configuration file
  (``PIP_CONFIG_FILE=os.devnull`` skips the global ``/etc/xdg/pip``, the user's and the
  venv's; pip's ``--isolated`` the rest, uv's ``UV_NO_CONFIG`` its ``uv.toml``). What reaches
  an index from behind a corporate proxy is kept: the proxy variables (``HTTP(S)_PROXY``,
  ``ALL_PROXY``, ``NO_PROXY``, either case), the CA bundle ones that are not pip's or uv's
  (``SSL_CERT_FILE``, ``SSL_CERT_DIR``, ``REQUESTS_CA_BUNDLE``, ``CURL_CA_BUNDLE``),
  ``UV_NATIVE_TLS``, and pip's ``PIP_CERT``, ``PIP_CLIENT_CERT`` and ``PIP_PROXY``, passed
  as the options ``--cert``, ``--client-cert`` and ``--proxy`` (pip in isolated mode reads no
  variable). Nothing else: a constraint file, ``PIP_FIND_LINKS``, an extra index or a
  ``--pre`` the host set no longer changes what the lock fetches.
* **Sources**: the lock's indexes, the local wheel folders named in
  ``REPROBUILD_FIND_LINKS``, and the local simple indexes (PEP 503 folders, a partial PyPI
  mirror on disk) named in ``REPROBUILD_LOCAL_INDEXES``, asked beside PyPI for the packages
  the lock takes from PyPI or from its own default index, never for a package pinned to an
  explicit index (both: absolute paths, whitespace-separated; each file found there is still
  checked against the lock's sha256).
* **Parallel, in-process**: the wheels whose URLs are known are fetched by :mod:`urllib`
  (:mod:`reprobuild.locks.parfetch`), never by the host's pip: :func:`opener` gives them the
  same kept settings: the proxies of the variables above (and ``PIP_PROXY``), the CA bundle
  of ``PIP_CERT`` (else ``REQUESTS_CA_BUNDLE``/``CURL_CA_BUNDLE``, else OpenSSL's defaults,
  which read ``SSL_CERT_FILE``/``SSL_CERT_DIR``), ``PIP_CLIENT_CERT``'s client certificate.
  ``REPROBUILD_FETCH_THREADS`` (default 8) files at once.
* **Fail fast**: each distinct index host is looked at once (name resolved, one request to the
  page of the first package that needs it, a short timeout); a host that does not resolve,
  refuses, times out or answers 5xx is one line naming it, why, and that package.
"""

from __future__ import annotations

import concurrent.futures
import http.client
import os
import socket
import ssl
import urllib.error
import urllib.request
from collections.abc import Mapping
from pathlib import Path
from typing import IO
from urllib.parse import urljoin, urlsplit

from packaging.utils import canonicalize_name

from reprobuild._util.envnum import env_count, env_seconds
from reprobuild._util.resolver import tool_error
from reprobuild.errors import ReprobuildError
from reprobuild.locks.records import index_url_problem

__all__ = [
    "FIND_LINKS_VAR",
    "LOCAL_INDEXES_VAR",
    "fetch_threads",
    "find_links",
    "isolated_env",
    "local_indexes",
    "network_reason",
    "opener",
    "pip_network_args",
    "probe_indexes",
    "probe_timeout",
    "proxied",
    "proxies",
    "tls_context",
    "tool_error",
]

FIND_LINKS_VAR = "REPROBUILD_FIND_LINKS"
LOCAL_INDEXES_VAR = "REPROBUILD_LOCAL_INDEXES"
# Seconds a probe waits to connect and for the first byte of the answer.
PROBE_TIMEOUT_VAR = "REPROBUILD_INDEX_PROBE_TIMEOUT"
DEFAULT_PROBE_TIMEOUT = 15.0
# How many files the fetch downloads at once.
THREADS_VAR = "REPROBUILD_FETCH_THREADS"
DEFAULT_THREADS = 8
MOST_THREADS = 64
MAX_REDIRECTS = 5

_KEEP = frozenset(
    {
        "SSL_CERT_FILE",
        "SSL_CERT_DIR",
        "REQUESTS_CA_BUNDLE",
        "CURL_CA_BUNDLE",
        "UV_NATIVE_TLS",
    }
)
_PROXIES = frozenset({"http_proxy", "https_proxy", "all_proxy", "no_proxy"})
_PIP_OPTIONS = {"PIP_CERT": "--cert", "PIP_CLIENT_CERT": "--client-cert", "PIP_PROXY": "--proxy"}


class FetchSetupError(ReprobuildError):
    """The fetch's own settings (``REPROBUILD_FIND_LINKS``, ``REPROBUILD_LOCAL_INDEXES``) are
    unusable."""


def isolated_env(environ: Mapping[str, str] | None = None) -> dict[str, str]:
    """``environ`` (the process's) for a pip or uv child: no ``PIP_*``/``UV_*`` variable but
    the kept ones (module doc), pip's and uv's configuration files off."""
    source = os.environ if environ is None else environ
    out = {
        key: value
        for key, value in source.items()
        if not key.startswith(("PIP_", "UV_")) or key in _KEEP
    }
    out["PIP_CONFIG_FILE"] = os.devnull
    out["UV_NO_CONFIG"] = "1"
    return out


def pip_network_args(environ: Mapping[str, str] | None = None) -> list[str]:
    """pip's ``PIP_CERT``, ``PIP_CLIENT_CERT`` and ``PIP_PROXY`` as options (``--isolated``
    makes pip read no variable)."""
    source = os.environ if environ is None else environ
    out: list[str] = []
    for var, option in _PIP_OPTIONS.items():
        value = source.get(var, "").strip()
        if value:
            out += [option, value]
    return out


def find_links(environ: Mapping[str, str] | None = None) -> list[str]:
    """The local wheel folders ``REPROBUILD_FIND_LINKS`` names, checked: each an absolute path
    (or ``file://`` URL) of a folder that exists; anything else is one line naming it."""
    return _folders(FIND_LINKS_VAR, "local wheel folders", environ)


def local_indexes(environ: Mapping[str, str] | None = None) -> list[str]:
    """The local simple indexes ``REPROBUILD_LOCAL_INDEXES`` names, as ``file://`` URLs (what
    pip's ``--extra-index-url`` takes), each checked as :func:`find_links` checks a folder."""
    return [
        "file://" + path
        for path in _folders(LOCAL_INDEXES_VAR, "local simple-index folders", environ)
    ]


def _folders(var: str, what: str, environ: Mapping[str, str] | None) -> list[str]:
    source = os.environ if environ is None else environ
    out: list[str] = []
    for word in source.get(var, "").split():
        path = word.removeprefix("file://")
        if not path.startswith("/") or not Path(path).is_dir():
            raise FetchSetupError(
                f"{var}: {word[:200]!r} is not a folder; allowed: absolute paths "
                f"of {what}, separated by spaces",
                hint=f"fix or unset {var}",
            )
        out.append(path)
    return out


def probe_timeout(environ: Mapping[str, str] | None = None) -> float:
    return env_seconds(
        PROBE_TIMEOUT_VAR, DEFAULT_PROBE_TIMEOUT, most=600, error=FetchSetupError, environ=environ
    )


def probe_indexes(needs: Mapping[str, str], timeout: float) -> str | None:
    """Look at each distinct ``http(s)`` index host of ``needs`` (index URL -> the first
    package that needs it) once, all at once; the first dead one (in ``needs``' order) as
    ``host HOST (index URL) ...: why; needed by PACKAGE``, or None when all answer."""
    by_host: dict[str, tuple[str, str]] = {}
    for index, package in needs.items():
        parts = urlsplit(index)
        if parts.scheme in ("http", "https") and parts.netloc not in by_host:
            by_host[parts.netloc] = (index, package)
    if not by_host:
        return None
    with concurrent.futures.ThreadPoolExecutor(min(8, len(by_host))) as pool:
        found = list(pool.map(lambda item: _probe(item[0], item[1], timeout), by_host.values()))
    for (index, package), why in zip(by_host.values(), found, strict=True):
        if why is not None:
            host = urlsplit(index).hostname or index
            return f"the index host {host} ({index}) {why}; {package} needs it"
    return None


def _probe(index: str, package: str, timeout: float) -> str | None:
    """Why ``index`` cannot serve ``package``'s page, or None when its host answers (any
    status below 500: a 404 is pip's to judge)."""
    parts = urlsplit(index)
    host = parts.hostname or ""
    proxied = bool(urllib.request.getproxies().get(parts.scheme)) and not (
        urllib.request.proxy_bypass(host)
    )
    if not proxied:  # behind a proxy, the proxy resolves the name
        try:
            socket.getaddrinfo(host, parts.port or (443 if parts.scheme == "https" else 80))
        except (OSError, UnicodeError):
            return "does not resolve (no DNS answer for its name)"
    page = index.rstrip("/") + f"/{canonicalize_name(package)}/"
    request = urllib.request.Request(page, headers={"Accept": "text/html"})
    try:
        with urllib.request.urlopen(request, timeout=timeout) as response:
            status = int(response.status)
    except urllib.error.HTTPError as exc:
        status = exc.code
    except (OSError, ValueError) as exc:
        return _network_reason(exc, timeout)
    if status >= 500:
        return f"answers HTTP {status} for {page}"
    return None


def network_reason(exc: BaseException, timeout: float) -> str:
    """Why a request got no answer, in the words of the probe's lines (a TLS failure too)."""
    reason = getattr(exc, "reason", exc)
    if isinstance(reason, ssl.SSLError):
        return f"fails TLS ({str(reason)[:160]}; a corporate CA: SSL_CERT_FILE or PIP_CERT)"
    if isinstance(exc, http.client.HTTPException):
        return f"broke the connection off ({type(exc).__name__})"
    return _network_reason(exc, timeout) or "cannot be reached"


def _network_reason(exc: BaseException, timeout: float) -> str | None:
    """Why a request got no answer; None for a TLS failure (the host answers: whether it is
    trusted is pip's to say, with the CA settings it was given)."""
    reason = getattr(exc, "reason", exc)
    if isinstance(reason, ssl.SSLError):
        return None
    if isinstance(reason, TimeoutError):
        return f"gives no answer within {timeout:g}s"
    if isinstance(reason, ConnectionRefusedError):
        return "refuses the connection"
    if isinstance(reason, socket.gaierror):
        return "does not resolve (no DNS answer for its name)"
    text = str(reason) or type(reason).__name__
    return f"cannot be reached ({text[:160]})"


def fetch_threads(environ: Mapping[str, str] | None = None) -> int:
    """``REPROBUILD_FETCH_THREADS``: how many files are fetched at once (default 8); anything
    but a whole number from 1 to 64 is one line naming it."""
    return env_count(
        THREADS_VAR, DEFAULT_THREADS, most=MOST_THREADS, error=FetchSetupError, environ=environ
    )


class _IndexRedirects(urllib.request.HTTPRedirectHandler):
    """At most :data:`MAX_REDIRECTS` redirects, each to a URL an index could be (https, or
    http to a loopback host): never to ``file:`` or plain http out of the machine."""

    max_redirections = MAX_REDIRECTS

    def redirect_request(
        self,
        req: urllib.request.Request,
        fp: IO[bytes],
        code: int,
        msg: str,
        headers: http.client.HTTPMessage,
        newurl: str,
    ) -> urllib.request.Request | None:
        target = urljoin(req.full_url, newurl)
        if target.startswith("file:") or index_url_problem(target, what="a redirect") is not None:
            raise urllib.error.HTTPError(
                req.full_url, code, f"redirects to a URL not allowed: {target[:120]}", headers, fp
            )
        return super().redirect_request(req, fp, code, msg, headers, newurl)


def proxies(environ: Mapping[str, str] | None = None) -> dict[str, str]:
    """The kept proxy settings (scheme -> proxy URL; ``no``: the hosts that bypass them):
    the proxy variables, and ``PIP_PROXY`` for http and https where it is set."""
    source = os.environ if environ is None else environ
    found = urllib.request.getproxies_environment()
    if source.get("PIP_PROXY", "").strip():
        proxy = source["PIP_PROXY"].strip()
        found = {**found, "http": proxy, "https": proxy}
    return found


def proxied(url: str, found: Mapping[str, str]) -> bool:
    """A request for ``url`` goes through one of the proxies ``found``."""
    parts = urlsplit(url)
    return bool(found.get(parts.scheme)) and not urllib.request.proxy_bypass(parts.hostname or "")


def tls_context(environ: Mapping[str, str] | None = None) -> ssl.SSLContext:
    """The TLS settings kept (module doc): ``PIP_CERT``'s CA bundle (else
    ``REQUESTS_CA_BUNDLE``/``CURL_CA_BUNDLE``, else OpenSSL's defaults, which read
    ``SSL_CERT_FILE``/``SSL_CERT_DIR``) and ``PIP_CLIENT_CERT``'s client certificate."""
    source = os.environ if environ is None else environ
    cafile = next(
        (
            source[v].strip()
            for v in ("PIP_CERT", "REQUESTS_CA_BUNDLE", "CURL_CA_BUNDLE")
            if source.get(v, "").strip()
        ),
        None,
    )
    client = source.get("PIP_CLIENT_CERT", "").strip()
    try:
        context = ssl.create_default_context(cafile=cafile)
        if client:
            context.load_cert_chain(client)
    except (OSError, ssl.SSLError) as exc:
        raise FetchSetupError(
            f"cannot load the CA or client certificate {cafile or client!r}: {exc}",
            hint="fix or unset PIP_CERT / REQUESTS_CA_BUNDLE / PIP_CLIENT_CERT",
        ) from None
    return context


def opener(environ: Mapping[str, str] | None = None) -> urllib.request.OpenerDirector:
    """An HTTP(S) opener with the kept settings only (module doc): no ``file:``/``ftp:``
    handler, no netrc, no pip or uv configuration."""
    built = urllib.request.OpenerDirector()
    for handler in (
        urllib.request.ProxyHandler(proxies(environ)),
        urllib.request.HTTPHandler(),
        urllib.request.HTTPSHandler(context=tls_context(environ)),
        urllib.request.HTTPDefaultErrorHandler(),
        urllib.request.HTTPErrorProcessor(),
        _IndexRedirects(),
    ):
        built.add_handler(handler)
    return built
