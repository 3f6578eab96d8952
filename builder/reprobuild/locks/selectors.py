"""The extras and groups a native lock can be read with: the names ``--extra`` and ``--group``
may give (:class:`~reprobuild.locks.native.Selection`), read off the lock (and, for a
``poetry.lock``, the ``pyproject.toml`` beside it) without validating it: the readers refuse a
bad lock with its own error when the selection is read.

``init`` asks this for a command that imports a package the main dependencies lack
(:mod:`reprobuild.project.imports`): which extra or group brings it.
"""

from __future__ import annotations

import json
import tomllib
from pathlib import Path
from typing import Any

from reprobuild._util import jsonload
from reprobuild.errors import ReprobuildError
from reprobuild.locks.lockfile import format_of_file

# A lock or pyproject.toml past this is not read here (the readers refuse it on their own).
_MAX_BYTES = 16 << 20


def lock_selectors(path: Path) -> tuple[tuple[str, ...], tuple[str, ...]]:
    """``(extras, groups)`` the native lock at ``path`` offers, each sorted; ``((), ())`` for a
    lock that is not native, or that (or whose pyproject.toml) cannot be read."""
    try:
        kind = format_of_file(path)
        if kind == "uv":
            return _uv(_toml(path))
        if kind == "poetry":
            return _poetry(_toml(path.parent / "pyproject.toml"))
        if kind == "pdm":
            return _pdm(_toml(path))
        if kind == "pipfile":
            return _pipfile(_json(path))
    except (OSError, ValueError, UnicodeDecodeError):
        pass  # the lock's reader says what is wrong with it
    return (), ()


def _read(path: Path) -> str:
    """The file's text, read as the project reads untrusted files (:func:`jsonload.read_file`:
    at most ``_MAX_BYTES``, and a FIFO or device refused before it is read, which a plain
    read would wait on forever)."""
    try:
        data = jsonload.read_file(path, str(path), max_bytes=_MAX_BYTES)
    except ReprobuildError as exc:
        raise ValueError(exc.message) from None
    return data.decode("utf-8-sig")


def _toml(path: Path) -> dict[str, Any]:
    return tomllib.loads(_read(path))  # TOMLDecodeError is a ValueError


def _json(path: Path) -> dict[str, Any]:
    doc = json.loads(_read(path))  # JSONDecodeError is a ValueError
    return doc if isinstance(doc, dict) else {}


def _keys(table: object) -> set[str]:
    return {str(k) for k in table} if isinstance(table, dict) else set()


def _sorted(extras: set[str], groups: set[str]) -> tuple[tuple[str, ...], tuple[str, ...]]:
    return tuple(sorted(extras)), tuple(sorted(groups))


def _uv(doc: dict[str, Any]) -> tuple[tuple[str, ...], tuple[str, ...]]:
    """The root project's (``source`` editable or virtual ``.``) optional dependencies and
    dependency groups."""
    for entry in doc.get("package") or []:
        source = entry.get("source") if isinstance(entry, dict) else None
        if isinstance(source, dict) and "." in (source.get("editable"), source.get("virtual")):
            return _sorted(
                _keys(entry.get("optional-dependencies")), _keys(entry.get("dev-dependencies"))
            )
    return (), ()


def _poetry(pyproject: dict[str, Any]) -> tuple[tuple[str, ...], tuple[str, ...]]:
    """``[project.optional-dependencies]`` and ``[tool.poetry.extras]``; ``[tool.poetry.group]``,
    1.x ``dev-dependencies`` (as ``dev``) and PEP 735 ``[dependency-groups]``."""
    tool = pyproject.get("tool")
    poetry = tool.get("poetry") if isinstance(tool, dict) else None
    poetry = poetry if isinstance(poetry, dict) else {}
    project = pyproject.get("project")
    project = project if isinstance(project, dict) else {}
    extras = _keys(project.get("optional-dependencies")) | _keys(poetry.get("extras"))
    groups = _keys(poetry.get("group")) | _keys(pyproject.get("dependency-groups"))
    if poetry.get("dev-dependencies") is not None:
        groups.add("dev")
    return _sorted(extras, groups)


def _pdm(doc: dict[str, Any]) -> tuple[tuple[str, ...], tuple[str, ...]]:
    """PDM locks extras as groups too: every group but ``default``, as a group."""
    metadata = doc.get("metadata")
    groups = metadata.get("groups") if isinstance(metadata, dict) else None
    names = {str(g) for g in groups} if isinstance(groups, list) else set()
    return _sorted(set(), names - {"default"})


def _pipfile(doc: dict[str, Any]) -> tuple[tuple[str, ...], tuple[str, ...]]:
    """Every section but ``_meta`` and ``default`` (``develop`` as ``dev``), as a group."""
    names = {k for k, v in doc.items() if isinstance(v, dict)} - {"_meta", "default"}
    return _sorted(set(), {"dev" if n == "develop" else n for n in names})
