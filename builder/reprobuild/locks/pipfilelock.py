"""pipenv's ``Pipfile.lock`` (JSON, ``pipfile-spec`` 6) into pinned requirements for one platform.

Each section (``default``, ``develop``, or a custom pipenv category) is already a flat set of
pins with markers; the reader takes the sections asked for (``default`` alone unless groups
are given: ``dev`` and ``develop`` both mean ``develop``), evaluates each marker for the image's
platform, and keeps each entry's named index from ``_meta.sources``. A Pipfile.lock records
hashes without file names, so every hash of a pin is kept (sdists' too): the host-side fetch
takes wheels only and checks each against them, and a package with no fitting wheel is found
as an sdist on its index by hash when the build lock is written
(:func:`reprobuild.locks.wheels.locate_sdists`).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from reprobuild.errors import LockfileError
from reprobuild.locks.native import (
    SOURCE_HINT,
    LockLines,
    Pins,
    Selection,
    check_index,
    check_marker,
    check_name,
    check_version,
    open_json_lock,
    source_refusal,
)
from reprobuild.locks.records import (
    IndexOptions,
    Requirement,
    SourcePin,
    check_hash,
    hash_problem,
    quoted,
    wheel_file_version,
)
from reprobuild.locks.sources import git_pin, path_pin
from reprobuild.locks.urlwheels import is_wheel_url, native_url_wheel, wheel_filename

__all__ = ["parse_pipfilelock"]

_HINT = "relock with `pipenv lock`"
_SOURCE_KEYS = {
    "git": "git repository",
    "hg": "mercurial repository",
    "svn": "subversion repository",
    "bzr": "bazaar repository",
    "path": "local path",
    "file": "direct URL or file",
    "editable": "local editable directory",
}


def parse_pipfilelock(
    text: str, path: Path, selection: Selection | None = None
) -> tuple[tuple[Requirement, ...], IndexOptions, tuple[str, ...], tuple[SourcePin, ...]]:
    """Parse ``Pipfile.lock`` text for ``selection``; return requirements, options, notes and
    the packages built from a git commit (``ref``) or a project directory (``path``)."""
    path = Path(path)
    doc, lines, selection = open_json_lock(text, path, selection, _HINT)
    meta = _meta(doc, selection, path, lines)
    _check_python(meta, selection, path, lines)
    sources = _sources(meta, path, lines)
    pins = Pins()
    pins.indexes.append(next(iter(sources.values())))  # the first source is the index
    notes: list[str] = []
    for section in _sections(selection):
        _pin_section(doc, section, sources, selection, path, lines, pins, notes)
    if not pins:
        raise LockfileError(path, None, "pins no package for the sections asked for", hint=_HINT)
    return pins.requirements(), pins.index_options(), tuple(notes), pins.source_pins()


def _meta(doc: object, selection: Selection, path: Path, lines: LockLines) -> dict[str, Any]:
    """The ``_meta`` object of a lock this reader reads (spec 6), and no extras asked for."""
    if not isinstance(doc, dict) or not isinstance(doc.get("_meta"), dict):
        raise LockfileError(path, None, "has no '_meta' object: not a Pipfile.lock", hint=_HINT)
    meta: dict[str, Any] = doc["_meta"]
    spec = meta.get("pipfile-spec")
    if spec != 6:
        raise LockfileError(
            path,
            lines.find('"pipfile-spec"'),
            f"pipfile-spec {quoted(str(spec))} is not supported: only 6",
            hint=_HINT,
        )
    if selection.extras:
        raise LockfileError(
            path,
            None,
            f"a Pipfile.lock has no extras ({', '.join(selection.extras)} asked for): its "
            "sections are the groups",
            hint="choose sections with --group (default, develop, or a pipenv category)",
        )
    return meta


def _sections(selection: Selection) -> list[str]:
    """The sections to install: ``default``, then each group (``dev`` means ``develop``)."""
    sections = ["default"]
    for group in selection.groups:
        section = "develop" if group == "dev" else group
        if section not in sections:
            sections.append(section)
    return sections


def _pin_section(
    doc: dict[str, Any],
    section: str,
    sources: dict[str, str],
    selection: Selection,
    path: Path,
    lines: LockLines,
    pins: Pins,
    notes: list[str],
) -> None:
    """Pin the entries of one section whose marker holds (a later section's pin of the same
    version replaces an earlier one; another version is refused)."""
    entries = doc.get(section)
    if section != "default" and not isinstance(entries, dict):
        have = sorted(k for k in doc if k != "_meta")
        raise LockfileError(
            path,
            None,
            f"has no section {quoted(section)} (it has {', '.join(have) or 'none'})",
        )
    if not isinstance(entries, dict):
        entries = {}
    start = lines.find(f'"{section}"') or 1
    for raw_name, entry in entries.items():
        line = lines.find(f'"{raw_name}"', start)
        req = _entry(raw_name, entry, section, sources, selection, path, line)
        if req is None:
            continue
        if isinstance(req, SourcePin):
            if req.kind == "path" and req.location == ".":
                note = (
                    f"{path.name}: the project {req.name} itself is not installed from the lock: "
                    "its source is copied into the image with `include`"
                )
                if note not in notes:
                    notes.append(note)
            else:
                pins.source(req)
            continue
        name, version, hashes, index, url = req
        other = pins.version_of(name)
        if other is not None and other != version:
            raise LockfileError(
                path,
                line,
                f"package {name} is pinned to {other} and to {version} in the sections "
                "asked for: one version per package",
                hint=_HINT,
            )
        pins.pin(name, version, hashes, line or 0, index, url=url)


def _check_python(meta: dict[str, Any], selection: Selection, path: Path, lines: LockLines) -> None:
    requires = meta.get("requires") or {}
    if not isinstance(requires, dict):
        return
    for key in ("python_full_version", "python_version"):
        wanted = requires.get(key)
        if wanted is None:
            continue
        have = selection.full_version if key == "python_full_version" else selection.python
        if str(wanted) != have:
            raise LockfileError(
                path,
                lines.find(f'"{key}"'),
                f"requires {key} {quoted(str(wanted))}, not Python {selection.python}, the "
                "image's Python",
                hint=f"build on a base with Python {wanted} (init --python {wanted}), or relock",
            )
        return


def _sources(meta: dict[str, Any], path: Path, lines: LockLines) -> dict[str, str]:
    raw = meta.get("sources")
    if not isinstance(raw, list) or not raw:
        raise LockfileError(
            path, lines.find('"sources"'), "_meta.sources names no index", hint=_HINT
        )
    out: dict[str, str] = {}
    for source in raw:
        if not isinstance(source, dict) or not isinstance(source.get("name"), str):
            raise LockfileError(path, lines.find('"sources"'), "a source has no 'name'")
        url = source.get("url")
        line = lines.find(str(url)) if isinstance(url, str) else None
        out[source["name"]] = check_index(url, f"source {source['name']}", path, line)
    return out


def _entry(
    raw_name: str,
    entry: object,
    section: str,
    sources: dict[str, str],
    selection: Selection,
    path: Path,
    line: int | None,
) -> tuple[str, str, tuple[str, ...], str | None, str | None] | SourcePin | None:
    name = check_name(raw_name, path, line)
    label = f"package {name}"
    if not isinstance(entry, dict):
        raise LockfileError(path, line, f"{label} in {section!r} is not an object")
    marker = check_marker(entry.get("markers"), label, path, line)
    if not selection.marker_holds(marker):
        return None
    if isinstance(entry.get("git"), str):
        return git_pin(name, "0", entry["git"], _text(entry.get("ref")), path, line)
    if isinstance(entry.get("path"), str) and "file" not in entry:
        return path_pin(
            name, "0", entry["path"], path, line, editable=entry.get("editable") is True
        )
    if is_wheel_url(entry.get("file")):
        return _url_wheel(entry, name, selection, path, line)
    for key, kind in _SOURCE_KEYS.items():
        if key in entry and entry[key] not in (False, None):
            raise LockfileError(
                path, line, source_refusal(kind, name, str(entry[key])), hint=SOURCE_HINT
            )
    pin = entry.get("version")
    if not isinstance(pin, str) or not pin.startswith("=="):
        raise LockfileError(
            path,
            line,
            f"{label} is not pinned with '==' (version {quoted(str(pin))})",
            hint=_HINT,
        )
    version = check_version(pin.lstrip("="), label, path, line)
    index_name = entry.get("index", next(iter(sources)))
    if index_name not in sources:
        raise LockfileError(
            path,
            line,
            f"{label} names index {quoted(str(index_name))}, which _meta.sources does not "
            f"define (it defines {', '.join(sources)})",
            hint="add the index to the Pipfile's [[source]] and relock with `pipenv lock`",
        )
    hashes = entry.get("hashes")
    if not isinstance(hashes, list) or not hashes:
        raise LockfileError(
            path, line, f"{label} {version} has no hashes: every pin needs a sha256", hint=_HINT
        )
    out: list[str] = []
    for value in hashes:
        normal = check_hash(value) if isinstance(value, str) else None
        if normal is None:
            raise LockfileError(path, line, f"{label}: {hash_problem(str(value))}", hint=_HINT)
        out.append(normal)
    if not any(h.startswith("sha256:") for h in out):
        raise LockfileError(path, line, f"{label} {version} has no sha256 hash", hint=_HINT)
    return name, version, tuple(sorted(set(out))), sources[index_name], None


def _url_wheel(
    entry: dict[str, Any], name: str, selection: Selection, path: Path, line: int | None
) -> tuple[str, str, tuple[str, ...], None, str]:
    """A direct-URL wheel (``"file": "https://host/x.whl"``, its sha256 in ``hashes``):
    version (as pinned, else the wheel's), hashes, no index, and the URL."""
    url = entry["file"]
    pin = entry.get("version")
    if isinstance(pin, str) and pin.startswith("=="):
        version = check_version(pin.lstrip("="), f"package {name}", path, line)
    else:
        version = wheel_file_version(wheel_filename(url), name, f"package {name}", line or 0, path)
    hashes = entry.get("hashes")
    listed = [h for h in hashes if isinstance(h, str)] if isinstance(hashes, list) else []
    digest = next((h for h in listed if h.startswith("sha256:")), listed[0] if listed else None)
    found, url = native_url_wheel(url, digest, name, version, selection, path, line, _HINT)
    return name, version, found, None, url


def _text(value: object) -> str | None:
    return value if isinstance(value, str) else None
