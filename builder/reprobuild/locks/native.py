"""What the native lock readers (uv.lock, poetry.lock, Pipfile.lock, pdm.lock) share.

A native lock describes every platform, every extra and every group at once; an image has one
platform and one selection. :class:`Selection` is that platform (linux, its machine, its
CPython) and the extras and groups asked for; the readers evaluate each marker against it with
:mod:`packaging.markers`, keep only the wheels its tags accept, and hand back the same
:class:`~reprobuild.locks.records.Requirement` records, with no marker left, as the requirements
and ``pylock.toml`` readers do. Every refusal is one :class:`~reprobuild.errors.LockfileError`.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable, Iterable, Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass, replace
from functools import cached_property, lru_cache
from pathlib import Path
from typing import Any, NamedTuple

from packaging.markers import InvalidMarker, Marker, UndefinedComparison, UndefinedEnvironmentName
from packaging.specifiers import InvalidSpecifier, SpecifierSet
from packaging.tags import Tag, compatible_tags, cpython_tags
from packaging.utils import canonicalize_name
from packaging.version import InvalidVersion, Version

from reprobuild._util.boundedread import read_small_file
from reprobuild.errors import LockfileError
from reprobuild.locks.records import (
    NAME_RE,
    SOURCE_ARCHIVE_RE,
    IndexOptions,
    Requirement,
    SourceArchive,
    SourcePin,
    check_hash,
    hash_problem,
    index_url_problem,
    load_toml,
    physical_lines,
    quoted,
    sorted_requirements,
)

_MANYLINUX_LEGACY = {5: "manylinux1", 12: "manylinux2010", 17: "manylinux2014"}
_PLAIN_VERSION_RE = re.compile(r"^[A-Za-z0-9.+!_-]+$")
# One wheel entry on a line of its own, with no nested table: what uv, Poetry and PDM write.
_WHEEL_LINE_RE = re.compile(
    r'^[ \t]*\{[ \t]*(url|path|file)[ \t]*=[ \t]*"([^"\n]+\.whl)"[^{}\n]*\},?[ \t]*$',
    re.MULTILINE,
)
# The same, as uv writes them: each begins with a newline and literal text, which lets the
# regex engine jump from one candidate to the next (a '^' pattern is tried at every position).
_UV_WHEEL_LINE_RE = re.compile(r'\n    \{ url = "([^"\n]+\.whl)"[^{}\n]*\},?[ \t]*(?=\n)')


@dataclass(frozen=True)
class Selection:
    """The image's platform and what to install from a native lock.

    The defaults are reprobuild's catalog bases: CPython 3.11 on linux x86_64 with glibc 2.36
    (Debian 12), and the lock's main dependencies only (no extras, no dev groups).
    """

    python: str = "3.11"
    machine: str = "x86_64"
    glibc: tuple[int, int] = (2, 36)
    extras: tuple[str, ...] = ()
    groups: tuple[str, ...] = ()
    # Also the groups the lock's tool installs by default (uv's default-groups, Poetry's
    # non-optional groups, every group of a pdm.lock); each reader resolves them with
    # ``with_groups``.
    default_groups: bool = False

    def with_groups(self, defaults: Iterable[str]) -> Selection:
        """This selection with ``defaults`` (the tool's default groups) added to the groups
        when ``default_groups`` asks for them, and nothing left to resolve."""
        groups = list(self.groups)
        if self.default_groups:
            groups += [g for g in defaults if g not in groups]
        return replace(self, groups=tuple(groups), default_groups=False)

    @property
    def full_version(self) -> str:
        return self.python if self.python.count(".") >= 2 else f"{self.python}.0"

    def environment(self, extra: str = "") -> dict[str, str]:
        return {
            "implementation_name": "cpython",
            "implementation_version": self.full_version,
            "os_name": "posix",
            "platform_machine": self.machine,
            "platform_python_implementation": "CPython",
            "platform_release": "",
            "platform_system": "Linux",
            "platform_version": "",
            "python_full_version": self.full_version,
            "python_version": ".".join(self.python.split(".")[:2]),
            "sys_platform": "linux",
            "extra": extra,
        }

    @property
    def tags(self) -> frozenset[Tag]:
        return _platform_tags(self.python, self.machine, self.glibc)

    @property
    def label(self) -> str:
        return f"CPython {self.python} on linux {self.machine}"

    @property
    def _tag_strings(self) -> frozenset[str]:
        return _tag_strings(self.python, self.machine, self.glibc)

    def wheel_fits(self, filename: str) -> bool:
        """True when ``filename`` is a wheel this platform installs (an sdist is not).

        Only the file name's last three fields (python, abi, platform tags, each possibly
        dotted) are read; :func:`wheel_hashes` checks the full name of each wheel kept."""
        if not filename.endswith(".whl"):
            return False
        # name-version[-build]-python-abi-platform: the tags are the last three fields, and
        # at least two come before them (one rsplit: this runs for every wheel of a lock).
        parts = filename[:-4].rsplit("-", 3)
        if len(parts) < 4 or "-" not in parts[0]:
            return False
        key = filename[len(parts[0]) + 1 : -4]
        fits = self._fits.get(key)
        if fits is None:
            pythons, abis, platforms = (p.split(".") for p in parts[1:])
            wanted = self._tag_strings
            fits = any(
                f"{py}-{abi}-{plat}" in wanted
                for py in pythons
                for abi in abis
                for plat in platforms
            )
            self._fits[key] = fits
        return fits

    @cached_property
    def _fits(self) -> dict[str, bool]:
        return {}

    @cached_property
    def pruned_wheels(self) -> list[str]:
        """The URLs or file names of the wheels :meth:`prune_foreign_wheels` blanked out: a
        package left with no wheel had some locked, for other platforms or Pythons."""
        return []

    def prune_foreign_wheels(self, text: str) -> str:
        """``text`` with each one-line wheel entry (``{ url|path|file = "....whl", ... },``)
        that this platform cannot install blanked out, line numbers kept (uv's one-line
        ``sdist = {...}`` entries stay: a package with no wheel that fits is built from it).

        Native locks list every platform's wheels; TOML-parsing them all is most of the
        reading time, and a wheel that does not fit is never looked at afterwards."""
        wheels = text.count('.whl"')
        handled = 0

        known = self._fits  # tags -> fits, as wheel_fits caches them
        pruned = self.pruned_wheels

        def uv_line(match: re.Match[str]) -> str:
            nonlocal handled
            handled += 1
            url = match.group(1)
            # The last three dash-separated fields: when they are tags already found not to
            # fit, so does this wheel (whatever comes before them), with no call.
            end = len(url) - 4
            cut = url.rfind("-", 0, url.rfind("-", 0, url.rfind("-", 0, end)))
            if known.get(url[cut + 1 : end]) is False or not self.wheel_fits(
                url.rsplit("/", 1)[-1]
            ):
                pruned.append(url)
                return "\n"
            return match.group(0)

        def other_line(match: re.Match[str]) -> str:
            if self.wheel_fits(match.group(2).rsplit("/", 1)[-1]):
                return match.group(0)
            pruned.append(match.group(2))
            return ""

        text = _UV_WHEEL_LINE_RE.sub(uv_line, text)
        if handled == wheels:
            return text  # every wheel was one of uv's lines: no second pass
        return _WHEEL_LINE_RE.sub(other_line, text)

    def locks_foreign_wheels(self, name: str, version: str) -> bool:
        """True when a wheel of ``name`` (canonical) ``version`` was pruned from the lock's
        text as one this platform cannot install."""
        pruned = self.pruned_wheels
        return any(_is_wheel_of(url.rsplit("/", 1)[-1], name, version) for url in pruned)

    def marker_holds(
        self, text: str | None, extras: Iterable[str] = (), *, together: bool = False
    ) -> bool:
        """Evaluate a marker for this platform; ``extras`` are the values ``extra`` may take
        (the marker holds when it holds for any of them, or for none when there are none, as
        pip installs a package's extras). ``together``: with every extra active at once, as
        Poetry evaluates the markers a lock-version 2.1 file records (``extra == "a" and
        extra == "b"`` holds with both, ``extra != "a"`` fails once ``a`` is chosen;
        packaging >= 26.4 evaluates ``extra`` against a set). A lock repeats a few markers
        many times: each is parsed and evaluated once."""
        if text is None or not text.strip():
            return True
        values = tuple(extras) or ("",)
        key = (text, ("\0together", *sorted(set(extras))) if together else values)
        held = self._held.get(key)
        if held is None:
            environments: list[Mapping[str, str | frozenset[str]]]
            if together:
                environments = [{**self.environment(), "extra": frozenset(extras)}]
            else:
                environments = [self.environment(value) for value in values]
            held = any(_evaluates(_marker(text), env) for env in environments)
            self._held[key] = held
        return held

    @cached_property
    def _held(self) -> dict[tuple[str, tuple[str, ...]], bool]:
        return {}

    def python_allowed(self, spec: str) -> bool:
        return Version(self.full_version) in SpecifierSet(spec)


def _evaluates(marker: Marker, environment: Mapping[str, str | frozenset[str]]) -> bool:
    """``marker.evaluate``, False where a comparison is undefined for that environment."""
    try:
        return marker.evaluate(environment)
    except (UndefinedComparison, UndefinedEnvironmentName):
        return False


@lru_cache(maxsize=4096)
def _marker(text: str) -> Marker:
    """``Marker(text)``, parsed once per text (markers repeat across a lock's packages)."""
    return Marker(text)


@lru_cache(maxsize=16)
def _platform_tags(python: str, machine: str, glibc: tuple[int, int]) -> frozenset[Tag]:
    major, minor = (int(p) for p in python.split(".")[:2])
    platforms: list[str] = []
    for glibc_minor in range(glibc[1], 4, -1):
        platforms.append(f"manylinux_2_{glibc_minor}_{machine}")
        if glibc_minor in _MANYLINUX_LEGACY:
            platforms.append(f"{_MANYLINUX_LEGACY[glibc_minor]}_{machine}")
    platforms.append(f"linux_{machine}")
    abi = f"cp{major}{minor}"
    tags = set(cpython_tags((major, minor), abis=[abi], platforms=platforms))
    tags.update(compatible_tags((major, minor), interpreter=abi, platforms=platforms))
    return frozenset(tags)


@lru_cache(maxsize=16)
def _tag_strings(python: str, machine: str, glibc: tuple[int, int]) -> frozenset[str]:
    return frozenset(str(tag) for tag in _platform_tags(python, machine, glibc))


def pyproject_beside(path: Path, hint: str) -> dict[str, Any] | None:
    """The ``pyproject.toml`` beside the lock at ``path``, parsed; ``None`` when there is none."""
    beside = path.parent / "pyproject.toml"

    def fail(problem: str) -> LockfileError:
        return LockfileError(beside, None, problem)

    try:
        data = read_small_file(beside, 4 << 20, fail)
    except FileNotFoundError:
        return None
    try:
        return load_toml(data.decode("utf-8-sig"), beside, hint)
    except UnicodeDecodeError:
        raise LockfileError(beside, None, "is not UTF-8 text") from None


class LockLines:
    """A file's physical lines, and the lines of its array-of-tables headers in order."""

    def __init__(self, text: str, header: str = "package") -> None:
        self.text = text
        # A line that is only the header ('\s' less '\n', so that a match stays in its line);
        # the pattern starts at the literal '[[' (a '^' pattern is tried at every position),
        # and what comes before it on its line must be blank.
        pattern = re.compile(
            r"\[\[[^\S\n]*" + re.escape(header) + r"[^\S\n]*\]\][^\S\n]*(#.*)?$",
            re.MULTILINE,
        )
        self.headers: list[int] = []
        number, offset = 1, 0
        for match in pattern.finditer(text):
            start = text.rfind("\n", 0, match.start()) + 1
            if text[start : match.start()].strip():
                continue
            number += text.count("\n", offset, start)
            offset = start
            self.headers.append(number)

    @cached_property
    def lines(self) -> list[str]:
        return physical_lines(self.text)

    @cached_property
    def _starts(self) -> list[int]:
        """The offset in the text where each line starts (line 1 at index 0)."""
        return [0, *(m.end() for m in re.finditer("\n", self.text))][: len(self.lines)]

    def find(self, needle: str, start: int = 1) -> int | None:
        """The first line from ``start`` on that holds ``needle``, searched in the text at once
        (a reader looks up a line per package: line by line, that was quadratic)."""
        start = max(start, 1)
        if not needle or "\n" in needle or "\r" in needle:
            for number in range(start, len(self.lines) + 1):
                if needle in self.lines[number - 1]:
                    return number
            return None
        if start == 1:
            offset = 0
        elif start <= len(self._starts):
            offset = self._starts[start - 1]
        else:
            return None
        found = self.text.find(needle, offset)
        if found < 0:
            return None
        return start + self.text.count("\n", offset, found)

    def header_of(self, position: int, count: int) -> int:
        """The header line of the ``position``-th entry (0 when headers and entries differ)."""
        if len(self.headers) == count and 0 <= position < count:
            return self.headers[position]
        return 0


def check_name(name: object, path: Path, line: int | None) -> str:
    if not isinstance(name, str) or not name:
        raise LockfileError(path, line, "a package entry has no 'name'")
    if not NAME_RE.fullmatch(name):
        raise LockfileError(
            path,
            line,
            f"package name {quoted(name)} is not a valid package name (PEP 508: letters, digits, "
            "'.', '_' and '-', starting and ending with a letter or digit)",
        )
    return canonicalize_name(name)


def check_version(version: object, label: str, path: Path, line: int | None) -> str:
    if not isinstance(version, str) or not version:
        raise LockfileError(path, line, f"{label} has no version: only packages pinned to one")
    try:
        Version(version)
    except InvalidVersion as exc:
        raise LockfileError(
            path, line, f"{label}: version {quoted(version)} is not a valid version (PEP 440)"
        ) from exc
    if not _PLAIN_VERSION_RE.fullmatch(version):
        raise LockfileError(path, line, f"{label}: version {quoted(version)} is not plain")
    return version


def check_marker(text: object, label: str, path: Path, line: int | None) -> str | None:
    """A marker as written, validated (``None`` when absent)."""
    if text is None:
        return None
    if not isinstance(text, str):
        raise LockfileError(path, line, f"{label}: a marker must be a string")
    try:
        _marker(text)
    except InvalidMarker as exc:
        first = str(exc).splitlines()[0] if str(exc) else "invalid marker"
        raise LockfileError(
            path,
            line,
            f"{label}: marker {quoted(text)} is not a valid environment marker "
            f"({quoted(first, 80)[1:-1]})",
        ) from exc
    return text


def check_index(url: object, label: str, path: Path, line: int | None) -> str:
    if not isinstance(url, str):
        raise LockfileError(path, line, f"{label}: an index must be a URL string")
    if not _index_ok(url):  # every package of a lock names one of a few indexes
        problem = index_url_problem(url, what=f"{label}: index")
        raise LockfileError(path, line, problem or f"{label}: index {quoted(url)} is refused")
    return url.rstrip("/") if url.endswith("//") else url


@lru_cache(maxsize=256)
def _index_ok(url: str) -> bool:
    return index_url_problem(url, what="index") is None


def check_python(
    spec: object, selection: Selection, path: Path, line: int | None, key: str
) -> None:
    """Refuse a lock whose Python range leaves out the image's Python."""
    if spec is None or spec == "" or spec == "*":
        return
    if not isinstance(spec, str):
        raise LockfileError(path, line, f"'{key}' must be a string")
    try:
        allowed = selection.python_allowed(spec)
    except InvalidSpecifier:
        return  # a poetry-style range is checked by the reader that knows its syntax
    if not allowed:
        raise LockfileError(
            path,
            line,
            f"{key} {quoted(spec)} excludes Python {selection.python}, the image's Python",
            hint="build on a base with a Python the lock allows (init --python X.Y), "
            "or relock for this one",
        )


_WHEEL_NAME_RE = re.compile(r"[A-Za-z0-9](?:[A-Za-z0-9._]*[A-Za-z0-9])?")


def _wheel_name_version(filename: str) -> tuple[str, Version | None]:
    """The name and version a wheel's file name gives (the version None when it is not
    one). Its tags were matched by :meth:`Selection.wheel_fits` already: parsing them again
    into tag sets (``parse_wheel_filename``) was a third of reading a uv.lock."""
    parts = filename[:-4].split("-")
    if len(parts) not in (5, 6) or not _WHEEL_NAME_RE.fullmatch(parts[0]):
        return "", None
    if len(parts) == 6 and not parts[2][:1].isdigit():  # a build tag starts with a digit
        return "", None
    try:
        return canonicalize_name(parts[0]), Version(parts[1])
    except InvalidVersion:
        return canonicalize_name(parts[0]), None


def _is_wheel_of(filename: str, name: str, version: str) -> bool:
    """True when the wheel ``filename`` is one of ``name`` (canonical) at ``version``."""
    parts = filename[:-4].split("-")
    if parts[0] == name and parts[1:2] == [version] and _WHEEL_NAME_RE.fullmatch(name):
        # As written in the lock (most wheels): no name or version to normalize, only the
        # shape of the name left to check, as _wheel_name_version does.
        return len(parts) == 5 or (len(parts) == 6 and parts[2][:1].isdigit())
    wheel_name, wheel_version = _wheel_name_version(filename)
    return wheel_name == name and wheel_version == Version(version)


def wheel_hashes(
    files: Iterable[tuple[str, object]],
    name: str,
    version: str,
    selection: Selection,
    path: Path,
    locate: Callable[[str], int | None],
    hint: str,
    *,
    allow_none: bool = False,
) -> tuple[str, ...]:
    """The sha256 hashes of the wheels among ``files`` (file name, hash) that fit the platform.

    Refuses a malformed or missing hash on a wheel that fits, a wheel of another package or
    version, and (unless ``allow_none``: the caller has an sdist to build) a package left
    with no wheel for the platform."""
    label = f"package {name} {version}"
    seen = False
    out: list[str] = []
    for filename, digest in files:
        seen = True
        if not selection.wheel_fits(filename):
            continue
        # Each problem is located (a scan of the lock's lines) only once it is found.
        if not _is_wheel_of(filename, name, version):
            raise LockfileError(
                path,
                locate(filename),
                f"{label}: wheel {quoted(filename)} is not a wheel of {name} {version}",
            )
        if not isinstance(digest, str) or not digest:
            raise LockfileError(
                path,
                locate(filename),
                f"{label}: wheel {quoted(filename)} has no hash: every wheel needs a sha256",
                hint=hint,
            )
        normal = check_hash(digest)
        if normal is None:
            raise LockfileError(
                path, locate(filename), f"{label}: {hash_problem(digest)}", hint=hint
            )
        if not normal.startswith("sha256:"):
            raise LockfileError(
                path,
                locate(filename),
                f"{label}: wheel {quoted(filename)} has no sha256 hash",
                hint=hint,
            )
        out.append(normal)
    if not out and not allow_none:
        line = locate(name)
        if seen or selection.locks_foreign_wheels(name, version):
            what = "its wheels are for other platforms or Pythons"
        else:
            what = "no files at all locked"
        raise NoWheelError(
            path,
            line,
            f"{label} has no wheel for {selection.label} ({what}) and no hashed sdist "
            "to build one from",
            hint="lock a version with a wheel for this platform, or choose another --python",
            label=label,
        )
    return tuple(sorted(set(out)))


class NoWheelError(LockfileError):
    """A package with no wheel for the selection (its Python, machine) and no hashed sdist."""

    def __init__(
        self, path: Path | str, line: int | None, problem: str, *, hint: str | None, label: str
    ) -> None:
        super().__init__(path, line, problem, hint=hint)
        self.label = label


class NoWheels:
    """A lock's packages read one by one (``with found.each(): ...``), then :meth:`check`:
    every package with no wheel for the selection is named in one error, the first with its
    line and the others after it, not only the first (a platform a lock does not cover lacks
    several, often)."""

    SHOWN = 8

    def __init__(self) -> None:
        self.found: list[NoWheelError] = []

    @contextmanager
    def each(self) -> Iterator[None]:
        try:
            yield
        except NoWheelError as exc:
            self.found.append(exc)

    def check(self) -> None:
        if not self.found:
            return
        first, rest = self.found[0], self.found[1:]
        if not rest:
            raise first
        named = [f"{e.label} (line {e.line})" if e.line else e.label for e in rest[: self.SHOWN]]
        if len(rest) > self.SHOWN:
            named.append(f"and {len(rest) - self.SHOWN} more")
        raise NoWheelError(
            first.path,
            first.line,
            f"{first.problem}; nor do {', '.join(named)}",
            hint=first.hint,
            label=first.label,
        )


def wheels_or_sdist(
    files: Iterable[tuple[str, object]],
    sdist: tuple[str, str | None, object] | None,
    name: str,
    version: str,
    selection: Selection,
    path: Path,
    locate: Callable[[str], int | None],
    hint: str,
    *,
    index: str | None = None,
) -> tuple[tuple[str, ...], SourceArchive | None]:
    """What every native reader installs for one package: the sha256 hashes of its wheels
    that fit the platform (:func:`wheel_hashes`), or, when none fits and the lock records an
    sdist (``sdist``: its file name, URL, None where the lock has none and ``index`` is where
    to look it up, and hash as the lock writes them), that sdist to build
    (:class:`~reprobuild.locks.records.SourceArchive`, its hash as the only one)."""
    hashes = wheel_hashes(
        files, name, version, selection, path, locate, hint, allow_none=sdist is not None
    )
    if hashes or sdist is None:
        return hashes, None
    source = sdist_archive(sdist, name, version, path, locate, hint, index=index)
    return (source.sha256,), source


def split_sdist(
    files: list[tuple[str, object]],
) -> tuple[list[tuple[str, object]], tuple[str, str | None, object] | None]:
    """A lock that lists every file of a package as (file name, hash) with no URL (poetry.lock,
    pdm.lock): its wheels, and its sdist as ``(file name, None, hash)`` (a ``.tar.gz`` over a
    ``.zip``), None where it has none."""
    wheels = [(f, h) for f, h in files if f.endswith(".whl")]
    sdists = sorted(
        ((f, h) for f, h in files if SOURCE_ARCHIVE_RE.fullmatch(f)),
        key=lambda fh: not fh[0].endswith(".tar.gz"),
    )
    return wheels, ((sdists[0][0], None, sdists[0][1]) if sdists else None)


def sdist_archive(
    sdist: tuple[str, str | None, object],
    name: str,
    version: str,
    path: Path,
    locate: Callable[[str], int | None],
    hint: str,
    *,
    index: str | None = None,
) -> SourceArchive:
    """The sdist ``(file name, URL, hash)`` of ``name`` ``version`` as a checked record:
    its name is the package's (PEP 625 or the older un-normalized form), its URL is one the
    host may fetch, its hash a sha256. A lock that names the file but not its URL (poetry.lock,
    pdm.lock) gives ``index``, the simple index the host finds the file on."""
    filename, url, digest = sdist
    label = f"package {name} {version}"
    line = locate(filename)
    try:
        # "name-version.tar.gz" (older sdists keep the project's own spelling of the name).
        stem = filename.removesuffix(".tar.gz").removesuffix(".zip")
        sdist_name, _, sdist_version = stem.rpartition("-")
        fits = canonicalize_name(sdist_name) == name and Version(sdist_version) == Version(version)
    except InvalidVersion:
        fits = False
    if not fits:
        raise LockfileError(
            path, line, f"{label}: sdist {quoted(filename)} is not an sdist of {name} {version}"
        )
    if not isinstance(digest, str) or not digest:
        raise LockfileError(
            path,
            line,
            f"{label}: sdist {quoted(filename)} has no hash: an sdist is built only when its "
            "sha256 is locked",
            hint=hint,
        )
    normal = check_hash(digest)
    if normal is None or not normal.startswith("sha256:"):
        problem = (
            hash_problem(digest)
            if normal is None
            else f"sdist {quoted(filename)} has no sha256 hash"
        )
        raise LockfileError(path, line, f"{label}: {problem}", hint=hint)
    if url is None and index is None:
        raise LockfileError(path, line, f"{label}: sdist {quoted(filename)} has no URL")
    url_refused = None if url is None else index_url_problem(url, what=f"{label}: sdist")
    if url_refused is not None:
        raise LockfileError(path, line, url_refused)
    try:  # with no URL, the host finds the file on ``index``
        return SourceArchive(
            filename=filename, sha256=normal, url=url, index=index if url is None else None
        )
    except ValueError as exc:
        raise LockfileError(path, line, f"{label}: {exc}") from None


class Opened(NamedTuple):
    """A native lock opened for one selection: its document, its lines for ``file:line``
    lookups, and the selection it is read for (the default one when none was given)."""

    doc: dict[str, Any]
    lines: LockLines
    selection: Selection


def open_toml_lock(text: str, path: Path, selection: Selection | None, hint: str) -> Opened:
    """The one opening of a TOML native lock (uv.lock, poetry.lock, pdm.lock): the wheels
    ``selection`` cannot install pruned from the text (line numbers kept), the rest parsed
    (a syntax error is one ``file:line`` refusal), and the text's lines indexed by header."""
    selection = selection or Selection()
    doc = load_toml(selection.prune_foreign_wheels(text), path, hint)
    return Opened(doc, LockLines(text), selection)


def open_json_lock(text: str, path: Path, selection: Selection | None, hint: str) -> Opened:
    """The one opening of a JSON native lock (Pipfile.lock): parsed, a syntax error one
    ``file:line`` refusal; its lines indexed for lookups (no headers: JSON has none)."""
    selection = selection or Selection()
    lines = LockLines(text, header="\0")
    try:
        doc = json.loads(text)
    except json.JSONDecodeError as exc:
        raise LockfileError(path, exc.lineno, f"is not valid JSON: {exc.msg}", hint=hint) from exc
    except RecursionError:
        raise LockfileError(path, None, "is not valid JSON: nested too deeply") from None
    return Opened(doc, lines, selection)


def package_tables(doc: dict[str, Any], path: Path, hint: str) -> list[dict[str, Any]]:
    """The lock's ``[[package]]`` tables (none is an empty list); anything else is refused."""
    raw = doc.get("package", [])
    if not isinstance(raw, list) or not all(isinstance(p, dict) for p in raw):
        raise LockfileError(path, None, "'package' must be an array of tables", hint=hint)
    return raw


class Pins:
    """The record every native reader writes into: one pin per package (version, sha256
    hashes, the line it was read from) and the indexes the pins come from, in the order first
    met; :meth:`requirements` and :meth:`index_options` turn them into what a
    :class:`~reprobuild.locks.records.Lock` holds."""

    def __init__(self) -> None:
        self._chosen: dict[str, tuple[str, tuple[str, ...], int, SourceArchive | None]] = {}
        self._urls: dict[str, str] = {}
        self.indexes: list[str] = []
        self._sources: dict[str, SourcePin] = {}
        self._index: dict[str, str | None] = {}

    def __bool__(self) -> bool:
        return bool(self._chosen) or bool(self._sources)

    def source(self, pin: SourcePin) -> None:
        """Pin a package built from a git commit or a project directory (see
        :mod:`reprobuild.locks.sources`); the first pin of a name stays."""
        self._sources.setdefault(pin.name, pin)

    def source_pins(self) -> tuple[SourcePin, ...]:
        """The source pins, sorted by name."""
        return tuple(sorted(self._sources.values(), key=lambda p: p.name))

    def version_of(self, name: str) -> str | None:
        """The version pinned for ``name`` so far (``None`` when none is)."""
        pin = self._chosen.get(name)
        return pin[0] if pin is not None else None

    def pin(
        self,
        name: str,
        version: str,
        hashes: tuple[str, ...],
        line: int,
        index: str | None = None,
        *,
        keep_first: bool = False,
        source: SourceArchive | None = None,
        url: str | None = None,
    ) -> None:
        """Pin ``name``; ``keep_first``: a pin already there stays (a reader that meets the
        same version twice keeps the first one it met). ``index`` is noted once. ``source``:
        the package is built from this archive (``hashes`` then holds its sha256 alone).
        ``url``: the package is this direct-URL wheel (:mod:`reprobuild.locks.urlwheels`)."""
        if not (keep_first and name in self._chosen):
            self._chosen[name] = (version, hashes, line, source)
            self._urls.pop(name, None)
            if url is not None:
                self._urls[name] = url
            self._index[name] = index
        if index is not None and index not in self.indexes:
            self.indexes.append(index)

    def requirements(self) -> tuple[Requirement, ...]:
        """The records, sorted as every reader sorts them."""
        return sorted_requirements(
            [
                Requirement(
                    name=name,
                    version=version,
                    hashes=hashes,
                    line=line,
                    source=source,
                    url=self._urls.get(name),
                    index=self._index.get(name),
                )
                for name, (version, hashes, line, source) in self._chosen.items()
            ]
        )

    def index_options(self, first: str | None = None) -> IndexOptions:
        """The indexes as pip options: ``first`` (when among them) as the index, the others
        as extra indexes in the order met; none at all is pip's default."""
        indexes = list(self.indexes)
        if first is not None and first in indexes:
            indexes.remove(first)
            indexes.insert(0, first)
        return IndexOptions(
            index_url=indexes[0] if indexes else None, extra_index_urls=tuple(indexes[1:])
        )


def source_refusal(kind: str, name: str, where: str) -> str:
    return (
        f"package {name} comes from a {kind} ({quoted(where)}): a hermetic build installs only "
        "hashed wheels from an index"
    )


SOURCE_HINT = "publish the package to an index (or a local --find-links wheel folder) and relock"
