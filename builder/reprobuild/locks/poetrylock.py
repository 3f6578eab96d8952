"""Poetry's ``poetry.lock`` (lock-version 1.1, 2.0 and 2.1) into pinned requirements.

A poetry.lock is read with the ``pyproject.toml`` beside it, as Poetry itself reads it:

* its ``content-hash`` must be the hash Poetry computes from that pyproject.toml (the keys
  Poetry 1.x and 2.x hash, both forms tried), or the lock is stale and refused;
* lock-version 2.1 records, on every package, the groups that reach it and the marker under
  which each group does (``groups``, ``markers``: one string for all of them or a table per
  group); the packages to install are read from those as Poetry 2 itself reads them (its
  ``Locker.locked_packages``, poetry-plugin-export's export): a package is in when one of the
  chosen groups (``main`` always) is among its groups and that group's marker holds for the
  image's platform, ``extra == "x"`` holding for the chosen extras;
* older locks record neither: the packages are found by walking the dependency graph from the
  project's own dependencies (``[tool.poetry.dependencies]`` or ``[project].dependencies``),
  the groups and extras asked for, keeping an edge only when its markers and ``python``
  constraint hold for the image's platform, and its optional dependencies only when an extra
  asks for them; a project dependency declared optional is kept all the same when the lock
  records its package as not optional (``optional = false``: another group needs it), as
  Poetry's export takes the lock's flag;
* a lock whose content-hash is Poetry 1.x's (``[project]`` not hashed) was written by a Poetry
  that does not read ``[project]`` or ``[dependency-groups]``: its project's dependencies are
  ``[tool.poetry]``'s only, whatever ``[project]`` says (it is there for other tools);
* hashes come from each package's ``files`` (2.x) or ``[metadata.files]`` (1.1), wheels for
  the platform only; a ``legacy`` source (such as PyTorch's CPU index) is kept as an index.
"""

from __future__ import annotations

import hashlib
import json
import re
from pathlib import Path
from typing import Any

from packaging.requirements import InvalidRequirement
from packaging.requirements import Requirement as Pep508
from packaging.specifiers import InvalidSpecifier, SpecifierSet
from packaging.utils import canonicalize_name
from packaging.version import InvalidVersion, Version

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
    check_version,
    open_toml_lock,
    package_tables,
    pyproject_beside,
    source_refusal,
    split_sdist,
    wheels_or_sdist,
)
from reprobuild.locks.records import IndexOptions, Requirement, SourceArchive, SourcePin, quoted
from reprobuild.locks.sources import git_pin, path_pin
from reprobuild.locks.urlwheels import is_wheel_url, native_url_wheel

__all__ = ["content_hashes", "parse_poetrylock", "poetry_allows"]

_HINT = "relock with `poetry lock`"
_PYPI = "https://pypi.org/simple"
_SUPPORTED = ("1.1", "2.0", "2.1")
_RECORDS_GROUPS = Version("2.1")  # Poetry's Locker.is_locked_groups_and_markers
_LEGACY_KEYS = ("dependencies", "source", "extras", "dev-dependencies")
_PROJECT_KEYS = ("requires-python", "dependencies", "optional-dependencies")
_POETRY2_TABLES = ("project", "dependency-groups")  # read by Poetry 2 only
_SOURCE_KINDS = {
    "git": "git repository",
    "directory": "local directory",
    "file": "local file",
    "url": "direct URL",
}


def content_hashes(pyproject: dict[str, Any]) -> set[str]:
    """The content-hash Poetry 1.x and 2.x write for this pyproject (each form Poetry used)."""
    return _poetry1_hashes(pyproject) | _poetry2_hashes(pyproject)


def _digest(form: object) -> str:
    return hashlib.sha256(json.dumps(form, sort_keys=True).encode()).hexdigest()


def _poetry1_hashes(pyproject: dict[str, Any]) -> set[str]:
    """Poetry 1.x's forms: ``[tool.poetry]``'s keys only (1.2 added ``group``)."""
    poetry = pyproject.get("tool", {}).get("poetry", {})
    legacy = {key: poetry.get(key) for key in _LEGACY_KEYS}
    forms: list[object] = [legacy]
    if poetry.get("group") is not None:
        forms.append({**legacy, "group": poetry.get("group")})
    return {_digest(f) for f in forms}


def _poetry2_hashes(pyproject: dict[str, Any]) -> set[str]:
    """Poetry 2's forms when ``[project]`` has relevant keys (otherwise it hashes as 1.x)."""
    poetry = pyproject.get("tool", {}).get("poetry", {})
    project = pyproject.get("project", {})
    groups = pyproject.get("dependency-groups", {})
    relevant_project = {k: project[k] for k in _PROJECT_KEYS if project.get(k) is not None}
    if not relevant_project:
        return set()
    tool = {k: poetry[k] for k in (*_LEGACY_KEYS, "group") if poetry.get(k) is not None}
    form: dict[str, object] = {"project": relevant_project, "tool": {"poetry": tool}}
    forms: list[object] = [form]
    if groups:
        forms.append({**form, "dependency-groups": groups})
    return {_digest(f) for f in forms}


def poetry_allows(constraint: str, version: str) -> bool:
    """Whether a Poetry version constraint (``^3.11``, ``~1.2``, ``>=3.8,<4``, ``3.*``,
    ``a || b``) allows ``version``; raises ValueError when it cannot be read."""
    want = Version(version)
    for alternative in constraint.split("||"):
        alternative = re.sub(r"([<>=!~^]+)\s+", r"\1", alternative.strip())
        clauses = [c for c in re.split(r"[,\s]+", alternative) if c]
        if all(_clause_allows(c.replace(" ", ""), want) for c in clauses):
            return True
    return False


def _clause_allows(clause: str, want: Version) -> bool:
    if clause in ("*", ""):
        return True
    if clause[0] in "^~" and not clause.startswith("~="):
        base = Version(clause[1:])
        parts = [*base.release, 0, 0][:3]
        if clause[0] == "^":
            position = next((i for i, p in enumerate(parts) if p != 0), len(base.release) - 1)
            position = min(position, len(base.release) - 1)
        else:
            position = 1 if len(base.release) >= 2 else 0
        upper = [*parts[:position], parts[position] + 1]
        return base <= want < Version(".".join(str(p) for p in upper))
    if clause[0].isdigit():
        clause = "==" + clause
    try:
        return want in SpecifierSet(clause, prereleases=True)
    except InvalidSpecifier as exc:
        raise ValueError(clause) from exc


def parse_poetrylock(
    text: str, path: Path, selection: Selection | None = None
) -> tuple[tuple[Requirement, ...], IndexOptions, tuple[str, ...], tuple[SourcePin, ...]]:
    """Parse ``poetry.lock`` text (and the pyproject.toml beside it) for ``selection``:
    requirements, index options, notes, and the packages built from git or a directory."""
    path = Path(path)
    doc, lines, selection = open_toml_lock(text, path, selection, _HINT)
    metadata, version = _metadata(doc, path, lines)
    pyproject = _fresh_pyproject(metadata, path, lines)
    _check_python(metadata.get("python-versions"), selection, path, lines)
    raw = package_tables(doc, path, _HINT)
    files_table = metadata.get("files") if version == "1.1" else None
    packages: dict[str, list[tuple[dict[str, Any], int]]] = {}
    for position, entry in enumerate(raw):
        line = lines.header_of(position, len(raw))
        name = check_name(entry.get("name"), path, line or None)
        packages.setdefault(name, []).append((entry, line))
    reached = _reached(version, pyproject, packages, selection, path)
    pins = Pins()
    lacking = NoWheels()
    for name, (entry, line) in sorted(reached.items(), key=lambda kv: kv[1][1]):
        source = _source_pin(name, entry, line, path)
        if source is not None:
            pins.source(source)
            continue
        if _is_url_wheel_source(entry.get("source")):
            version_text, hashes, url = _url_wheel(entry, line, files_table, selection, path)
            pins.pin(name, version_text, hashes, line, url=url)
            continue
        with lacking.each():
            version_text, hashes, index, sdist = _pins(
                entry, line, files_table, selection, path, lines
            )
            # a package with no [package.source] comes from PyPI
            pins.pin(name, version_text, hashes, line, index or _PYPI, source=sdist)
    lacking.check()
    # PyPI first: the others are extra indexes
    return (
        pins.requirements(),
        pins.index_options(_PYPI),
        _notes(pyproject, path),
        pins.source_pins(),
    )


def _source_pin(name: str, entry: dict[str, Any], line: int, path: Path) -> SourcePin | None:
    """A package from git (``resolved_reference``, the commit Poetry resolved) or a local
    directory (``develop = true``: editable); None for one from an index."""
    source = entry.get("source")
    if not isinstance(source, dict) or source.get("type") not in ("git", "directory"):
        return None
    version = check_version(entry.get("version"), f"package {name}", path, line or None)
    url = source.get("url")
    if not isinstance(url, str):
        raise LockfileError(path, line or None, f"package {name}: its source has no 'url'")
    if source["type"] == "git":
        resolved = source.get("resolved_reference")
        subdirectory = source.get("subdirectory")
        return git_pin(
            name,
            version,
            url,
            resolved if isinstance(resolved, str) else source.get("reference"),
            path,
            line or None,
            subdirectory=subdirectory if isinstance(subdirectory, str) else None,
        )
    return path_pin(name, version, url, path, line or None, editable=entry.get("develop") is True)


def _metadata(doc: dict[str, Any], path: Path, lines: LockLines) -> tuple[dict[str, Any], str]:
    """The ``[metadata]`` table and the lock-version, one this reader reads."""
    metadata = doc.get("metadata")
    if not isinstance(metadata, dict):
        raise LockfileError(path, None, "has no [metadata] table: not a poetry.lock", hint=_HINT)
    version = metadata.get("lock-version")
    if version not in _SUPPORTED:
        raise LockfileError(
            path,
            lines.find("lock-version"),
            f"poetry.lock lock-version {quoted(str(version))} is not supported: only "
            f"{', '.join(_SUPPORTED)}",
            hint="relock with Poetry 1.1 or newer",
        )
    return metadata, str(version)


def _fresh_pyproject(metadata: dict[str, Any], path: Path, lines: LockLines) -> dict[str, Any]:
    """The pyproject.toml beside the lock, refused when the lock's content-hash is not its
    hash (a stale lock); read as the Poetry that wrote the lock read it (Poetry 1.x did not
    read ``[project]`` or ``[dependency-groups]``)."""
    pyproject = _pyproject(path)
    recorded = metadata.get("content-hash")
    if recorded not in content_hashes(pyproject):
        raise LockfileError(
            path,
            lines.find("content-hash"),
            f"is stale: its content-hash {quoted(str(recorded), 20)} is not the hash of the "
            "pyproject.toml beside it (the dependencies changed after locking)",
            hint="run `poetry lock` (Poetry 2: `poetry lock`; 1.x: `poetry lock --no-update`) "
            "and commit both files",
        )
    if recorded in _poetry1_hashes(pyproject) and recorded not in _poetry2_hashes(pyproject):
        # Poetry 1.x wrote it, reading [tool.poetry] only: [project] is for other tools
        pyproject = {k: v for k, v in pyproject.items() if k not in _POETRY2_TABLES}
    return pyproject


def _reached(
    version: str,
    pyproject: dict[str, Any],
    packages: dict[str, list[tuple[dict[str, Any], int]]],
    selection: Selection,
    path: Path,
) -> dict[str, tuple[dict[str, Any], int]]:
    """The packages to install: by the groups a 2.1 lock records, else by walking the graph."""
    roots = _roots(pyproject, selection, path)  # also: the extras and groups asked for exist
    if Version(version) >= _RECORDS_GROUPS:
        return _by_recorded_groups(packages, selection.with_groups(default_groups(pyproject)), path)
    # Poetry's export drops a project dependency declared optional only when the lock
    # records its package as optional too (poetry-plugin-export's
    # get_project_dependency_packages): one another group needs is `optional = false`
    roots = [d for d in roots if not d[4] or _locked_as_required(packages, d[0])]
    walk = _Walk(selection, packages, path)
    walk.run(roots)
    return walk.reached


def _notes(pyproject: dict[str, Any], path: Path) -> tuple[str, ...]:
    """A note when the project itself (package mode) is not installed from the lock."""
    name = pyproject.get("project", {}).get("name") or pyproject.get("tool", {}).get(
        "poetry", {}
    ).get("name")
    if name and pyproject.get("tool", {}).get("poetry", {}).get("package-mode", True):
        return (
            f"{path.name}: the project {name} itself is not installed from the lock: its "
            "source is copied into the image with `include`",
        )
    return ()


def _pyproject(path: Path) -> dict[str, Any]:
    pyproject = pyproject_beside(path, _HINT)
    if pyproject is None:
        raise LockfileError(
            path,
            None,
            "has no pyproject.toml beside it: a poetry.lock is read with its project's "
            "pyproject.toml (its dependencies and content-hash)",
            hint="keep poetry.lock next to the pyproject.toml it was locked from",
        )
    return pyproject


def _check_python(spec: object, selection: Selection, path: Path, lines: LockLines) -> None:
    if not isinstance(spec, str):
        return
    try:
        allowed = poetry_allows(spec, selection.full_version)
    except (ValueError, InvalidVersion):
        return  # an unreadable range is left to the packages' own wheels
    if not allowed:
        raise LockfileError(
            path,
            lines.find("python-versions"),
            f"python-versions {quoted(spec)} excludes Python {selection.python}, the image's "
            "Python",
            hint="build on a base with a Python the lock allows (init --python X.Y), "
            "or relock for this one",
        )


# A dependency as Poetry writes it: (name, constraint, markers, python, optional, extras,
# source: the name of the index it must come from, ``source = "..."``, or None).
_Dep = tuple[str, str, str | None, str | None, bool, tuple[str, ...], str | None]


def _deps_of(table: object) -> list[_Dep]:
    """``name = "^1.0"`` / ``{version, markers, python, optional, extras, source}`` / a list
    of them (a dependency with several constraints, each for its own platforms)."""
    out: list[_Dep] = []
    if not isinstance(table, dict):
        return out
    for name, spec in table.items():
        if name == "python":
            continue
        for one in spec if isinstance(spec, list) else [spec]:
            if isinstance(one, str):
                out.append((name, one, None, None, False, (), None))
            elif isinstance(one, dict):
                out.append(_dep_of(name, one))
    return out


def _dep_of(name: str, one: dict[str, Any]) -> _Dep:
    """One constraint written as a table; a git, path or URL one keeps its markers too (a
    constraint for another platform is not walked)."""
    constraint = str(one.get("version", "*"))
    for kind in ("git", "path", "url"):
        if kind in one:
            constraint = f"@{kind}:{one[kind]}"
            break
    source = one.get("source")
    return (
        name,
        constraint,
        one.get("markers"),
        one.get("python"),
        bool(one.get("optional", False)),
        tuple(str(e) for e in one.get("extras", [])),
        source if isinstance(source, str) and not constraint.startswith("@") else None,
    )


def _pep508(text: str) -> _Dep:
    req = Pep508(text)
    marker = str(req.marker) if req.marker is not None else None
    constraint = str(req.specifier) or "*"
    if req.url:
        constraint = f"@url:{req.url}"
    return (req.name, constraint, marker, None, False, tuple(sorted(req.extras)), None)


def default_groups(pyproject: dict[str, Any]) -> list[str]:
    """The groups ``poetry install`` installs unasked: every group not marked optional (the
    1.x ``dev-dependencies`` as ``dev``), and the PEP 735 ``[dependency-groups]``."""
    poetry = pyproject.get("tool", {}).get("poetry", {})
    out = [
        str(name)
        for name, table in (poetry.get("group") or {}).items()
        if not (isinstance(table, dict) and table.get("optional") is True)
    ]
    if poetry.get("dev-dependencies") is not None and "dev" not in out:
        out.append("dev")
    out += [str(g) for g in pyproject.get("dependency-groups") or {} if g not in out]
    return out


def _roots(pyproject: dict[str, Any], selection: Selection, path: Path) -> list[_Dep]:
    poetry = pyproject.get("tool", {}).get("poetry", {})
    selection = selection.with_groups(default_groups(pyproject))
    project = pyproject.get("project", {})
    deps = _deps_of(poetry.get("dependencies"))
    try:
        if "dependencies" in project:
            # Poetry 2: with [project].dependencies set, [tool.poetry.dependencies] only
            # enriches the names listed there; its other entries are not dependencies.
            listed = {canonicalize_name(_pep508(t)[0]) for t in project["dependencies"]}
            deps = [d for d in deps if canonicalize_name(d[0]) in listed]
        deps += [_pep508(t) for t in project.get("dependencies", [])]
        for extra in selection.extras:
            deps += _extra_deps(extra, project, poetry, path)
        for group in selection.groups:
            deps += _group_deps(group, pyproject, poetry, path)
    except InvalidRequirement as exc:
        raise LockfileError(
            path.parent / "pyproject.toml", None, f"a dependency is not PEP 508: {exc}"
        ) from None
    return deps  # optional ones (d[4]) go in only through an extra, see parse_poetrylock


def _extra_deps(
    extra: str, project: dict[str, Any], poetry: dict[str, Any], path: Path
) -> list[_Dep]:
    """The dependencies an extra adds: ``[project.optional-dependencies]``, else the names
    ``[tool.poetry.extras]`` lists (as ``[tool.poetry.dependencies]`` declares them)."""
    optional = project.get("optional-dependencies", {})
    poetry_extras = poetry.get("extras", {})
    if extra in optional:
        return [_pep508(t) for t in optional[extra]]
    if extra in poetry_extras:
        names = {canonicalize_name(n) for n in poetry_extras[extra]}
        return [
            (n, c, m, p, False, e, s)
            for (n, c, m, p, _o, e, s) in _deps_of(poetry.get("dependencies"))
            if canonicalize_name(n) in names
        ]
    known = sorted({*optional, *poetry_extras})
    raise LockfileError(
        path,
        None,
        f"extra {quoted(extra)} is not one of the project's extras ({', '.join(known) or 'none'})",
    )


def _group_deps(
    group: str, pyproject: dict[str, Any], poetry: dict[str, Any], path: Path
) -> list[_Dep]:
    """The dependencies a group adds: ``[tool.poetry.group.G]`` (1.x ``dev-dependencies`` for
    ``dev``) and the PEP 735 ``[dependency-groups]`` entry of that name."""
    table = poetry.get("group", {}).get(group, {}).get("dependencies")
    if table is None and group == "dev":
        table = poetry.get("dev-dependencies")
    pep735 = pyproject.get("dependency-groups", {}).get(group)
    if table is None and pep735 is None:
        known = sorted({*poetry.get("group", {}), *pyproject.get("dependency-groups", {})})
        raise LockfileError(
            path,
            None,
            f"group {quoted(group)} is not one of the project's groups "
            f"({', '.join(known) or 'none'})",
        )
    return _deps_of(table) + [_pep508(t) for t in pep735 or [] if isinstance(t, str)]


def _locked_as_required(packages: dict[str, list[tuple[dict[str, Any], int]]], name: str) -> bool:
    return any(e.get("optional") is False for e, _ in packages.get(canonicalize_name(name), []))


def _by_recorded_groups(
    packages: dict[str, list[tuple[dict[str, Any], int]]], selection: Selection, path: Path
) -> dict[str, tuple[dict[str, Any], int]]:
    """The packages a lock-version 2.1 file records for the chosen groups (``main`` and
    ``selection.groups``): those with one of them in ``groups`` whose marker for that group
    (``markers`` as one string for every group, or a table per group, a group missing from
    it unconditional) holds for the image's platform and the chosen extras, all of them at once
    as Poetry evaluates it (``marker_holds(..., together=True)``)."""
    wanted = {canonicalize_name(g) for g in ("main", *selection.groups)}
    reached: dict[str, tuple[dict[str, Any], int]] = {}
    for name, entries in packages.items():
        for entry, line in entries:
            label = f"package {name} {entry.get('version')}"
            groups = entry.get("groups")
            if not isinstance(groups, list) or not all(isinstance(g, str) for g in groups):
                raise LockfileError(
                    path,
                    line or None,
                    f"{label} has no 'groups' list: a lock-version 2.1 file records the "
                    "groups of every package",
                    hint=_HINT,
                )
            markers = entry.get("markers")
            if markers is not None and not isinstance(markers, (str, dict)):
                raise LockfileError(
                    path,
                    line or None,
                    f"{label}: 'markers' must be a string or a table of one per group",
                    hint=_HINT,
                )
            held = False
            for group in groups:
                if canonicalize_name(group) not in wanted:
                    continue
                marker = markers.get(group) if isinstance(markers, dict) else markers
                marker = check_marker(
                    marker, f"{label} (group {quoted(group)})", path, line or None
                )
                if selection.marker_holds(marker, selection.extras, together=True):
                    held = True
                    break
            if not held:
                continue
            other = reached.get(name)
            if other is not None:
                raise LockfileError(
                    path,
                    line or None,
                    f"package {name}: two locked versions ({other[0].get('version')} at line "
                    f"{other[1]} and {entry.get('version')}) apply to {selection.label}",
                    hint=_HINT,
                )
            reached[name] = (entry, line)
    return reached


class _Restart(Exception):
    """The walk settled a package two constraints reached differently: walk again."""


class _Walk:
    def __init__(
        self,
        selection: Selection,
        packages: dict[str, list[tuple[dict[str, Any], int]]],
        path: Path,
    ) -> None:
        self.selection = selection
        self.packages = packages
        self.path = path
        self.reached: dict[str, tuple[dict[str, Any], int]] = {}
        self.done: set[tuple[str, str]] = set()
        # every (constraint, source) met for a name, and the entry settled for a name two
        # constraints reached with different entries (kept across the walk's restarts)
        self.met: dict[str, list[tuple[str, str | None]]] = {}
        self.settled: dict[str, tuple[dict[str, Any], int]] = {}

    def holds(self, dep: _Dep, parent_extras: tuple[str, ...] = ()) -> bool:
        _name, _c, markers, python, _o, _e, _s = dep
        if python is not None:
            try:
                if not poetry_allows(python, self.selection.full_version):
                    return False
            except (ValueError, InvalidVersion):
                pass
        return self.selection.marker_holds(markers, parent_extras)

    def run(self, roots: list[_Dep]) -> None:
        """Walk the graph from ``roots``; when two constraints reach a package with different
        entries, settle it (:meth:`settle`) and walk again from the start."""
        for _ in range(len(self.packages) + 1):
            self.reached, self.done = {}, set()
            try:
                self.walk(roots)
                return
            except _Restart:
                continue
        raise AssertionError("unreachable: each restart settles one more package")

    def walk(self, roots: list[_Dep]) -> None:
        stack: list[tuple[_Dep, str]] = [(d, "the project") for d in roots if self.holds(d)]
        while stack:
            dep, parent = stack.pop()
            name, _c, _m, _p, _o, extras, _s = dep
            entry, line = self.resolve(dep, parent)
            key = canonicalize_name(name)
            other = self.reached.get(key)
            if other is not None and other[0] is not entry:
                self.settle(key, other, (entry, line))
            self.reached[key] = (entry, line)
            for extra in ("", *extras):
                if (key, extra) in self.done:
                    continue
                self.done.add((key, extra))
                children = _deps_of(entry.get("dependencies"))
                if not extra:
                    stack.extend((d, key) for d in children if not d[4] and self.holds(d))
                    continue
                wanted = entry.get("extras", {}).get(extra, [])
                names = {
                    canonicalize_name(re.split(r"[\s(<>=!~\[;]", w, maxsplit=1)[0]) for w in wanted
                }
                stack.extend(
                    (d, key)
                    for d in children
                    if canonicalize_name(d[0]) in names and self.holds(d, (extra,))
                )

    def resolve(self, dep: _Dep, parent: str) -> tuple[dict[str, Any], int]:
        """The locked entry for one edge: the one git or path entry for such a constraint
        (a URL, or none, refused), else :meth:`pick`'s, noting the constraint met."""
        name, constraint, _m, _p, _o, _e, source = dep
        kind, _, where = constraint[1:].partition(":")
        if not constraint.startswith("@"):
            met = self.met.setdefault(canonicalize_name(name), [])
            if (constraint, source) not in met:
                met.append((constraint, source))
            return self.pick(canonicalize_name(name), constraint, parent, source)
        found = self.by_source(name, kind)
        if not found:
            raise LockfileError(
                self.path,
                None,
                source_refusal(_SOURCE_KINDS.get(kind, kind), name, where)
                + f" (required by {parent})",
                hint=SOURCE_HINT,
            )
        return found[0]

    def settle(
        self, name: str, other: tuple[dict[str, Any], int], entry: tuple[dict[str, Any], int]
    ) -> None:
        """Two constraints reached ``name`` with different entries: Poetry's solver takes one
        version for all of them, the newest entry that satisfies every constraint met for
        it. Raise :class:`_Restart` to walk again with that entry, or refuse naming both
        lines when there is none (or it is the one already settled)."""
        fitting = self.fitting(name, self.met.get(name, []))
        best = self.newest(name, fitting) if fitting else None
        settled = self.settled.get(name)
        if best is None or (settled is not None and best[0] is settled[0]):
            raise LockfileError(
                self.path,
                entry[1] or None,
                f"package {name}: two locked versions ({other[0].get('version')} at line "
                f"{other[1]} and {entry[0].get('version')}) apply to {self.selection.label}, "
                "and no locked entry satisfies every constraint on it "
                f"({', '.join(quoted(c) for c, _s in self.met.get(name, []))})",
                hint=_HINT,
            )
        self.settled[name] = best
        raise _Restart

    def by_source(self, name: str, kind: str) -> list[tuple[dict[str, Any], int]]:
        """The one locked entry of ``name`` from a git or path source (empty when there is
        not exactly one; a URL that is not a wheel's is refused when it is pinned)."""
        types = {"git": ("git",), "path": ("directory",), "url": ("url",)}.get(kind, ())
        found = [
            (entry, line)
            for entry, line in self.packages.get(canonicalize_name(name), [])
            if isinstance(entry.get("source"), dict) and entry["source"].get("type") in types
        ]
        return found if len(found) == 1 else []

    def pick(
        self, name: str, constraint: str, parent: str, source: str | None = None
    ) -> tuple[dict[str, Any], int]:
        """The locked entry ``poetry install`` takes for ``name`` under ``constraint`` (the
        one of its declared constraints whose marker holds here): of the entries whose
        version satisfies it, those for this platform (their own recorded marker, their
        ``python-versions``) when there are several, then the highest version, as Poetry's
        installer picks among locked packages (``Provider.get_locked``: newest first). A
        constraint naming a ``source`` takes only that index's entries. An entry already
        taken for ``name`` that satisfies this constraint too is kept (the solver's choice
        for both constraints at once)."""
        for taken in (self.settled.get(name), self.reached.get(name)):
            if taken and _allows(constraint, taken[0]) and _from_source(source, taken[0]):
                return taken
        fitting = self.fitting(name, [(constraint, source)])
        if not fitting:
            raise LockfileError(
                self.path,
                None,
                f"{parent} needs {name} {quoted(constraint)}"
                + (f" from source {quoted(source)}" if source else "")
                + f", which no locked package entry satisfies for {self.selection.label}",
                hint=_HINT,
            )
        return self.newest(name, fitting)

    def fitting(
        self, name: str, wants: list[tuple[str, str | None]]
    ) -> list[tuple[dict[str, Any], int]]:
        """The entries of ``name`` that satisfy every (constraint, source) of ``wants``; of
        several, those for this platform (:meth:`for_target`)."""
        found = [
            (e, ln)
            for e, ln in self.packages.get(name, [])
            if all(_allows(c, e) and _from_source(s, e) for c, s in wants)
        ]
        if len(found) > 1:
            found = [(e, ln) for e, ln in found if self.for_target(e)]
        return found

    def for_target(self, entry: dict[str, Any]) -> bool:
        """Whether a locked entry is for this platform: its recorded marker holds and its
        ``python-versions`` allows the image's Python (an unreadable one allows it)."""
        if not self.selection.marker_holds(_package_marker(entry)):
            return False
        python = entry.get("python-versions")
        try:
            return not isinstance(python, str) or poetry_allows(python, self.selection.full_version)
        except (ValueError, InvalidVersion):
            return True

    def newest(
        self, name: str, fitting: list[tuple[dict[str, Any], int]]
    ) -> tuple[dict[str, Any], int]:
        """The entry with the highest version; two at that version (or two whose versions
        are not PEP 440) are an ambiguity the lock does not settle, refused naming both."""
        ranked = sorted(fitting, key=lambda pair: _version_key(pair[0]), reverse=True)
        if len(ranked) == 1 or _version_key(ranked[0][0]) > _version_key(ranked[1][0]):
            return ranked[0]
        (first, first_line), (second, second_line) = sorted(ranked[:2], key=lambda p: p[1])
        raise LockfileError(
            self.path,
            second_line or None,
            f"package {name} is locked twice for {self.selection.label}, as "
            f"{quoted(str(first.get('version')))} (line {first_line}) and "
            f"{quoted(str(second.get('version')))} (line {second_line}), and neither "
            "version nor marker tells them apart",
            hint=_HINT,
        )


def _allows(constraint: str, entry: dict[str, Any]) -> bool:
    """Whether a locked entry's version satisfies a Poetry constraint (an unreadable one is
    left to the other checks)."""
    try:
        return poetry_allows(constraint, str(entry.get("version")))
    except (ValueError, InvalidVersion):
        return True


def _from_source(source: str | None, entry: dict[str, Any]) -> bool:
    """Whether a locked entry comes from the index a constraint names (poetry-core's
    ``Package.source_satisfies``: ``pypi`` is an entry with no source, another name a
    ``legacy`` source of that ``reference``); a constraint naming none takes any."""
    if source is None:
        return True
    locked = entry.get("source")
    if not isinstance(locked, dict):
        return source.lower() == "pypi"
    reference = locked.get("reference")
    return (
        locked.get("type") == "legacy"
        and isinstance(reference, str)
        and reference.lower() == source.lower()
    )


def _version_key(entry: dict[str, Any]) -> tuple[int, Version]:
    """A sort key, newest first; a version that is not PEP 440 ranks as no version at all."""
    try:
        return (1, Version(str(entry.get("version"))))
    except InvalidVersion:
        return (0, Version("0"))


def _package_marker(entry: dict[str, Any]) -> str | None:
    markers = entry.get("markers")
    if isinstance(markers, dict):
        markers = markers.get("main")
    return markers if isinstance(markers, str) else None


def _is_url_wheel_source(source: object) -> bool:
    """``[package.source] type = "url"`` naming a wheel (a URL sdist stays refused)."""
    return (
        isinstance(source, dict) and source.get("type") == "url" and is_wheel_url(source.get("url"))
    )


def _url_wheel(
    entry: dict[str, Any], line: int, files_table: object, selection: Selection, path: Path
) -> tuple[str, tuple[str, ...], str]:
    """A direct-URL wheel (``[package.source] type = "url"``, its hash in ``files``): the
    version, the sha256 hashes and the URL the host fetches it from."""
    name = canonicalize_name(str(entry["name"]))
    version = check_version(entry.get("version"), f"package {name}", path, line or None)
    files = entry.get("files")
    if files is None and isinstance(files_table, dict):
        files = files_table.get(entry["name"], files_table.get(name))
    tables = [f for f in files if isinstance(f, dict)] if isinstance(files, list) else []
    digest = tables[0].get("hash") if tables else None
    url = entry["source"]["url"]
    hashes, url = native_url_wheel(url, digest, name, version, selection, path, line or None, _HINT)
    return version, hashes, url


def _pins(
    entry: dict[str, Any],
    line: int,
    files_table: object,
    selection: Selection,
    path: Path,
    lines: LockLines,
) -> tuple[str, tuple[str, ...], str | None, SourceArchive | None]:
    """The package's version, the hashes of its wheels for the platform (else its sdist's, and
    the sdist to build: poetry.lock names the file, not its URL, so the host looks it up on
    the package's index), and its index (None: PyPI)."""
    name = canonicalize_name(str(entry["name"]))
    version = check_version(entry.get("version"), f"package {name}", path, line or None)
    check_marker(_package_marker(entry), f"package {name}", path, line or None)
    source = entry.get("source")
    index: str | None = None
    if isinstance(source, dict):
        kind = source.get("type")
        if kind != "legacy":
            raise LockfileError(
                path,
                line or None,
                source_refusal(
                    _SOURCE_KINDS.get(str(kind), f"{kind} source"), name, str(source.get("url"))
                ),
                hint=SOURCE_HINT,
            )
        index = check_index(source.get("url"), f"package {name}", path, line or None)
    files = entry.get("files")
    start = line
    if files is None and isinstance(files_table, dict):
        files = files_table.get(entry["name"], files_table.get(name))
        start = lines.find(f"{entry['name']} = [", 1) or lines.find(f'"{entry["name"]}" = [') or 0
    if not isinstance(files, list):
        files = []
    pairs = [(str(f.get("file")), f.get("hash")) for f in files if isinstance(f, dict)]

    def locate(needle: str) -> int | None:
        return lines.find(needle, start) if start else None

    wheels, sdist = split_sdist(pairs)
    hashes, source = wheels_or_sdist(
        wheels, sdist, name, version, selection, path, locate, _HINT, index=index or _PYPI
    )
    return version, hashes, index, source
