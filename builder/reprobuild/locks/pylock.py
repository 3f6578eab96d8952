"""PEP 751 ``pylock.toml`` (``lock-version = "1.0"``, wheels only) into pinned requirements.

Split from :mod:`reprobuild.locks.lockfile`, whose records, refusals and message style it shares.
Line numbers for messages come from one :class:`_Lines` index built once per file and
searched only inside the package's own ``[[packages]]`` section, so a lock with thousands
of packages and wheels parses in linear time.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any
from urllib.parse import unquote, urlsplit

from packaging.utils import canonicalize_name
from packaging.version import InvalidVersion, Version

from reprobuild.errors import LockfileError, shorten
from reprobuild.locks.native import sdist_archive
from reprobuild.locks.records import (
    ALLOWED_HASHES,
    NAME_RE,
    IndexOptions,
    Requirement,
    SourceArchive,
    check_duplicates,
    check_hash,
    hash_problem,
    index_url_problem,
    load_toml,
    normal_marker,
    physical_lines,
    quoted,
    sorted_requirements,
    url_problem,
    wheel_file_version,
)
from reprobuild.locks.urlwheels import is_wheel_url, wheel_filename, wheel_url_problem

__all__ = ["parse_pylock"]

_HEADER_RE = re.compile(r"\s*\[\[\s*packages\s*\]\]\s*(#.*)?$")
_EXPORT_HINT = "regenerate it with `uv export --format pylock.toml`"


class _Lines:
    """The file's physical lines, split once; searches stay inside a line range."""

    def __init__(self, text: str) -> None:
        self.lines = physical_lines(text)
        self.headers = [n for n, line in enumerate(self.lines, start=1) if _HEADER_RE.match(line)]

    def find(self, needle: str, start: int = 1, end: int | None = None) -> int | None:
        """First line number in ``[start, end)`` holding ``needle``."""
        stop = len(self.lines) if end is None else min(end - 1, len(self.lines))
        for number in range(max(start, 1), stop + 1):
            if needle in self.lines[number - 1]:
                return number
        return None


class _Where:
    """Where one package's messages point: its header line, and lines inside its section."""

    def __init__(self, lines: _Lines, line: int, end: int | None) -> None:
        self.lines = lines
        self.line = line
        self.end = end

    @property
    def header(self) -> int | None:
        return self.line or None

    def at(self, needle: str) -> int | None:
        if not self.line:
            return None
        return self.lines.find(needle, self.line, self.end) or self.header


def _check_version(doc: dict[str, Any], lines: _Lines, path: Path) -> None:
    version = doc.get("lock-version")
    if version is None:
        raise LockfileError(
            path, None, "has no 'lock-version': a PEP 751 lock needs lock-version = \"1.0\""
        )
    if not isinstance(version, str):
        raise LockfileError(
            path,
            lines.find("lock-version"),
            f'lock-version must be a string, "1.0" in quotes; got {_toml_type(version)}, '
            f"{shorten(version, 40)}",
            hint='quote it: lock-version = "1.0" (PEP 751)',
        )
    if version != "1.0":
        raise LockfileError(
            path,
            lines.find("lock-version"),
            f'lock-version {quoted(str(version))} is not supported: only "1.0" (PEP 751)',
            hint="regenerate it with a tool that writes PEP 751 lock-version 1.0",
        )


def _toml_type(value: object) -> str:
    """``value``'s TOML type with its article: 'a float', 'an integer', ..."""
    names = {bool: "a boolean", int: "an integer", float: "a float", list: "an array"}
    return names.get(type(value), "a table" if isinstance(value, dict) else "a date or time")


def _packages(doc: dict[str, Any], lines: _Lines, path: Path) -> list[dict[str, Any]]:
    packages = doc.get("packages", [])
    if not isinstance(packages, list) or not all(isinstance(p, dict) for p in packages):
        raise LockfileError(
            path, lines.find("packages"), "'packages' must be an array of tables ([[packages]])"
        )
    if not packages:
        raise LockfileError(
            path, None, "holds no packages: an empty lock would install nothing", hint=_EXPORT_HINT
        )
    return packages


def _where(lines: _Lines, position: int, count: int, package: dict[str, Any]) -> _Where:
    headers = lines.headers
    if len(headers) == count:
        end = headers[position + 1] if position + 1 < count else None
        return _Where(lines, headers[position], end)
    name = package.get("name")  # an inline packages array: find the entry by its name
    line = lines.find(f'"{name}"') if isinstance(name, str) else None
    return _Where(lines, line or 0, None)


def parse_pylock(text: str, path: Path) -> tuple[tuple[Requirement, ...], IndexOptions]:
    """Parse PEP 751 ``pylock.toml`` text (wheels only); return requirements and options."""
    path = Path(path)
    doc = load_toml(text, path, _EXPORT_HINT)
    lines = _Lines(text)
    _check_version(doc, lines, path)
    packages = _packages(doc, lines, path)
    requirements: list[Requirement] = []
    indexes: list[str] = []
    for position, package in enumerate(packages):
        if _is_the_project(package, path):
            continue
        where = _where(lines, position, len(packages), package)
        req, index = _pylock_package(package, where, path)
        requirements.append(req)
        if index is not None and index not in indexes:
            indexes.append(index)
    check_duplicates(requirements, path)
    options = IndexOptions(
        index_url=indexes[0] if indexes else None, extra_index_urls=tuple(indexes[1:])
    )
    return sorted_requirements(requirements), options


def _is_the_project(package: dict[str, Any], path: Path) -> bool:
    """True for the entry of the project itself: a ``directory`` whose path is the lock's own
    folder (``uv export --format pylock.toml`` writes ``directory = { path = ".", editable =
    true }`` for it). It is not installed from the lock, as uv.lock's root is not: the
    project's source is what the image's ``include`` copies."""
    directory = package.get("directory")
    if not isinstance(directory, dict) or any(k in package for k in ("vcs", "archive")):
        return False
    where = directory.get("path")
    if not isinstance(where, str) or not where:
        return False
    folder = path.parent.resolve()
    return (folder / where).resolve() == folder


def _package_name(package: dict[str, Any], where: _Where, path: Path) -> str:
    name = package.get("name")
    if not isinstance(name, str) or not name:
        raise LockfileError(path, where.header, "a [[packages]] entry has no 'name'")
    if not NAME_RE.fullmatch(name):
        raise LockfileError(
            path,
            where.at(name),
            f"package name {quoted(name)} is not a valid package name (PEP 508: letters, digits, "
            "'.', '_' and '-', starting and ending with a letter or digit)",
        )
    return name


def _package_version(package: dict[str, Any], label: str, where: _Where, path: Path) -> str:
    for source in ("vcs", "directory", "archive"):
        if source in package:
            raise LockfileError(
                path,
                where.header,
                f"{label} comes from a {source}: only wheels (with hashes) are accepted",
                hint="lock the package from an index so that its wheels are recorded",
            )
    version = package.get("version")
    if not isinstance(version, str):
        raise LockfileError(
            path, where.header, f"{label} has no 'version': only packages pinned to a version"
        )
    try:
        Version(version)
    except InvalidVersion as exc:
        raise LockfileError(
            path,
            where.at(version),
            f"{label}: version {quoted(version)} is not a valid version (PEP 440)",
        ) from exc
    if not re.fullmatch(r"[A-Za-z0-9.+!_-]+", version):
        raise LockfileError(
            path, where.at(version), f"{label}: version {quoted(version)} is not plain"
        )
    return version


def _package_marker(package: dict[str, Any], label: str, where: _Where, path: Path) -> str | None:
    marker_text = package.get("marker")
    if marker_text is None:
        return None
    if not isinstance(marker_text, str):
        raise LockfileError(path, where.header, f"{label}: 'marker' must be a string")
    try:
        marker = normal_marker(marker_text)
    except ValueError as exc:
        raise LockfileError(
            path, where.at("marker"), f"{label}: marker {quoted(marker_text)} {exc}"
        ) from exc
    if re.search(r"\b(extras|dependency_groups)\b", marker):
        raise LockfileError(
            path,
            where.at("marker"),
            f"{label}: marker {quoted(marker)} selects extras or dependency groups, which a "
            "requirements file cannot express: only environment markers",
            hint="export the lock with the extras and groups you want already selected",
        )
    return marker


def _package_index(package: dict[str, Any], label: str, where: _Where, path: Path) -> str | None:
    index = package.get("index")
    if index is None:
        return None
    if not isinstance(index, str):
        raise LockfileError(path, where.header, f"{label}: 'index' must be a URL string")
    problem = index_url_problem(index, what=f"{label}: index")
    if problem is not None:
        raise LockfileError(path, where.at(index), problem)
    return index


def _pylock_package(
    package: dict[str, Any], where: _Where, path: Path
) -> tuple[Requirement, str | None]:
    name = _package_name(package, where, path)
    label = f"package {name}"
    archive = package.get("archive")
    if isinstance(archive, dict) and is_wheel_url(archive.get("url")):
        return _archive_wheel(package, name, label, where, path), None
    version = _package_version(package, label, where, path)
    marker = _package_marker(package, label, where, path)
    index = _package_index(package, label, where, path)
    wheels = package.get("wheels")
    if not wheels and isinstance(package.get("sdist"), dict):
        source = _pylock_sdist(package["sdist"], canonicalize_name(name), version, where, path)
        req = Requirement(
            name=canonicalize_name(name),
            version=version,
            hashes=(source.sha256,),
            marker=marker,
            line=where.line,
            source=source,
        )
        return req, index
    if not wheels:
        kind = "an sdist only" if "sdist" in package else "no wheels"
        raise LockfileError(
            path,
            where.header,
            f"{label} {quoted(version)[1:-1]} has {kind}: only wheels are accepted (sdists are "
            "built at install time and are not reproducible)",
            hint="lock for a platform that has wheels, or build and publish a wheel",
        )
    if not isinstance(wheels, list) or not all(isinstance(w, dict) for w in wheels):
        raise LockfileError(path, where.header, f"{label}: 'wheels' must be an array of tables")
    hashes: list[str] = []
    for wheel in wheels:
        hashes.extend(_pylock_wheel_hashes(wheel, name, version, label, where, path))
    req = Requirement(
        name=canonicalize_name(name),
        version=version,
        hashes=tuple(sorted(set(hashes))),
        marker=marker,
        line=where.line,
    )
    return req, index


def _archive_wheel(
    package: dict[str, Any], name: str, label: str, where: _Where, path: Path
) -> Requirement:
    """``[packages.archive]`` naming a wheel by its URL (PEP 751's direct reference): a wheel
    the host fetches from there (:mod:`reprobuild.locks.urlwheels`), its tags checked against
    the base when it is fetched."""
    archive = package["archive"]
    url = archive["url"]
    problem = wheel_url_problem(url, what=f"{label}: wheel")
    if problem is not None:
        raise LockfileError(path, where.at(url), problem)
    version = package.get("version")
    if version is None:
        version = wheel_file_version(wheel_filename(url), name, label, where.at(url) or 0, path)
    else:
        version = _package_version({"version": version}, label, where, path)
    wheel = {"url": url, "hashes": archive.get("hashes")}
    hashes = _pylock_wheel_hashes(wheel, name, version, label, where, path)
    return Requirement(
        name=canonicalize_name(name),
        version=version,
        hashes=tuple(sorted(set(hashes))),
        marker=_package_marker(package, label, where, path),
        url=url,
        line=where.line,
    )


def _pylock_sdist(
    sdist: dict[str, Any], name: str, version: str, where: _Where, path: Path
) -> SourceArchive:
    """A package's ``sdist`` table (PEP 751: ``name``, ``url``, ``hashes``) as the archive to
    build; the checks are every reader's (:func:`~reprobuild.locks.native.sdist_archive`)."""
    url = sdist.get("url")
    if not isinstance(url, str):
        raise LockfileError(
            path, where.header, f"package {name}: its sdist has no 'url' (a 'path' is not built)"
        )
    filename = sdist.get("name")
    if not isinstance(filename, str):
        filename = unquote(urlsplit(url).path.rsplit("/", 1)[-1])
    table = sdist.get("hashes")
    digest = table.get("sha256") if isinstance(table, dict) else None
    return sdist_archive(
        (filename, url, f"sha256:{digest}" if isinstance(digest, str) else None),
        name,
        version,
        path,
        lambda needle: where.at(needle),
        _EXPORT_HINT,
    )


def _wheel_location(wheel: dict[str, Any], label: str, where: _Where, path: Path) -> str:
    url = wheel.get("url")
    wheel_path = wheel.get("path")
    if url is None and wheel_path is None:
        raise LockfileError(path, where.header, f"{label}: a wheel has neither 'url' nor 'path'")
    location = url if isinstance(url, str) else wheel_path
    if not isinstance(location, str):
        raise LockfileError(path, where.header, f"{label}: a wheel's 'url'/'path' must be a string")
    if isinstance(url, str):
        problem = url_problem(url, schemes=("https", "http", "file"), what=f"{label}: wheel")
        if problem is not None:
            raise LockfileError(path, where.at(url), problem)
    return location


def _pylock_wheel_hashes(
    wheel: dict[str, Any], name: str, version: str, label: str, where: _Where, path: Path
) -> list[str]:
    location = _wheel_location(wheel, label, where, path)
    filename = wheel.get("name")
    if not isinstance(filename, str):
        filename = unquote(urlsplit(location).path.rsplit("/", 1)[-1])
    line_of_wheel = where.at(location)
    wheel_version = wheel_file_version(filename, name, label, line_of_wheel or 0, path)
    if Version(wheel_version) != Version(version):
        raise LockfileError(
            path,
            line_of_wheel,
            f"{label} {quoted(version)[1:-1]}: wheel {quoted(filename)} is version {wheel_version}",
        )
    table = wheel.get("hashes")
    if not isinstance(table, dict) or not table:
        raise LockfileError(
            path,
            line_of_wheel,
            f"{label}: wheel {quoted(filename)} has no hashes: each wheel needs "
            f'hashes = {{ sha256 = "<hex>" }} ({ALLOWED_HASHES})',
        )
    out: list[str] = []
    for algo, digest in table.items():
        value = f"{algo}:{digest}" if isinstance(digest, str) else f"{algo}:?"
        normal = check_hash(value)
        if normal is None:
            needle = digest if isinstance(digest, str) and digest else location
            raise LockfileError(path, where.at(needle), f"{label}: {hash_problem(value)}")
        out.append(normal)
    if not any(h.startswith("sha256:") for h in out):
        raise LockfileError(
            path,
            line_of_wheel,
            f"{label}: wheel {quoted(filename)} has no sha256 hash (only "
            f"{', '.join(sorted(str(a) for a in table))[:40]}): hermetic builds match wheels by "
            'sha256, so each wheel needs hashes = { sha256 = "<64 hex>" }',
            hint=_EXPORT_HINT,
        )
    return out
