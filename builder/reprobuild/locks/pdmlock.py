"""PDM's ``pdm.lock`` (``lock_version`` 4.x) into pinned requirements for one platform.

A lock written with PDM's ``inherit_metadata`` strategy (the default since PDM 2.11) records,
on each package, the groups that need it and the marker under which they do: the reader keeps
the packages of the groups asked for (``default``, plus each ``--group`` and ``--extra``: PDM
locks optional dependencies as groups too) whose marker holds for the image's platform, and
the wheels among each package's ``files`` that the platform installs.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from packaging.version import Version

from reprobuild.errors import LockfileError
from reprobuild.locks.native import (
    SOURCE_HINT,
    LockLines,
    NoWheels,
    Pins,
    Selection,
    check_marker,
    check_name,
    check_python,
    check_version,
    open_toml_lock,
    package_tables,
    source_refusal,
    split_sdist,
    wheels_or_sdist,
)
from reprobuild.locks.records import IndexOptions, Requirement, SourceArchive, SourcePin, quoted
from reprobuild.locks.sources import git_pin, path_pin
from reprobuild.locks.urlwheels import is_wheel_url, native_url_wheel

__all__ = ["parse_pdmlock"]

_PYPI = "https://pypi.org/simple"  # where pdm looks when the project names no source
_HINT = "relock with `pdm lock`"
_SOURCE_KEYS = {"url": "direct URL"}


def parse_pdmlock(
    text: str, path: Path, selection: Selection | None = None
) -> tuple[tuple[Requirement, ...], IndexOptions, tuple[str, ...], tuple[SourcePin, ...]]:
    """Parse ``pdm.lock`` text for ``selection``; return requirements, options, notes and
    the packages built from a git commit (``revision``) or a project directory (``path``)."""
    path = Path(path)
    doc, lines, selection = open_toml_lock(text, path, selection, _HINT)
    metadata = _metadata(doc, path, lines)
    _check_pythons(metadata, selection, path, lines)
    selection, wanted = _wanted_groups(metadata, selection, path, lines)
    raw = package_tables(doc, path, _HINT)
    pins = Pins()
    lines_of: dict[str, int] = {}  # the line each pinned name was read from
    lacking = NoWheels()
    for position, entry in enumerate(raw):
        line = lines.header_of(position, len(raw))
        picked = None
        with lacking.each():
            picked = _package(entry, wanted, selection, path, lines, line)
        if picked is None:
            continue
        if isinstance(picked, SourcePin):
            pins.source(picked)
            continue
        name, version_text, hashes, archive, url = picked
        other = pins.version_of(name)
        if other is not None and other != version_text:
            raise LockfileError(
                path,
                line or None,
                f"package {name}: both {other} (line {lines_of[name]}) and {version_text} "
                f"(line {line}) apply to {selection.label}",
                hint=_HINT,
            )
        lines_of.setdefault(name, line)
        pins.pin(name, version_text, hashes, line, keep_first=True, source=archive, url=url)
    lacking.check()
    if not pins:
        raise LockfileError(path, None, "pins no package for the groups asked for", hint=_HINT)
    return pins.requirements(), pins.index_options(), (), pins.source_pins()


def _metadata(doc: dict[str, Any], path: Path, lines: LockLines) -> dict[str, Any]:
    """The ``[metadata]`` table of a lock this reader reads (4.x, ``inherit_metadata``)."""
    metadata = doc.get("metadata")
    if not isinstance(metadata, dict):
        raise LockfileError(path, None, "has no [metadata] table: not a pdm.lock", hint=_HINT)
    version = metadata.get("lock_version")
    try:
        supported = isinstance(version, str) and Version(version).major == 4
    except ValueError:
        supported = False
    if not supported:
        raise LockfileError(
            path,
            lines.find("lock_version"),
            f"pdm.lock lock_version {quoted(str(version))} is not supported: only 4.x",
            hint="relock with PDM 2.11 or newer",
        )
    strategy = metadata.get("strategy") or []
    if "inherit_metadata" not in strategy:
        raise LockfileError(
            path,
            lines.find("strategy") or lines.find("lock_version"),
            "was locked without the inherit_metadata strategy, so it does not record which "
            "group and platform need each package",
            hint="relock with `pdm lock --strategy inherit_metadata` (PDM 2.11+ default)",
        )
    return metadata


def _wanted_groups(
    metadata: dict[str, Any], selection: Selection, path: Path, lines: LockLines
) -> tuple[Selection, list[str]]:
    """The selection with its default groups resolved, and the groups to install (each one
    the lock must hold): ``default``, the groups and the extras asked for."""
    locked_groups = metadata.get("groups") or ["default"]
    if selection.default_groups:  # `pdm sync` installs every group the lock holds
        selection = selection.with_groups(str(g) for g in locked_groups if g != "default")
    wanted = ["default", *selection.groups, *selection.extras]
    for group in wanted:
        if group not in locked_groups:
            raise LockfileError(
                path,
                lines.find("groups"),
                f"group {quoted(group)} is not locked (the lock has "
                f"{', '.join(str(g) for g in locked_groups)})",
                hint=f"relock with `pdm lock -G {group}`",
            )
    return selection, wanted


def _check_pythons(
    metadata: dict[str, Any], selection: Selection, path: Path, lines: LockLines
) -> None:
    line = lines.find("requires_python")
    if "requires_python" in metadata:
        check_python(metadata["requires_python"], selection, path, line, "requires_python")
    targets = metadata.get("targets")
    if isinstance(targets, list) and targets:
        for target in targets:
            if not isinstance(target, dict):
                continue
            try:
                check_python(
                    target.get("requires_python"), selection, path, line, "requires_python"
                )
            except LockfileError:
                continue
            return
        check_python(targets[0].get("requires_python"), selection, path, line, "requires_python")


def _package(
    entry: dict[str, Any],
    wanted: list[str],
    selection: Selection,
    path: Path,
    lines: LockLines,
    line: int,
) -> tuple[str, str, tuple[str, ...], SourceArchive | None, str | None] | SourcePin | None:
    name = check_name(entry.get("name"), path, line or None)
    groups = entry.get("groups")
    if not isinstance(groups, list):
        raise LockfileError(
            path,
            line or None,
            f"package {name} has no 'groups'",
            hint="relock with `pdm lock --strategy inherit_metadata`",
        )
    if not set(groups) & set(wanted):
        return None
    marker = check_marker(entry.get("marker"), f"package {name}", path, line or None)
    if not selection.marker_holds(marker):
        return None
    source = _source(entry, name, path, line)
    if source is not None:
        return source
    if is_wheel_url(entry.get("url")):
        return _url_wheel(entry, name, selection, path, line)
    for key, kind in _SOURCE_KEYS.items():
        if entry.get(key):
            raise LockfileError(
                path, line or None, source_refusal(kind, name, str(entry[key])), hint=SOURCE_HINT
            )
    version = check_version(entry.get("version"), f"package {name}", path, line or None)
    files = entry.get("files") or []
    if not isinstance(files, list):
        raise LockfileError(path, line or None, f"package {name}: 'files' must be a list")
    pairs: list[tuple[str, object]] = []
    for item in files:
        if not isinstance(item, dict) or not isinstance(item.get("file"), str):
            raise LockfileError(path, line or None, f"package {name}: a file entry has no 'file'")
        pairs.append((item["file"], item.get("hash")))

    def locate(needle: str) -> int | None:
        return lines.find(needle, line) if line else None

    # pdm.lock names each file, not its URL: an sdist is looked up on the lock's indexes
    wheels, sdist = split_sdist(pairs)
    hashes, archive = wheels_or_sdist(
        wheels, sdist, name, version, selection, path, locate, _HINT, index=_PYPI
    )
    return name, version, hashes, archive, None


def _url_wheel(
    entry: dict[str, Any], name: str, selection: Selection, path: Path, line: int
) -> tuple[str, str, tuple[str, ...], SourceArchive | None, str]:
    """A direct-URL wheel (``url = "https://host/x.whl"``, its hash in ``files``, where a
    wheel that does not fit the platform was blanked): version, hashes, no archive, URL."""
    version = check_version(entry.get("version"), f"package {name}", path, line or None)
    files = entry.get("files")
    tables = [f for f in files if isinstance(f, dict)] if isinstance(files, list) else []
    digest = tables[0].get("hash") if tables else None
    hashes, url = native_url_wheel(
        entry["url"], digest, name, version, selection, path, line or None, _HINT
    )
    return name, version, hashes, None, url


def _source(entry: dict[str, Any], name: str, path: Path, line: int) -> SourcePin | None:
    """A git entry (``git``, ``revision``: the commit PDM resolved) or a local one (``path``,
    or ``editable`` as a path in older PDMs); None for a package from an index."""
    version = entry.get("version")
    version_text = check_version(version, f"package {name}", path, line or None) if version else "0"
    git = entry.get("git")
    if isinstance(git, str):
        subdirectory = entry.get("subdirectory")
        return git_pin(
            name,
            version_text,
            git,
            _text(entry.get("revision")),
            path,
            line or None,
            subdirectory=subdirectory if isinstance(subdirectory, str) else None,
        )
    where = entry.get("path")
    editable = entry.get("editable")
    if isinstance(editable, str) and not isinstance(where, str):
        where, editable = editable, True
    if isinstance(where, str):
        return path_pin(name, version_text, where, path, line or None, editable=bool(editable))
    return None


def _text(value: object) -> str | None:
    return value if isinstance(value, str) else None
