"""The records every lock format produces, and the checks every format applies to them.

A :class:`Requirement` is pinned to one exact version and carries at least one sha256 hash; a
:class:`Lock` is a parsed file of them. The checks (names, hashes, URLs, markers, wheel file
names) are shared by the format readers (:mod:`reprobuild.locks.requirements`,
:mod:`reprobuild.locks.pylock`), so a refusal reads the same whatever the format.
"""

from __future__ import annotations

import re
import tomllib
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal
from urllib.parse import urlsplit

from packaging.markers import InvalidMarker, Marker
from packaging.utils import (
    InvalidWheelFilename,
    canonicalize_name,
    parse_wheel_filename,
)
from packaging.version import InvalidVersion

from reprobuild._util import tomlload
from reprobuild.bases.refs import is_loopback
from reprobuild.errors import LockfileError

LockFormat = Literal["requirements", "pylock", "uv", "poetry", "pipfile", "pdm"]
# How the manifest and `inspect` name each format: the file name its tool writes.
FORMAT_NAMES: dict[str, str] = {
    "requirements": "requirements",
    "pylock": "pylock.toml",
    "uv": "uv.lock",
    "poetry": "poetry.lock",
    "pipfile": "Pipfile.lock",
    "pdm": "pdm.lock",
}

# The formats that lock a package by its hashes alone, with no file names: which locked file
# is an sdist is found on the package's index by its hash when the build lock is written
# (reprobuild.locks.wheels.locate_sdists), and the build lock records it for render.
HASH_ONLY_FORMATS: frozenset[str] = frozenset({"requirements", "pipfile"})


@dataclass(frozen=True)
class LockChoice:
    """What a native lock was read for besides the platform: the extras and groups asked for,
    and whether the tool's default groups came too (the manifest's ``lock_selection``)."""

    extras: tuple[str, ...] = ()
    groups: tuple[str, ...] = ()
    default_groups: bool = False

    def to_dict(self) -> dict[str, Any]:
        return {
            "extras": list(self.extras),
            "groups": list(self.groups),
            "default_groups": self.default_groups,
        }

    def describe(self) -> str:
        """``extras cpu; groups train, dev; default groups`` (``main only`` for none)."""
        parts = []
        if self.extras:
            parts.append("extras " + ", ".join(self.extras))
        if self.groups:
            parts.append("groups " + ", ".join(self.groups))
        if self.default_groups:
            parts.append("default groups")
        return "; ".join(parts) or "main only"


# Accepted hash algorithms (pip's own list, minus the weak ones) and their hex lengths.
HASH_HEX_LENGTHS: Mapping[str, int] = {"sha256": 64, "sha384": 96, "sha512": 128}


ALLOWED_HASHES = "sha256, sha384 or sha512"


WEAK_HASHES = frozenset({"md5", "sha1", "sha224"})


# PEP 508 / core metadata name.
NAME_RE = re.compile(r"^([A-Z0-9]|[A-Z0-9][A-Z0-9._-]*[A-Z0-9])$", re.IGNORECASE)


# Control characters (tab excepted), line/paragraph separators and bidi overrides.
CONTROL_RE = re.compile("[\x00-\x08\x0a-\x1f\x7f-\x9f\u2028\u2029\u202a-\u202e\u2066-\u2069]")
# CONTROL_RE less '\n' (which ends a line) and '\r' (allowed before '\n'), searched in a whole
# text at once; only a text it finds in, or with a '\r' not before '\n', is checked line by
# line (decode_lock), which decides.
_ASCII_TEXT = bytes([0x09, 0x0A, 0x0D, *range(0x20, 0x7F)])
_SUSPECT_RE = re.compile(
    "[\x00-\x08\x0b\x0c\x0e-\x1f\x7f-\x9f\u2028\u2029\u202a-\u202e\u2066-\u2069]"
)


# Text that a shell would expand even inside double quotes.
SHELL_RE = re.compile(r"\$\(|\$\{|`")


# Characters allowed in a URL or path: no whitespace, quotes, '$', '`', '\', ';', '&', '|',
# '<', '>', '(', ')', '*', '!' or braces.
URL_CHARS_RE = re.compile(r"^[A-Za-z0-9._~:/?#@+,=%-]+$")


PATH_RE = re.compile(r"^/[A-Za-z0-9._~/+,=@%-]*$")


VCS_PREFIXES = ("git+", "hg+", "svn+", "bzr+")


REGENERATE_HINT = (
    "regenerate the lock with `pip-compile --generate-hashes`, "
    "`uv pip compile --generate-hashes` or `uv export`"
)


# A source archive's file name: an sdist (``.tar.gz``, PEP 625) or a ``.zip`` as older sdists
# are; git commits and workspace members are packed as ``.tar.gz`` by the host.
SOURCE_ARCHIVE_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._+-]*\.(tar\.gz|zip)$")


@dataclass(frozen=True)
class SourceArchive:
    """Build this package's wheel from a source archive: the one record for every package that
    has no installable wheel (an sdist locked by an index lock; a git commit or a workspace
    member packed into a ``.tar.gz`` on the host).

    ``filename`` is the archive's file name (what it is saved as in the build context);
    ``sha256`` is ``"sha256:<64 hex>"`` of its bytes; ``url`` is where the host fetches it
    (``https://``, loopback ``http://`` or ``file://``), ``None`` when whoever made the record
    already put the archive at ``local`` on the host, or when the lock names the file but not
    its URL (poetry.lock, pdm.lock): then ``index`` is the simple index (PEP 503) the host
    looks the file up on, the lock's other indexes after it."""

    filename: str
    sha256: str
    url: str | None = None
    local: Path | None = None
    index: str | None = None
    # Where a host-made archive came from, for the manifest and the SBOM: ``git <url>@<commit>``
    # or ``path <folder>`` (:meth:`SourcePin.describe`); None for an sdist from an index.
    origin: str | None = None

    def __post_init__(self) -> None:
        if not SOURCE_ARCHIVE_RE.fullmatch(self.filename):
            raise ValueError(f"source archive {quoted(self.filename)} is not a .tar.gz or .zip")
        if not re.fullmatch(r"sha256:[0-9a-f]{64}", self.sha256):
            raise ValueError(f"source archive sha256 {quoted(self.sha256)} is not sha256:<hex>")
        if sum(x is not None for x in (self.url, self.local, self.index)) != 1:
            raise ValueError("a source archive has exactly one of url, local and index")

    @property
    def hex(self) -> str:
        return self.sha256.split(":", 1)[1]


@dataclass(frozen=True)
class Requirement:
    """One pinned, hashed requirement.

    ``name`` is canonical (PEP 503); ``version`` is exactly as pinned (for a URL requirement:
    as written in the wheel's file name); ``hashes`` are ``"<algo>:<hex>"``, sorted and
    deduplicated; ``marker`` is ``str(packaging.markers.Marker(...))`` or ``None``; ``line`` is
    the 1-based line where the requirement starts in its source file. ``source``: the package
    has no installable wheel and is built from this archive (``hashes`` is then its sha256);
    such a requirement is never handed to pip's index install (:meth:`Lock.render` leaves it
    out) but built by the image's wheel-build stage.
    """

    name: str
    version: str
    hashes: tuple[str, ...]
    extras: tuple[str, ...] = ()
    marker: str | None = None
    url: str | None = None
    line: int = 0
    source: SourceArchive | None = None
    # The one index a native lock (uv, Poetry) says the package comes from: the fetch asks
    # only that one for it (uv's `explicit = true`, Poetry's `priority = "explicit"`: an
    # index serves only the packages pinned to it). None: every index of the lock, as pip.
    index: str | None = field(default=None, compare=False)

    def line_text(self, *, direct: bool = True) -> str:
        """The canonical one-line form, e.g. ``'numpy==2.4.6 ; python_version < "3.11"
        --hash=sha256:...'`` (a URL requirement: ``'name @ url ; marker --hash=...'``, or,
        not ``direct``, pinned by its wheel's version like any other: a hermetic build finds
        the wheel the host fetched from the URL among the others)."""
        head = self.name
        if self.extras:
            head += "[" + ",".join(self.extras) + "]"
        head += f" @ {self.url}" if self.url is not None and direct else f"=={self.version}"
        parts = [head]
        if self.marker is not None:
            parts.append(f"; {self.marker}")
        parts.extend(f"--hash={h}" for h in self.hashes)
        return " ".join(parts)


@dataclass(frozen=True)
class IndexOptions:
    """Where pip looks for the pinned wheels."""

    index_url: str | None = None
    extra_index_urls: tuple[str, ...] = ()
    find_links: tuple[str, ...] = ()

    def lines(self) -> list[str]:
        """The option lines a requirements file carries for these options."""
        out: list[str] = []
        if self.index_url is not None:
            out.append(f"--index-url {self.index_url}")
        out.extend(f"--extra-index-url {u}" for u in self.extra_index_urls)
        out.extend(f"--find-links {u}" for u in self.find_links)
        return out


SourceKind = Literal["git", "path"]


@dataclass(frozen=True)
class SourcePin:
    """A package the lock installs from source, not from an index: a git repository at one
    commit, or a directory of the project (a workspace member, a ``path`` dependency).

    ``location`` is the git URL with no ``rev``/fragment (``kind == "git"``, ``commit`` its full
    40-hex commit), or the directory as a POSIX path relative to the lock's folder (``kind ==
    "path"``, ``commit`` None), checked to stay inside it. ``version`` is as locked (``"0"``
    when the lock records none). The host turns each into a deterministic source archive
    (:mod:`reprobuild.locks.sourcearchive`) that the image builds into a wheel like an sdist.
    """

    name: str
    version: str
    kind: SourceKind
    location: str
    commit: str | None = None
    editable: bool = False
    line: int = 0
    # A git source's package folder inside the repository (uv's ``subdirectory``), or None.
    subdirectory: str | None = None

    def describe(self) -> str:
        """``git https://host/repo.git@<commit>`` or ``path packages/core (editable)``."""
        if self.kind == "git":
            sub = f" ({self.subdirectory})" if self.subdirectory else ""
            return f"git {self.location}@{self.commit}{sub}"
        return f"path {self.location}" + (" (editable)" if self.editable else "")


@dataclass(frozen=True)
class Lock:
    """A parsed lockfile: every requirement pinned and hashed, plus its index options."""

    path: Path
    sha256: str
    format: LockFormat
    requirements: tuple[Requirement, ...]
    options: IndexOptions
    # What a native lock's reader left out and why (e.g. the project itself, copied by
    # `include`); empty for the requirements and pylock formats.
    notes: tuple[str, ...] = ()
    # A native lock's extras and groups as asked; None for the requirements and pylock formats.
    choice: LockChoice | None = None
    # The packages installed from a git commit or a project directory, not yet archived (by
    # name): :func:`reprobuild.locks.sourcearchive.archive_sources` packs each on the host and
    # turns it into a Requirement with a SourceArchive, as an sdist is.
    source_pins: tuple[SourcePin, ...] = ()

    @property
    def format_name(self) -> str:
        return FORMAT_NAMES[self.format]

    @property
    def sources(self) -> tuple[Requirement, ...]:
        """The requirements built from a source archive (see :class:`SourceArchive`)."""
        return tuple(r for r in self.requirements if r.source is not None)

    @property
    def wheel_requirements(self) -> tuple[Requirement, ...]:
        """The requirements installed from a locked wheel."""
        return tuple(r for r in self.requirements if r.source is None)

    def render(self, *, index_options: bool) -> str:
        """Canonical requirements text for pip's hash-checking mode.

        A header comment (naming only the format and the source's sha256, never the path, so
        the text depends on the lock's content alone), then the index option lines when
        ``index_options`` is true, then one :meth:`Requirement.line_text` per requirement.
        """
        lines = [
            f"# Rendered by reprobuild from a {self.format} lock (sha256 {self.sha256}).",
            "# Every requirement is pinned and hashed; install with --require-hashes.",
        ]
        if index_options:
            lines.extend(self.options.lines())
        lines.extend(req.line_text(direct=index_options) for req in self.wheel_requirements)
        lines.extend(
            f"# {req.name}=={req.version}: built from {req.source.filename} {req.source.sha256}"
            for req in self.sources
            if req.source is not None
        )
        return "\n".join(lines) + "\n"


def quoted(text: str, limit: int = 60) -> str:
    """Quote ``text`` for a one-line message: whitespace collapsed, controls escaped, shortened."""
    text = CONTROL_RE.sub(lambda m: m.group().encode("unicode_escape").decode("ascii"), text)
    text = " ".join(text.split())
    if len(text) > limit:
        text = text[: limit - 3].rstrip() + "..."
    quote = '"' if "'" in text and '"' not in text else "'"
    return f"{quote}{text}{quote}"


def decode_lock(data: bytes, path: Path) -> str:
    """UTF-8 (a BOM is dropped) with no control characters; refuses naming the line."""
    try:
        text = data.decode("utf-8-sig")
    except UnicodeDecodeError as exc:
        line = data[: exc.start].count(b"\n") + 1
        column = exc.start - (data.rfind(b"\n", 0, exc.start) + 1) + 1
        raise LockfileError(
            path,
            line,
            f"byte 0x{data[exc.start]:02x} at column {column} is not UTF-8: "
            "a lockfile must be UTF-8 text",
            hint="re-save the file as UTF-8",
        ) from exc
    # The check below in one pass (most locks are ASCII: bytes.translate drops every byte
    # allowed, and any left over is suspect): a text with nothing it could refuse skips it.
    if data.isascii():
        clean = not data.translate(None, _ASCII_TEXT)
    else:
        clean = _SUSPECT_RE.search(text) is None
    if clean and text.count("\r") == text.count("\r\n"):
        return text
    for number, line_text in enumerate(physical_lines(text), start=1):
        bad = CONTROL_RE.search(line_text)
        if bad is not None:
            char = bad.group()
            raise LockfileError(
                path,
                number,
                f"{quoted(line_text)}: control character U+{ord(char):04X} at column "
                f"{bad.start() + 1} is not allowed: only printable text and tabs",
                hint="remove the character; a lockfile is plain text",
            )
    return text


def physical_lines(text: str) -> list[str]:
    """Split on '\\n' only (so line numbers match the bytes); a CRLF ending is accepted."""
    lines = text.split("\n")
    if lines and lines[-1] == "":
        lines.pop()
    return [line[:-1] if line.endswith("\r") else line for line in lines]


def check_hash(value: str) -> str | None:
    """Return the normalized ``algo:hex`` or ``None`` when malformed (caller words the error)."""
    algo, sep, digest = value.partition(":")
    algo = algo.lower()
    if not sep or algo not in HASH_HEX_LENGTHS:
        return None
    if len(digest) != HASH_HEX_LENGTHS[algo] or not re.fullmatch(r"[0-9a-fA-F]+", digest):
        return None
    return f"{algo}:{digest.lower()}"


def hash_problem(value: str) -> str:
    algo = value.partition(":")[0].lower()
    if algo in WEAK_HASHES:
        return (
            f"hash {quoted(value)}: {algo} is too weak to pin a wheel: use {ALLOWED_HASHES} "
            "('--hash=sha256:<64 hex digits>')"
        )
    if ":" in value and algo in HASH_HEX_LENGTHS:
        want = HASH_HEX_LENGTHS[algo]
        return f"hash {quoted(value)} is not {algo}:<{want} hex digits>"
    return (
        f"hash {quoted(value)} is not '<algorithm>:<hex digest>' with algorithm {ALLOWED_HASHES} "
        "(e.g. '--hash=sha256:<64 hex digits>')"
    )


def url_problem(url: str, *, schemes: Iterable[str], what: str) -> str | None:
    """Why ``url`` is unacceptable (``None`` when fine): safe characters, scheme, no userinfo."""
    allowed = tuple(schemes)
    allowed_text = "/".join(f"{s}://" for s in allowed)
    if not URL_CHARS_RE.fullmatch(url):
        return (
            f"{what} {quoted(url)} holds characters that are not allowed in a URL here "
            "(no whitespace, quotes, '$', '`', '\\', ';', '&', '|', '<>', '()', '*', '!')"
        )
    try:
        parts = urlsplit(url)
        _ = parts.port  # validates the port
    except ValueError:
        return f"{what} {quoted(url)} is not a valid URL"
    scheme = parts.scheme.lower()
    if scheme not in allowed:
        return f"{what} {quoted(url)}: scheme '{parts.scheme}' is not allowed, only {allowed_text}"
    if scheme == "file":
        if not parts.path.startswith("/") or parts.netloc not in ("", "localhost"):
            return f"{what} {quoted(url)}: a file URL must be absolute, 'file:///path'"
    else:
        if not parts.hostname:
            return f"{what} {quoted(url)} has no host"
        if parts.username is not None or parts.password is not None:
            return (
                f"{what} {quoted(url)} embeds credentials, which would be baked into the image: "
                "use a netrc or keyring instead"
            )
    return None


def index_url_problem(url: str, *, what: str) -> str | None:
    """Like :func:`url_problem` for an index: https, file, or http to a loopback host only
    (a plain-http index elsewhere lets anyone on the path choose what is resolved)."""
    return url_problem(url, schemes=("https", "http", "file"), what=what) or plain_http_problem(
        url, what=what
    )


def plain_http_problem(url: str, *, what: str) -> str | None:
    """Plain http:// is fetched from a loopback host only (elsewhere anyone on the path
    chooses what arrives); None for any other URL."""
    parts = urlsplit(url)
    if parts.scheme.lower() == "http" and not is_loopback((parts.hostname or "").lower()):
        return (
            f"{what} {quoted(url)}: plain http:// is only allowed to a loopback host "
            "(localhost, 127.0.0.1, ::1): use https://"
        )
    return None


_MARKER_STRING_RE = re.compile(r"'[^']*'|\"[^\"]*\"")


def _quote_inside_value(literal: str) -> bool:
    return any(q in literal[1:-1] for q in "'\"")


def normal_marker(text: str) -> str:
    """Normalize a marker; raise ValueError (with a one-line reason) when it is unusable."""
    try:
        marker = Marker(text)
    except InvalidMarker as exc:
        first = str(exc).splitlines()[0] if str(exc) else "invalid marker"
        raise ValueError(f"is not a valid environment marker ({first})") from exc
    normal = str(marker)
    if any(c in normal for c in "$`\\") or CONTROL_RE.search(normal):
        raise ValueError("holds '$', '`' or '\\', which are not allowed in a marker")
    # A marker value may not hold a quote of either kind: the rule is ours, so it does not
    # move with how a given `packaging` release writes quotes back out.
    if any(_quote_inside_value(m.group(0)) for m in _MARKER_STRING_RE.finditer(text)):
        raise ValueError("holds a quote or a ' -' inside a string, which cannot be written back")
    try:
        round_trip = str(Marker(normal))
    except InvalidMarker:
        round_trip = ""
    if round_trip != normal or any(tok.startswith("-") for tok in normal.split(" ")):
        raise ValueError("holds a quote or a ' -' inside a string, which cannot be written back")
    return normal


def check_duplicates(requirements: list[Requirement], path: Path) -> None:
    """Refuse a package listed twice unless both entries carry different markers."""
    seen: dict[str, list[Requirement]] = {}
    for req in sorted(requirements, key=lambda r: r.line):
        for other in seen.get(req.name, []):
            both_marked = req.marker is not None and other.marker is not None
            if both_marked and req.marker != other.marker:
                continue
            if req.version == other.version and req.url == other.url:
                problem = (
                    f"{req.name} is listed twice (first at line {other.line}) with the same "
                    "marker: each package must appear once per marker"
                )
            else:
                first = other.url or other.version
                second = req.url or req.version
                problem = (
                    f"{req.name} is pinned twice, to {quoted(first)} at line {other.line} and "
                    f"{quoted(second)} here, without distinct environment markers: one version per "
                    "package, or different markers on each"
                )
            raise LockfileError(path, req.line, problem, hint=REGENERATE_HINT)
        seen.setdefault(req.name, []).append(req)


def sorted_requirements(requirements: list[Requirement]) -> tuple[Requirement, ...]:
    return tuple(sorted(requirements, key=lambda r: (r.name, r.marker or "", r.line)))


def wheel_file_version(filename: str, name: str, what: str, number: int, path: Path) -> str:
    """Check ``filename`` is a wheel of ``name``; return its version as written."""
    try:
        wheel_name, _version, _build, _tags = parse_wheel_filename(filename)
    except (InvalidWheelFilename, InvalidVersion) as exc:
        raise LockfileError(
            path, number, f"{quoted(what)}: {quoted(filename)} is not a valid wheel file name"
        ) from exc
    if wheel_name != canonicalize_name(name):
        raise LockfileError(
            path,
            number,
            f"{quoted(what)}: wheel {quoted(filename)} is for {wheel_name!r}, not {name!r}",
        )
    return filename.split("-")[1]


def load_toml(text: str, path: Path, hint: str) -> dict[str, Any]:
    """Parse a TOML lock; a syntax error is one LockfileError at its line."""
    try:
        return tomlload.loads(text)
    except tomllib.TOMLDecodeError as exc:
        message = str(exc).splitlines()[0] if str(exc) else "invalid TOML"
        where = re.search(r"\(at line (\d+)", message)
        line = int(where.group(1)) if where else None
        raise LockfileError(
            path, line, f"is not valid TOML: {quoted(message, 120)[1:-1]}", hint=hint
        ) from exc
    except RecursionError:
        raise LockfileError(path, None, "is not valid TOML: nested too deeply") from None
    except ValueError as exc:  # int() past sys.get_int_max_str_digits(): tomllib's own message
        problem = quoted(str(exc).split(":")[0], 120)[1:-1]
        raise LockfileError(path, None, f"is not valid TOML: {problem}") from None
