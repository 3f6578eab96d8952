"""Where a locked wheel lies: the URL a native lock gives it, or the one its index lists beside
its sha256.

* **Native locks** (uv.lock, pylock.toml, pdm.lock with ``static_urls``) write each wheel's URL
  beside its hash; the readers keep only the hashes, so :func:`native_wheel_urls` opens the
  file again (as the readers do, the wheels the target cannot install pruned before the
  TOML parse) for the sha256 -> URL of every wheel it gives one. poetry.lock and
  Pipfile.lock name no URL: their files are found on the index, as a requirements lock's.
* **Indexes**: :func:`index_files` reads a project's page once, asking for PEP 691's JSON
  (``application/vnd.pypi.simple.v1+json``) and taking PEP 503's HTML where that is what the
  index answers; each file with its absolute URL and the sha256 the page gives it. A
  ``file:`` index (a PyPI mirror on disk) is read as pip reads one: each page an
  ``index.html``.

The URLs are data: a link the host may not fetch (a scheme other than https or loopback http,
credentials, shell characters; a ``file:`` link on a remote page) is left out.
"""

from __future__ import annotations

import html.parser
import json
import re
import urllib.request
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from urllib.parse import unquote, urljoin, urlsplit

from packaging.utils import canonicalize_name

from reprobuild.errors import ReprobuildError
from reprobuild.locks.lockfile import Lock
from reprobuild.locks.native import Selection, open_toml_lock
from reprobuild.locks.records import index_url_problem

__all__ = ["IndexFile", "index_files", "native_wheel_urls"]

# PEP 691's negotiation: JSON first, the HTML forms after.
ACCEPT = (
    "application/vnd.pypi.simple.v1+json, "
    "application/vnd.pypi.simple.v1+html;q=0.2, text/html;q=0.01"
)
_PAGE_MAX = 32 << 20  # a simple page of a project with thousands of files is a few MB
_PAGE_TIMEOUT_S = 60.0
_HEX_RE = re.compile(r"[0-9a-f]{64}")
# The native formats whose files carry a wheel's URL beside its hash.
_URL_FORMATS = frozenset({"uv", "pylock", "pdm"})


@dataclass(frozen=True)
class IndexFile:
    """One file a project's page lists: its name, absolute URL (no fragment), and the sha256
    hex the page gives it (None where it gives none)."""

    filename: str
    url: str
    sha256: str | None


def native_wheel_urls(lock: Lock, selection: Selection) -> dict[str, str]:
    """sha256 hex -> URL of every wheel ``lock``'s file gives a URL (only the ``.whl`` ones
    ``selection`` installs are parsed); empty for a format that gives none, or a file that can
    no longer be read (the index lookup then finds the files)."""
    if lock.format not in _URL_FORMATS:
        return {}
    try:
        text = lock.path.read_text(encoding="utf-8")
        doc = open_toml_lock(text, lock.path, selection, hint="").doc
    except (OSError, UnicodeDecodeError, ReprobuildError):
        return {}
    out: dict[str, str] = {}
    for entry in _tables(doc):
        found = _wheel_entry(entry)
        if found is not None:
            out.setdefault(found[0], found[1])
    return out


def _tables(node: object) -> Iterator[dict[str, Any]]:
    """Every table (dict) in a parsed TOML document, depth first."""
    stack = [node]
    while stack:
        item = stack.pop()
        if isinstance(item, dict):
            yield item
            stack.extend(item.values())
        elif isinstance(item, list):
            stack.extend(item)


def _wheel_entry(entry: dict[str, Any]) -> tuple[str, str] | None:
    """(sha256 hex, URL) of a table that is a wheel with a URL and a sha256: uv's and pdm's
    ``{url, hash = "sha256:..."}``, pylock's ``{url, hashes = {sha256 = ...}}``."""
    url = entry.get("url")
    if not isinstance(url, str) or not _name_of(url).endswith(".whl"):
        return None
    digest: object = entry.get("hash")
    hashes = entry.get("hashes")
    if isinstance(hashes, dict):
        digest = hashes.get("sha256")
    elif isinstance(digest, str):
        digest = digest.removeprefix("sha256:") if digest.startswith("sha256:") else None
    if not isinstance(digest, str) or not _HEX_RE.fullmatch(digest.lower()):
        return None
    if index_url_problem(url, what="a wheel") is not None:
        return None
    return digest.lower(), url


def index_files(
    index: str, project: str, opener: urllib.request.OpenerDirector | None = None
) -> list[IndexFile] | None:
    """The files on ``project``'s page of the simple index ``index`` (PEP 691 JSON, else PEP 503
    HTML, one request); None when the page cannot be read (absent, unreachable, neither)."""
    page = index.rstrip("/") + f"/{canonicalize_name(project)}/"
    local = urlsplit(page).scheme == "file"
    read = page + "index.html" if local else page
    request = urllib.request.Request(read, headers={"Accept": ACCEPT})
    try:
        if local:
            with urllib.request.urlopen(request, timeout=_PAGE_TIMEOUT_S) as response:
                body, kind, where = response.read(_PAGE_MAX + 1), "text/html", page
        else:
            open_url = (opener or urllib.request.build_opener()).open
            with open_url(request, timeout=_PAGE_TIMEOUT_S) as response:
                body = response.read(_PAGE_MAX + 1)
                kind = response.headers.get_content_type()
                where = response.geturl() or page
    except (OSError, ValueError):
        return None
    if len(body) > _PAGE_MAX:
        return None
    if kind == "application/vnd.pypi.simple.v1+json":
        files = _json_files(body, where)
    elif kind in ("text/html", "application/vnd.pypi.simple.v1+html"):
        files = _html_files(body, where)
    else:
        return None
    if files is None:
        return None
    return [f for f in files if _fetchable(f.url, from_file=local)]


def _json_files(body: bytes, page: str) -> list[IndexFile] | None:
    try:
        doc = json.loads(body)
    except ValueError:
        return None
    raw = doc.get("files") if isinstance(doc, dict) else None
    if not isinstance(raw, list):
        return None
    out: list[IndexFile] = []
    for item in raw:
        if not isinstance(item, dict):
            continue
        name, url, hashes = item.get("filename"), item.get("url"), item.get("hashes")
        if not isinstance(name, str) or not isinstance(url, str):
            continue
        digest = hashes.get("sha256") if isinstance(hashes, dict) else None
        hexed = digest.lower() if isinstance(digest, str) else None
        out.append(
            IndexFile(
                name,
                urljoin(page, url).split("#", 1)[0],
                hexed if hexed and _HEX_RE.fullmatch(hexed) else None,
            )
        )
    return out


class _Anchors(html.parser.HTMLParser):
    """The ``href`` of every anchor of a PEP 503 page."""

    def __init__(self) -> None:
        super().__init__()
        self.hrefs: list[str] = []

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        if tag == "a":
            href = dict(attrs).get("href")
            if href:
                self.hrefs.append(href)


def _html_files(body: bytes, page: str) -> list[IndexFile]:
    anchors = _Anchors()
    anchors.feed(body.decode("utf-8", errors="replace"))
    out: list[IndexFile] = []
    for href in anchors.hrefs:
        url = urljoin(page, href)
        bare, _, fragment = url.partition("#")
        key, _, value = fragment.partition("=")
        digest = value.lower() if key == "sha256" and _HEX_RE.fullmatch(value.lower()) else None
        out.append(IndexFile(_name_of(bare), bare, digest))
    return out


def _fetchable(url: str, *, from_file: bool) -> bool:
    if url.startswith("file:"):
        return from_file and local_path(url) is not None
    return index_url_problem(url, what="a link") is None


def local_path(url: str) -> Path | None:
    """The file a ``file:`` URL names, when it is an absolute local path."""
    parts = urlsplit(url)
    if parts.scheme != "file" or parts.netloc not in ("", "localhost"):
        return None
    path = unquote(parts.path)
    return Path(path) if path.startswith("/") else None


def _name_of(url: str) -> str:
    return unquote(urlsplit(url).path.rsplit("/", 1)[-1])
