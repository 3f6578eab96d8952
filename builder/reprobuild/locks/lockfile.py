"""Lockfiles: hashed requirements files and PEP 751 ``pylock.toml`` in, pinned records out.

Every :class:`Requirement` that leaves this module is pinned to one exact version, carries at
least one sha256 hash (sha384/sha512 may be given beside it: hermetic builds match cached
wheels by sha256), and is made only of
characters that cannot break out of a requirements file, a Dockerfile or a shell word.
Anything else is refused with a one-line :class:`~reprobuild.errors.LockfileError` that names
``file:line``, quotes the offending text, and says what is allowed instead.

Two formats are read:

* the requirements format that ``pip-compile --generate-hashes``,
  ``uv pip compile --generate-hashes`` and ``uv export`` write;
* PEP 751 ``pylock.toml`` / ``pylock.<name>.toml`` (``lock-version = "1.0"``), wheels only.

:meth:`Lock.render` writes either back as one canonical requirements text for pip's
hash-checking mode.
"""

from __future__ import annotations

import hashlib
import re
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Literal
from urllib.parse import urlsplit

from packaging.markers import InvalidMarker, Marker
from packaging.requirements import InvalidRequirement
from packaging.requirements import Requirement as _PackagingRequirement
from packaging.utils import (
    InvalidWheelFilename,
    canonicalize_name,
    parse_wheel_filename,
)
from packaging.version import InvalidVersion, Version

from reprobuild._util.boundedread import read_small_file
from reprobuild.bases.refs import is_loopback
from reprobuild.errors import LockfileError

__all__ = [
    "IndexOptions",
    "Lock",
    "LockFormat",
    "Requirement",
    "is_pylock_name",
    "load_lock",
    "parse_lock_bytes",
    "parse_pylock",
    "parse_requirements",
]

LockFormat = Literal["requirements", "pylock"]
# The largest real locks are a few hundred KiB; a file past this is not a lock.
LOCK_MAX_BYTES = 16 << 20

# Accepted hash algorithms (pip's own list, minus the weak ones) and their hex lengths.
HASH_HEX_LENGTHS: Mapping[str, int] = {"sha256": 64, "sha384": 96, "sha512": 128}
_ALLOWED_HASHES = "sha256, sha384 or sha512"
_WEAK_HASHES = frozenset({"md5", "sha1", "sha224"})

# PEP 508 / core metadata name.
_NAME_RE = re.compile(r"^([A-Z0-9]|[A-Z0-9][A-Z0-9._-]*[A-Z0-9])$", re.IGNORECASE)
# pip's comment rule: '#' at the start of a line or after whitespace.
_COMMENT_RE = re.compile(r"(^|\s+)#.*$")
# Control characters (tab excepted), line/paragraph separators and bidi overrides.
_CONTROL_RE = re.compile("[\x00-\x08\x0a-\x1f\x7f-\x9f\u2028\u2029\u202a-\u202e\u2066-\u2069]")
# Text that a shell would expand even inside double quotes.
_SHELL_RE = re.compile(r"\$\(|\$\{|`")
# Characters allowed in a URL or path: no whitespace, quotes, '$', '`', '\', ';', '&', '|',
# '<', '>', '(', ')', '*', '!' or braces.
_URL_CHARS_RE = re.compile(r"^[A-Za-z0-9._~:/?#@+,=%-]+$")
_PATH_RE = re.compile(r"^/[A-Za-z0-9._~/+,=@%-]*$")
_VCS_PREFIXES = ("git+", "hg+", "svn+", "bzr+")

_ALLOWED_OPTIONS = (
    "--index-url/-i, --extra-index-url, --find-links/-f (and --hash after a requirement)"
)
_VALUE_OPTIONS: Mapping[str, str] = {
    "--index-url": "--index-url",
    "-i": "--index-url",
    "--extra-index-url": "--extra-index-url",
    "--find-links": "--find-links",
    "-f": "--find-links",
}
# Options that change nothing once every requirement is hashed: accepted and dropped.
_IGNORED_FLAGS = frozenset({"--require-hashes"})
_REGENERATE_HINT = (
    "regenerate the lock with `pip-compile --generate-hashes`, "
    "`uv pip compile --generate-hashes` or `uv export`"
)


# --------------------------------------------------------------------------- records


@dataclass(frozen=True)
class Requirement:
    """One pinned, hashed requirement.

    ``name`` is canonical (PEP 503); ``version`` is exactly as pinned (for a URL requirement:
    as written in the wheel's file name); ``hashes`` are ``"<algo>:<hex>"``, sorted and
    deduplicated; ``marker`` is ``str(packaging.markers.Marker(...))`` or ``None``; ``line`` is
    the 1-based line where the requirement starts in its source file.
    """

    name: str
    version: str
    hashes: tuple[str, ...]
    extras: tuple[str, ...] = ()
    marker: str | None = None
    url: str | None = None
    line: int = 0

    def line_text(self) -> str:
        """The canonical one-line form, e.g. ``'numpy==2.4.6 ; python_version < "3.11"
        --hash=sha256:...'`` (a URL requirement: ``'name @ url ; marker --hash=...'``)."""
        head = self.name
        if self.extras:
            head += "[" + ",".join(self.extras) + "]"
        head += f" @ {self.url}" if self.url is not None else f"=={self.version}"
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


@dataclass(frozen=True)
class Lock:
    """A parsed lockfile: every requirement pinned and hashed, plus its index options."""

    path: Path
    sha256: str
    format: LockFormat
    requirements: tuple[Requirement, ...]
    options: IndexOptions

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
        lines.extend(req.line_text() for req in self.requirements)
        return "\n".join(lines) + "\n"


# --------------------------------------------------------------------------- entry points


def is_pylock_name(path: Path) -> bool:
    """True for ``pylock.toml`` and ``pylock.<name>.toml`` (PEP 751 file names)."""
    name = path.name
    return name == "pylock.toml" or (
        name.startswith("pylock.") and name.endswith(".toml") and len(name) > len("pylock..toml")
    )


def load_lock(path: Path) -> Lock:
    """Read and validate the lockfile at ``path`` (format chosen by its file name)."""
    path = Path(path)

    def fail(problem: str) -> LockfileError:
        if problem.startswith("is a directory"):
            return LockfileError(
                path, None, "is a directory, not a lockfile", hint="point at the lockfile itself"
            )
        return LockfileError(path, None, problem)

    try:
        data = read_small_file(path, LOCK_MAX_BYTES, fail)
    except FileNotFoundError as exc:
        raise LockfileError(path, None, "lockfile not found", hint=_REGENERATE_HINT) from exc
    return parse_lock_bytes(data, path)


def parse_lock_bytes(data: bytes, path: Path, fmt: LockFormat | None = None) -> Lock:
    """Validate ``data`` as the lockfile named ``path`` (``fmt`` defaults from the name)."""
    path = Path(path)
    if fmt is None:
        fmt = "pylock" if is_pylock_name(path) else "requirements"
    text = _decode(data, path)
    if fmt == "pylock":
        from reprobuild.locks.pylock import parse_pylock

        requirements, options = parse_pylock(text, path)
    else:
        requirements, options = parse_requirements(text, path)
    return Lock(
        path=path,
        sha256=hashlib.sha256(data).hexdigest(),
        format=fmt,
        requirements=requirements,
        options=options,
    )


# --------------------------------------------------------------------------- shared helpers


def _q(text: str, limit: int = 60) -> str:
    """Quote ``text`` for a one-line message: whitespace collapsed, controls escaped, shortened."""
    text = _CONTROL_RE.sub(lambda m: m.group().encode("unicode_escape").decode("ascii"), text)
    text = " ".join(text.split())
    if len(text) > limit:
        text = text[: limit - 3].rstrip() + "..."
    quote = '"' if "'" in text and '"' not in text else "'"
    return f"{quote}{text}{quote}"


def _decode(data: bytes, path: Path) -> str:
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
    for number, line_text in enumerate(_physical_lines(text), start=1):
        bad = _CONTROL_RE.search(line_text)
        if bad is not None:
            char = bad.group()
            raise LockfileError(
                path,
                number,
                f"{_q(line_text)}: control character U+{ord(char):04X} at column "
                f"{bad.start() + 1} is not allowed: only printable text and tabs",
                hint="remove the character; a lockfile is plain text",
            )
    return text


def _physical_lines(text: str) -> list[str]:
    """Split on '\\n' only (so line numbers match the bytes); a CRLF ending is accepted."""
    lines = text.split("\n")
    if lines and lines[-1] == "":
        lines.pop()
    return [line[:-1] if line.endswith("\r") else line for line in lines]


def _check_hash(value: str) -> str | None:
    """Return the normalized ``algo:hex`` or ``None`` when malformed (caller words the error)."""
    algo, sep, digest = value.partition(":")
    algo = algo.lower()
    if not sep or algo not in HASH_HEX_LENGTHS:
        return None
    if len(digest) != HASH_HEX_LENGTHS[algo] or not re.fullmatch(r"[0-9a-fA-F]+", digest):
        return None
    return f"{algo}:{digest.lower()}"


def _hash_problem(value: str) -> str:
    algo = value.partition(":")[0].lower()
    if algo in _WEAK_HASHES:
        return (
            f"hash {_q(value)}: {algo} is too weak to pin a wheel: use {_ALLOWED_HASHES} "
            "('--hash=sha256:<64 hex digits>')"
        )
    if ":" in value and algo in HASH_HEX_LENGTHS:
        want = HASH_HEX_LENGTHS[algo]
        return f"hash {_q(value)} is not {algo}:<{want} hex digits>"
    return (
        f"hash {_q(value)} is not '<algorithm>:<hex digest>' with algorithm {_ALLOWED_HASHES} "
        "(e.g. '--hash=sha256:<64 hex digits>')"
    )


def _url_problem(url: str, *, schemes: Iterable[str], what: str) -> str | None:
    """Why ``url`` is unacceptable (``None`` when fine): safe characters, scheme, no userinfo."""
    allowed = tuple(schemes)
    allowed_text = "/".join(f"{s}://" for s in allowed)
    if not _URL_CHARS_RE.fullmatch(url):
        return (
            f"{what} {_q(url)} holds characters that are not allowed in a URL here "
            "(no whitespace, quotes, '$', '`', '\\', ';', '&', '|', '<>', '()', '*', '!')"
        )
    try:
        parts = urlsplit(url)
        _ = parts.port  # validates the port
    except ValueError:
        return f"{what} {_q(url)} is not a valid URL"
    scheme = parts.scheme.lower()
    if scheme not in allowed:
        return f"{what} {_q(url)}: scheme '{parts.scheme}' is not allowed, only {allowed_text}"
    if scheme == "file":
        if not parts.path.startswith("/") or parts.netloc not in ("", "localhost"):
            return f"{what} {_q(url)}: a file URL must be absolute, 'file:///path'"
    else:
        if not parts.hostname:
            return f"{what} {_q(url)} has no host"
        if parts.username is not None or parts.password is not None:
            return (
                f"{what} {_q(url)} embeds credentials, which would be baked into the image: "
                "use a netrc or keyring instead"
            )
    return None


def _index_url_problem(url: str, *, what: str) -> str | None:
    """Like :func:`_url_problem` for an index: https, file, or http to a loopback host only
    (a plain-http index elsewhere lets anyone on the path choose what is resolved)."""
    problem = _url_problem(url, schemes=("https", "http", "file"), what=what)
    if problem is not None:
        return problem
    parts = urlsplit(url)
    if parts.scheme.lower() == "http" and not is_loopback((parts.hostname or "").lower()):
        return (
            f"{what} {_q(url)}: plain http:// is only allowed to a loopback host "
            "(localhost, 127.0.0.1, ::1): use https://"
        )
    return None


_MARKER_STRING_RE = re.compile(r"'[^']*'|\"[^\"]*\"")


def _quote_inside_value(literal: str) -> bool:
    return any(q in literal[1:-1] for q in "'\"")


def _marker(text: str) -> str:
    """Normalize a marker; raise ValueError (with a one-line reason) when it is unusable."""
    try:
        marker = Marker(text)
    except InvalidMarker as exc:
        first = str(exc).splitlines()[0] if str(exc) else "invalid marker"
        raise ValueError(f"is not a valid environment marker ({first})") from exc
    normal = str(marker)
    if any(c in normal for c in "$`\\") or _CONTROL_RE.search(normal):
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


def _check_duplicates(requirements: list[Requirement], path: Path) -> None:
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
                    f"{req.name} is pinned twice, to {_q(first)} at line {other.line} and "
                    f"{_q(second)} here, without distinct environment markers: one version per "
                    "package, or different markers on each"
                )
            raise LockfileError(path, req.line, problem, hint=_REGENERATE_HINT)
        seen.setdefault(req.name, []).append(req)


def _sorted(requirements: list[Requirement]) -> tuple[Requirement, ...]:
    return tuple(sorted(requirements, key=lambda r: (r.name, r.marker or "", r.line)))


# --------------------------------------------------------------------------- requirements format


def _logical_lines(text: str) -> Iterator[tuple[int, str]]:
    """pip's join_lines: backslash continuations; a comment line ends a continuation."""
    start = 0
    parts: list[str] = []
    for number, line in enumerate(_physical_lines(text), start=1):
        is_comment = _COMMENT_RE.match(line) is not None
        if not line.endswith("\\") or is_comment:
            if is_comment:
                line = " " + line
            if parts:
                parts.append(line)
                yield start, "".join(parts)
                parts = []
            else:
                yield number, line
        else:
            if not parts:
                start = number
            parts.append(line[:-1])
    if parts:
        yield start, "".join(parts)


def parse_requirements(text: str, path: Path) -> tuple[tuple[Requirement, ...], IndexOptions]:
    """Parse hashed requirements text; return the requirements (sorted) and index options."""
    path = Path(path)
    requirements: list[Requirement] = []
    index_url: str | None = None
    index_url_line = 0
    extra: list[str] = []
    find_links: list[str] = []
    for number, raw in _logical_lines(text):
        line = _COMMENT_RE.sub("", raw).strip()
        if not line:
            continue
        shell = _SHELL_RE.search(line)
        if shell is not None:
            raise LockfileError(
                path,
                number,
                f"{_q(line)}: {shell.group()!r} is shell syntax, which is not allowed in a "
                "lockfile (no '$(', '${' or backticks; environment variables are not expanded)",
            )
        if line.startswith("-"):
            for option, value in _parse_option_line(line, number, path):
                if option == "--index-url":
                    if index_url is not None and index_url != value:
                        raise LockfileError(
                            path,
                            number,
                            f"--index-url {_q(value)} conflicts with --index-url "
                            f"{_q(index_url)} at line {index_url_line}: give one --index-url "
                            "and put other indexes in --extra-index-url",
                        )
                    index_url, index_url_line = value, number
                elif option == "--extra-index-url":
                    if value not in extra:
                        extra.append(value)
                elif value not in find_links:
                    find_links.append(value)
            continue
        requirements.append(_parse_requirement_line(line, number, path))
    if not requirements:
        raise LockfileError(
            path,
            None,
            "holds no requirements: an empty lock would install nothing",
            hint=_REGENERATE_HINT,
        )
    _check_duplicates(requirements, path)
    options = IndexOptions(
        index_url=index_url, extra_index_urls=tuple(extra), find_links=tuple(find_links)
    )
    return _sorted(requirements), options


def _refuse_option(option: str, line: str, number: int, path: Path) -> LockfileError:
    if option in ("-e", "--editable"):
        problem = (
            f"{_q(line)}: editable requirements ({option}) cannot be pinned or hashed; "
            f"only 'name==version --hash=...' lines and {_ALLOWED_OPTIONS}"
        )
        hint = "with uv export, pass --no-emit-project (and --no-editable)"
    elif option in ("-r", "--requirement", "-c", "--constraint"):
        problem = (
            f"{_q(line)}: {option} includes another file, which is not followed: a lock must be "
            f"one self-contained file; allowed options are {_ALLOWED_OPTIONS}"
        )
        hint = "compile the included files into this one lock"
    elif option == "--hash":
        problem = (
            f"{_q(line)}: --hash must follow a requirement on the same (continued) line; "
            f"allowed options on their own line are {_ALLOWED_OPTIONS}"
        )
        hint = "end the requirement's line with ' \\' before its --hash lines"
    else:
        problem = (
            f"{_q(line)}: option {option} is not allowed; allowed options are {_ALLOWED_OPTIONS}"
        )
        hint = "remove the option; reprobuild sets pip's install options itself"
    return LockfileError(path, number, problem, hint=hint)


def _parse_option_line(line: str, number: int, path: Path) -> list[tuple[str, str]]:
    """Parse a line of global options into ``(canonical option, value)`` pairs."""
    if any(q in line for q in "'\""):
        raise LockfileError(
            path, number, f"{_q(line)}: quotes are not allowed in an option line; write bare URLs"
        )
    tokens = line.split()
    out: list[tuple[str, str]] = []
    i = 0
    while i < len(tokens):
        token = tokens[i]
        i += 1
        if not token.startswith("-"):
            raise LockfileError(
                path,
                number,
                f"{_q(line)}: unexpected text {_q(token)} after an option: one value per option",
            )
        if token in _IGNORED_FLAGS:
            continue
        if token.startswith("--") and "=" in token:
            option, _, value = token.partition("=")
        elif token in _VALUE_OPTIONS:
            option = token
            if i >= len(tokens) or tokens[i].startswith("-"):
                raise LockfileError(
                    path, number, f"{_q(line)}: option {token} needs a value (a URL)"
                )
            value = tokens[i]
            i += 1
        elif token[:2] in ("-i", "-f") and not token.startswith("--"):
            option, value = token[:2], token[2:]
        else:
            option, value = token, ""
        if option not in _VALUE_OPTIONS:
            raise _refuse_option(option, line, number, path)
        canonical = _VALUE_OPTIONS[option]
        _check_option_value(canonical, value, number, path)
        out.append((canonical, value))
    return out


def _check_option_value(option: str, value: str, number: int, path: Path) -> None:
    if not value:
        raise LockfileError(path, number, f"option {option} needs a value (a URL)")
    if option == "--find-links" and value.startswith("/"):
        if _PATH_RE.fullmatch(value) is None:
            raise LockfileError(
                path,
                number,
                f"--find-links {_q(value)}: a path may hold only letters, digits and "
                "'._~/+,=@%-' (no whitespace, quotes or shell characters)",
            )
        return
    problem = _index_url_problem(value, what=option)
    if problem is not None:
        if option == "--find-links" and "://" not in value and ":" not in value:
            problem = (
                f"--find-links {_q(value)} is neither an http(s)/file URL nor an absolute path "
                "(a relative path depends on the directory pip runs in)"
            )
        raise LockfileError(path, number, problem)


def _split_requirement_line(line: str) -> tuple[str, list[str]]:
    """Split ``requirement --hash=...`` into the requirement text and its option tokens."""
    match = re.search(r"\s-", line)
    if match is None:
        return line, []
    return line[: match.start()].strip(), line[match.start() :].split()


def _split_marker(req_text: str) -> tuple[str, str | None]:
    """``(head, marker text or None)``. A URL may itself hold ';', so there it needs ' ;'."""
    is_url = "@" in req_text.split(";", 1)[0] or "://" in req_text
    if is_url:
        marker_split = re.search(r"\s;", req_text)
        if marker_split is None:
            return req_text.strip(), None
        return req_text[: marker_split.start()].strip(), req_text[marker_split.end() :]
    head, sep, rest = req_text.partition(";")
    return head.strip(), (rest if sep else None)


def _split_head(head: str, req_text: str, number: int, path: Path) -> tuple[str, str, str]:
    """``(name as written, text after the extras, extras text)``; refuses what is not data."""

    def refuse(problem: str) -> LockfileError:
        return LockfileError(path, number, problem, hint=_REGENERATE_HINT)

    if any(q in head for q in "'\""):
        raise refuse(
            f"{_q(req_text)}: quotes are only allowed inside an environment marker (after ';')"
        )
    if any(c in head for c in "$\\"):
        raise refuse(f"{_q(req_text)}: '$' and '\\' are not allowed in a requirement")
    name_match = re.match(r"[^\s\[\]=<>!~@;(),]+", head)
    if name_match is None:
        raise refuse(f"{_q(req_text)} does not start with a package name")
    raw_name = name_match.group()
    if "://" in head[: name_match.end() + 3] or raw_name.startswith((".", "/")):
        raise _refuse_bare_reference(req_text, raw_name, number, path)
    if not _NAME_RE.fullmatch(raw_name):
        raise refuse(
            f"{_q(raw_name)} is not a valid package name (PEP 508: letters, digits, '.', '_' "
            "and '-', starting and ending with a letter or digit)"
        )
    rest = head[name_match.end() :].lstrip()
    extras_text = ""
    if rest.startswith("["):
        close = rest.find("]")
        if close < 0:
            raise refuse(f"{_q(req_text)}: unclosed '[' in the extras")
        extras_text, rest = rest[: close + 1], rest[close + 1 :].strip()
    return raw_name, rest, extras_text


def _requirement_marker(
    marker_text: str | None, req_text: str, number: int, path: Path
) -> str | None:
    if marker_text is None:
        return None
    if not marker_text.strip():
        raise LockfileError(
            path, number, f"{_q(req_text)}: ';' must be followed by an environment marker"
        )
    try:
        return _marker(marker_text.strip())
    except ValueError as exc:
        raise LockfileError(
            path, number, f"marker {_q(marker_text.strip())} {exc}", hint=_REGENERATE_HINT
        ) from exc


def _check_hashes_present(hashes: list[str], req_text: str, number: int, path: Path) -> None:
    if not hashes:
        raise LockfileError(
            path,
            number,
            f"{_q(req_text)} has no --hash: every requirement needs at least one "
            f"'--hash=sha256:<hex>' (pip's hash-checking mode is all-or-nothing)",
            hint="compile with --generate-hashes (uv export writes hashes by default)",
        )
    if not any(h.startswith("sha256:") for h in hashes):
        algos = ", ".join(sorted({h.partition(":")[0] for h in hashes}))
        raise LockfileError(
            path,
            number,
            f"{_q(req_text)} is hashed only with {algos}: hermetic builds match the cached "
            "wheels by sha256, so each requirement needs a '--hash=sha256:<64 hex>' "
            "(sha384/sha512 may be given beside it)",
            hint=_REGENERATE_HINT,
        )


def _parse_requirement_line(line: str, number: int, path: Path) -> Requirement:
    req_text, option_tokens = _split_requirement_line(line)
    hashes = _parse_hash_options(option_tokens, req_text, number, path)
    head, marker_text = _split_marker(req_text)
    _name, rest, extras_text = _split_head(head, req_text, number, path)
    marker = _requirement_marker(marker_text, req_text, number, path)
    if rest.startswith("@"):
        raise _refuse_direct_reference(rest[1:].strip(), req_text, number, path)
    version = _check_pin(rest, req_text, number, path)
    try:
        parsed = _PackagingRequirement(head + (f" ; {marker}" if marker else ""))
    except InvalidRequirement as exc:
        first = str(exc).splitlines()[0] if str(exc) else "invalid requirement"
        raise LockfileError(
            path,
            number,
            f"{_q(req_text)} is not a valid PEP 508 requirement ({_q(first)[1:-1]})",
            hint=_REGENERATE_HINT,
        ) from exc
    if extras_text and not parsed.extras:
        raise LockfileError(
            path, number, f"{_q(req_text)}: empty extras '[]'", hint=_REGENERATE_HINT
        )
    _check_hashes_present(hashes, req_text, number, path)
    return Requirement(
        name=canonicalize_name(parsed.name),
        version=version,
        hashes=tuple(sorted(set(hashes))),
        extras=tuple(sorted({canonicalize_name(e) for e in parsed.extras})),
        marker=marker,
        line=number,
    )


def _parse_hash_options(tokens: list[str], req_text: str, number: int, path: Path) -> list[str]:
    hashes: list[str] = []
    i = 0
    while i < len(tokens):
        token = tokens[i]
        i += 1
        if token == "--hash":
            if i >= len(tokens):
                raise LockfileError(path, number, f"{_q(req_text)}: --hash needs a value")
            value = tokens[i]
            i += 1
        elif token.startswith("--hash="):
            value = token.removeprefix("--hash=")
        elif token.startswith("-"):
            option = token.partition("=")[0]
            raise LockfileError(
                path,
                number,
                f"{_q(req_text)}: option {option} is not allowed on a requirement line; "
                "only --hash=<algo>:<hex> follows a requirement",
                hint="remove the option; reprobuild sets pip's install options itself",
            )
        else:
            raise LockfileError(
                path,
                number,
                f"{_q(req_text)}: unexpected text {_q(token)} among the --hash options",
            )
        normal = _check_hash(value)
        if normal is None:
            raise LockfileError(path, number, _hash_problem(value), hint=_REGENERATE_HINT)
        hashes.append(normal)
    return hashes


def _refuse_bare_reference(req_text: str, first: str, number: int, path: Path) -> LockfileError:
    lowered = first.lower()
    if lowered.startswith(_VCS_PREFIXES):
        problem = (
            f"{_q(req_text)}: VCS requirements cannot be hashed; only "
            "'name==version --hash=sha256:...'"
        )
    else:
        problem = (
            f"{_q(req_text)}: a bare URL or path is not a pinned requirement; only "
            "'name==version --hash=sha256:...'"
        )
    return LockfileError(path, number, problem, hint="publish a wheel and pin it by version")


def _check_pin(spec: str, req_text: str, number: int, path: Path) -> str:
    """Return the version pinned by ``spec`` (``'==1.0'``) or refuse."""
    spec = spec.strip()
    if spec.startswith("(") and spec.endswith(")"):
        spec = spec[1:-1].strip()
    want = "every requirement must be pinned to one exact version with '==' (e.g. 'numpy==2.4.6')"
    if not spec:
        raise LockfileError(
            path, number, f"{_q(req_text)} has no version: {want}", hint=_REGENERATE_HINT
        )
    if "," in spec:
        raise LockfileError(
            path, number, f"{_q(req_text)} has more than one version specifier: {want}"
        )
    match = re.fullmatch(r"(~=|===|==|!=|<=|>=|<|>)\s*(\S+)", spec)
    if match is None:
        raise LockfileError(path, number, f"{_q(req_text)}: {_q(spec)} is not a version specifier")
    op, version = match.groups()
    if op == "===":
        raise LockfileError(
            path,
            number,
            f"{_q(req_text)} uses arbitrary equality '===': {want}",
            hint=_REGENERATE_HINT,
        )
    if op != "==":
        raise LockfileError(
            path, number, f"{_q(req_text)} is not pinned ('{op}'): {want}", hint=_REGENERATE_HINT
        )
    if version.endswith(".*"):
        raise LockfileError(
            path,
            number,
            f"{_q(req_text)} pins a wildcard '=={version}': {want}",
            hint=_REGENERATE_HINT,
        )
    try:
        Version(version)
    except InvalidVersion as exc:
        raise LockfileError(
            path, number, f"{_q(version)} is not a valid version (PEP 440): {want}"
        ) from exc
    return version


def _refuse_direct_reference(url: str, req_text: str, number: int, path: Path) -> LockfileError:
    """``name @ URL``: the wheel cache and the image install by name and version from an
    index, so a URL requirement either fails a hermetic build or fetches at build time."""
    if url.lower().startswith(_VCS_PREFIXES):
        problem = (
            f"{_q(req_text)}: VCS requirements cannot be hashed or installed hermetically; "
            "only 'name==version --hash=sha256:...'"
        )
    else:
        problem = (
            f"{_q(req_text)}: direct references ('name @ URL', https:// or file:) are not "
            "accepted, a hermetic build installs wheels by name and version; only "
            "'name==version --hash=sha256:...'"
        )
    return LockfileError(
        path,
        number,
        problem,
        hint="pin the wheel by version and name its index with --index-url, "
        "--extra-index-url or --find-links",
    )


def _wheel_version(filename: str, name: str, what: str, number: int, path: Path) -> str:
    """Check ``filename`` is a wheel of ``name``; return its version as written."""
    try:
        wheel_name, _version, _build, _tags = parse_wheel_filename(filename)
    except (InvalidWheelFilename, InvalidVersion) as exc:
        raise LockfileError(
            path, number, f"{_q(what)}: {_q(filename)} is not a valid wheel file name"
        ) from exc
    if wheel_name != canonicalize_name(name):
        raise LockfileError(
            path,
            number,
            f"{_q(what)}: wheel {_q(filename)} is for {wheel_name!r}, not {name!r}",
        )
    return filename.split("-")[1]


def parse_pylock(text: str, path: Path) -> tuple[tuple[Requirement, ...], IndexOptions]:
    """Parse PEP 751 ``pylock.toml`` text (wheels only); see :mod:`reprobuild.locks.pylock`."""
    from reprobuild.locks.pylock import parse_pylock as _parse_pylock

    return _parse_pylock(text, path)
