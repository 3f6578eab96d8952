"""uv's own lock, ``uv.lock`` (``version = 1``), into pinned requirements for one platform.

The lock holds one graph for every platform, extra and group. The reader starts at the
project (the package whose source is ``{ editable = "." }`` or ``{ virtual = "." }``), follows
its dependencies, the optional dependencies of the extras asked for and the dependency groups
asked for, keeps an edge only when its marker holds for the image's platform (a conflicting
extra such as ``cpu`` against ``cu126`` is the marker value ``extra-<n>-<project>-cpu``), and so
reaches the one version each fork leaves. Those conflict markers are evaluated as uv evaluates
them: against the *set* of conflict items chosen (``extra != 'extra-8-nanochat-cpu'`` fails once
``cpu`` is chosen, whichever other value ``extra`` could take), not one value at a time as pip
evaluates a package's extras. Each package keeps its registry as an index, so
PyTorch's CPU index travels to the host-side wheel fetch.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any
from urllib.parse import unquote, urlsplit

from packaging.utils import canonicalize_name

from reprobuild.errors import LockfileError
from reprobuild.locks.native import (
    SOURCE_HINT,
    LockLines,
    NoWheels,
    Pins,
    Selection,
    check_index,
    check_marker,
    check_name,
    check_python,
    check_version,
    open_toml_lock,
    pyproject_beside,
    source_refusal,
    wheels_or_sdist,
)
from reprobuild.locks.records import IndexOptions, Requirement, SourceArchive, SourcePin, quoted
from reprobuild.locks.sources import git_pin, path_pin, split_uv_git
from reprobuild.locks.urlwheels import is_wheel_url, native_url_wheel

__all__ = ["parse_uvlock"]

_HINT = "relock with `uv lock`"
_SUPPORTED = (1,)


@dataclass(frozen=True)
class _Package:
    name: str
    version: str
    source: dict[str, Any]
    entry: dict[str, Any]
    line: int

    @property
    def key(self) -> tuple[str, str]:
        return (self.name, self.version)


def _conflict_item(kind: str, project: str, name: str) -> str:
    """uv's marker value for an extra or group of ``project`` (``extra-12-neuromonster-cpu``)."""
    return f"{kind}-{len(project)}-{project}-{name}"


def parse_uvlock(
    text: str, path: Path, selection: Selection | None = None
) -> tuple[tuple[Requirement, ...], IndexOptions, tuple[str, ...], tuple[SourcePin, ...]]:
    """Parse ``uv.lock`` text for ``selection``; return requirements, index options, notes
    and the packages built from a git commit or a workspace directory."""
    path = Path(path)
    doc, lines, selection = open_toml_lock(text, path, selection, _HINT)
    version = doc.get("version")
    if version not in _SUPPORTED:
        raise LockfileError(
            path,
            lines.find("version"),
            f"uv.lock version {quoted(str(version))} is not supported: only version = 1",
            hint="relock with a uv release that writes version = 1 (uv 0.4.x to 0.9.x)",
        )
    check_python(
        doc.get("requires-python"),
        selection,
        path,
        lines.find("requires-python"),
        "requires-python",
    )
    raw = doc.get("package", [])
    if not isinstance(raw, list) or not raw or not all(isinstance(p, dict) for p in raw):
        raise LockfileError(path, None, "holds no [[package]] entries", hint=_HINT)
    packages = [_package(entry, i, len(raw), lines, path) for i, entry in enumerate(raw)]
    by_name: dict[str, list[_Package]] = {}
    for package in packages:
        by_name.setdefault(package.name, []).append(package)
    root = _root(packages, path)
    notes: list[str] = []
    if root is not None and "editable" in root.source:
        notes.append(
            f"{path.name}: the project {root.name} itself is not installed from the lock: its "
            "source is copied into the image with `include`"
        )

    if root is not None and selection.default_groups:
        selection = selection.with_groups(_default_groups(root, path))
    walk = _Walk(selection, by_name, path, root)
    walk.run()
    pins = Pins()
    lacking = NoWheels()
    for package in sorted(walk.reached.values(), key=lambda p: p.line):
        kind = next(iter(package.source))
        if kind in _FROM_SOURCE:
            pin = _source_pin(package, kind, path)
            if pin is not None:
                pins.source(pin)
            continue
        if kind == "url" and is_wheel_url(package.source["url"]):
            hashes, url = _url_wheel(package, selection, path)
            pins.pin(package.name, package.version, hashes, package.line, url=url)
            continue
        with lacking.each():
            hashes, source, index = _hashes_and_index(package, selection, path, lines)
            pins.pin(package.name, package.version, hashes, package.line, index, source=source)
    lacking.check()
    # PyPI first: the others are extra indexes
    options = pins.index_options("https://pypi.org/simple")
    return pins.requirements(), options, tuple(notes), pins.source_pins()


# The sources built on the host into archives (a virtual member is never built: only its
# dependencies are installed).
_FROM_SOURCE = ("git", "path", "directory", "editable", "virtual")


def _source_pin(package: _Package, kind: str, path: Path) -> SourcePin | None:
    where = package.source[kind]
    line = package.line or None
    if not isinstance(where, str):
        raise LockfileError(
            path, line, f"package {package.name}: its {kind} source is not a string"
        )
    if kind == "virtual":
        return None
    if kind == "git":
        url, commit, asked, subdirectory = split_uv_git(where)
        return git_pin(
            package.name,
            package.version,
            url,
            commit or asked,
            path,
            line,
            subdirectory=subdirectory,
        )
    return path_pin(package.name, package.version, where, path, line, editable=kind == "editable")


def _package(
    entry: dict[str, Any], position: int, count: int, lines: LockLines, path: Path
) -> _Package:
    line = lines.header_of(position, count) or None
    name = check_name(entry.get("name"), path, line)
    source = entry.get("source")
    if not isinstance(source, dict) or len(source) != 1:
        raise LockfileError(path, line, f"package {name} has no 'source' table", hint=_HINT)
    version = entry.get("version")
    if version is None and ("virtual" in source or "editable" in source):
        version = "0"  # a virtual project carries no version
    version = check_version(version, f"package {name}", path, line)
    return _Package(name, version, source, entry, line or 0)


def _default_groups(root: _Package, path: Path) -> list[str]:
    """The groups ``uv sync`` installs unasked: ``[tool.uv] default-groups`` of the
    pyproject.toml beside the lock (a list, or ``"all"``), else ``dev`` when the project has it."""
    locked = [str(g) for g in root.entry.get("dev-dependencies") or {}]
    pyproject = pyproject_beside(path, _HINT) or {}
    chosen = pyproject.get("tool", {}).get("uv", {}).get("default-groups")
    if chosen == "all":
        return locked
    if isinstance(chosen, list):
        return [str(g) for g in chosen]
    return ["dev"] if "dev" in locked else []


def _root(packages: list[_Package], path: Path) -> _Package | None:
    roots = [
        p for p in packages if p.source.get("editable") == "." or p.source.get("virtual") == "."
    ]
    if len(roots) > 1:
        raise LockfileError(path, roots[1].line, "has more than one project rooted at '.'")
    return roots[0] if roots else None


class _Walk:
    """The packages reached from the project for one selection."""

    def __init__(
        self,
        selection: Selection,
        by_name: dict[str, list[_Package]],
        path: Path,
        root: _Package | None,
    ) -> None:
        self.selection = selection
        self.by_name = by_name
        self.path = path
        self.root = root
        self.reached: dict[str, _Package] = {}
        self.done: set[tuple[str, str, str, str]] = set()
        project = root.name if root is not None else ""
        self.marker_extras = [_conflict_item("extra", project, e) for e in selection.extras]
        self.marker_extras += [_conflict_item("group", project, g) for g in selection.groups]
        self.marker_extras += list(selection.extras)

    def run(self) -> None:
        if self.root is None:
            raise LockfileError(
                self.path,
                None,
                "names no project rooted at '.' (a workspace without a root project): "
                "reprobuild cannot tell what to install",
                hint="lock a project whose pyproject.toml sits beside uv.lock",
            )
        root = self.root
        edges = list(self._edges(root.entry.get("dependencies"), root))
        optional = root.entry.get("optional-dependencies") or {}
        groups = root.entry.get("dev-dependencies") or {}
        for extra in self.selection.extras:
            if extra not in optional:
                raise LockfileError(
                    self.path,
                    root.line or None,
                    f"extra {quoted(extra)} is not one of the project's extras "
                    f"({', '.join(sorted(optional)) or 'none'})",
                )
            edges.extend(self._edges(optional[extra], root))
        for group in self.selection.groups:
            if group not in groups:
                raise LockfileError(
                    self.path,
                    root.line or None,
                    f"group {quoted(group)} is not one of the project's dependency groups "
                    f"({', '.join(sorted(groups)) or 'none'})",
                )
            edges.extend(self._edges(groups[group], root))
        stack = edges
        while stack:
            package, extras = stack.pop()
            for extra in ("", *extras):
                done = (package.name, package.version, _where(package), extra)
                if done in self.done:
                    continue
                self.done.add(done)
                if not extra:
                    self._reach(package)
                    stack.extend(self._edges(package.entry.get("dependencies"), package))
                else:
                    optional = package.entry.get("optional-dependencies") or {}
                    stack.extend(self._edges(optional.get(extra), package))

    def _reach(self, package: _Package) -> None:
        if package is self.root:
            return
        other = self.reached.get(package.name)
        if other is not None and other is not package:
            raise LockfileError(
                self.path,
                package.line or None,
                f"package {package.name}: both {other.version} from {_where(other)} and "
                f"{package.version} from {_where(package)} apply to {self.selection.label} "
                "with the extras and groups asked for (conflicting extras?)",
                hint="choose one of the conflicting extras",
            )
        self.reached[package.name] = package

    def _edges(self, deps: object, parent: _Package) -> list[tuple[_Package, tuple[str, ...]]]:
        if deps is None:
            return []
        if not isinstance(deps, list):
            raise LockfileError(
                self.path,
                parent.line or None,
                f"package {parent.name}: dependencies must be a list",
            )
        out: list[tuple[_Package, tuple[str, ...]]] = []
        for dep in deps:
            if not isinstance(dep, dict) or not isinstance(dep.get("name"), str):
                raise LockfileError(
                    self.path, parent.line or None, f"package {parent.name}: a malformed dependency"
                )
            label = f"package {parent.name}: dependency {dep['name']}"
            marker = check_marker(dep.get("marker"), label, self.path, parent.line or None)
            if not self.selection.marker_holds(marker, self.marker_extras, together=True):
                continue
            target = self._target(dep, parent)
            extras = dep.get("extra") or []
            out.append((target, tuple(str(e) for e in extras)))
        return out

    def _target(self, dep: dict[str, Any], parent: _Package) -> _Package:
        name = canonicalize_name(dep["name"])
        candidates = self.by_name.get(name, [])
        if "version" in dep:
            candidates = [c for c in candidates if c.version == dep["version"]]
        if "source" in dep and len(candidates) > 1:
            candidates = [c for c in candidates if c.source == dep["source"]]
        if len(candidates) != 1:
            raise LockfileError(
                self.path,
                parent.line or None,
                f"package {parent.name}: dependency {quoted(name)} matches "
                f"{len(candidates)} [[package]] entries, not one",
                hint=_HINT,
            )
        return candidates[0]


def _basename(location: str) -> str:
    """The file name a wheel's URL or path ends in (percent-escapes decoded)."""
    if "?" in location or "#" in location:
        location = urlsplit(location).path
    name = location.rsplit("/", 1)[-1]
    return unquote(name) if "%" in name else name


def _where(package: _Package) -> str:
    return str(next(iter(package.source.values())))


def _hashes_and_index(
    package: _Package, selection: Selection, path: Path, lines: LockLines
) -> tuple[tuple[str, ...], SourceArchive | None, str]:
    line = package.line or None
    kind, where = next(iter(package.source.items()))
    if kind != "registry":
        names = {
            "git": "git repository",
            "path": "local path",
            "directory": "local directory",
            "editable": "local editable directory",
            "virtual": "local project",
            "url": "direct URL",
        }
        raise LockfileError(
            path,
            line,
            source_refusal(names.get(kind, f"{kind} source"), package.name, str(where)),
            hint=SOURCE_HINT,
        )
    if isinstance(where, str) and where.startswith("/"):  # a local index, by absolute path
        where = "file://" + where
    index = check_index(where, f"package {package.name}", path, line)
    wheels = package.entry.get("wheels") or []
    if not isinstance(wheels, list):
        raise LockfileError(path, line, f"package {package.name}: 'wheels' must be a list")
    files: list[tuple[str, object]] = []
    for wheel in wheels:
        location = wheel.get("url", wheel.get("path")) if isinstance(wheel, dict) else None
        if not isinstance(location, str):
            raise LockfileError(path, line, f"package {package.name}: a wheel has no 'url'")
        filename = wheel.get("filename")
        if not isinstance(filename, str):
            filename = _basename(location)
        files.append((filename, wheel.get("hash")))

    def locate(needle: str) -> int | None:
        return lines.find(needle, package.line) if package.line else None

    sdist = _sdist(package, path, line)
    hashes, source = wheels_or_sdist(
        files, sdist, package.name, package.version, selection, path, locate, _HINT
    )
    return hashes, source, index


def _url_wheel(package: _Package, selection: Selection, path: Path) -> tuple[tuple[str, ...], str]:
    """``source = { url = "https://host/x.whl" }`` and its one wheel entry (blanked when it
    does not fit the platform): its hashes and the URL the host fetches it from."""
    wheels = package.entry.get("wheels") or [{}]
    wheel = wheels[0] if isinstance(wheels, list) and isinstance(wheels[0], dict) else {}
    return native_url_wheel(
        wheel.get("url", package.source["url"]),
        wheel.get("hash"),
        package.name,
        package.version,
        selection,
        path,
        package.line or None,
        _HINT,
    )


def _sdist(package: _Package, path: Path, line: int | None) -> tuple[str, str, object] | None:
    """The package's ``sdist = { url, hash, ... }`` as (file name, URL, hash); None if none."""
    sdist = package.entry.get("sdist")
    if sdist is None:
        return None
    location = sdist.get("url", sdist.get("path")) if isinstance(sdist, dict) else None
    if isinstance(location, str) and location.startswith("/"):  # a local index's file
        location = "file://" + location
    if not isinstance(location, str):
        raise LockfileError(path, line, f"package {package.name}: its sdist has no 'url'")
    return _basename(location), location, sdist.get("hash")
