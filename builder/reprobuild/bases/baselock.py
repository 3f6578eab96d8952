"""The project's lock of its bases: ``reprobuild.bases.lock`` beside ``reprobuild.yaml``.

A project that names a catalog base (``base.gpu: ngc-pytorch-25.01``) gets that name's digest
recorded here the first time it is rendered or built. From then on the project builds on the
recorded digest, whatever a newer reprobuild release or catalog says the name means; moving to
the catalog's current digest is an explicit ``reprobuild bases --update``. Bases written as
``NAME@sha256:...`` in reprobuild.yaml are pinned there already and are not recorded.

The file is JSON (a typed record with a schema version), written atomically, meant to be
committed with the project.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any, Literal, Protocol

from reprobuild import __version__
from reprobuild._util import jsonload
from reprobuild._util.boundedread import read_small_file
from reprobuild._util.fsutil import write_atomic
from reprobuild.bases.catalog import BaseEntry, Catalog, is_catalog_name
from reprobuild.bases.refs import DIGEST_RE, ImageRef, parse_pinned
from reprobuild.errors import CatalogError, ImageRefError, WriteError, shorten
from reprobuild.project.config import ProjectConfig

LOCK_NAME = "reprobuild.bases.lock"
SCHEMA_VERSION = 1
# A base lock holds a few entries; a file past this is not one.
BASE_LOCK_MAX_BYTES = 1 << 20
Status = Literal["locked", "catalog-differs", "not-in-catalog", "unlocked"]
UseStatus = Status | Literal["pinned-in-config"]


LOCK_HINT = "restore it from version control, or delete it to re-record from the catalog"
_PLATFORM_RE = re.compile(r"[a-z0-9_.-]+/[a-z0-9_.-]+(?:/[a-z0-9_.-]+)?")


class _LockJSONError(CatalogError):
    """A lock file that is not (bounded, valid) JSON: say how to get a good one back."""

    def __init__(self, message: str) -> None:
        super().__init__(
            message,
            hint=LOCK_HINT,
        )


@dataclass(frozen=True)
class LockedBase:
    """A catalog name as this project pinned it."""

    name: str
    ref: ImageRef
    platform: str
    entrypoint: tuple[str, ...] | None
    versions: Mapping[str, str] = field(default_factory=dict)
    locked_by: str = __version__
    platforms: Mapping[str, str] = field(default_factory=dict)
    """The image of each platform it was built for (``linux/arm64`` -> that platform's own
    manifest digest, when ``ref`` is an index): recorded by ``image --platform``."""

    def with_platform(self, platform: str, digest: str) -> LockedBase:
        return replace(self, platforms={**self.platforms, platform: digest})

    @classmethod
    def from_entry(cls, entry: BaseEntry) -> LockedBase:
        return cls(
            name=entry.name,
            ref=entry.ref,
            platform=entry.platform,
            entrypoint=entry.entrypoint,
            versions={k: f.value for k, f in entry.versions.items()},
        )

    def to_dict(self) -> dict[str, Any]:
        return {
            "ref": str(self.ref),
            "platform": self.platform,
            "entrypoint": None if self.entrypoint is None else list(self.entrypoint),
            "versions": dict(sorted(self.versions.items())),
            "locked_by": self.locked_by,
            **({"platforms": dict(sorted(self.platforms.items()))} if self.platforms else {}),
        }


@dataclass(frozen=True)
class BaseLock:
    bases: Mapping[str, LockedBase] = field(default_factory=dict)

    def with_base(self, base: LockedBase) -> BaseLock:
        return BaseLock({**self.bases, base.name: base})

    def to_json(self) -> str:
        doc = {
            "schema_version": SCHEMA_VERSION,
            "bases": {name: self.bases[name].to_dict() for name in sorted(self.bases)},
        }
        return json.dumps(doc, indent=2) + "\n"


@dataclass(frozen=True)
class BaseUse:
    """One base a project builds on, as `reprobuild bases` lists it."""

    variant: str  # a variant's name, or base.cpu / base.gpu when no variant builds on it
    base: str  # as reprobuild.yaml writes it: a catalog name or NAME@sha256:...
    status: UseStatus
    locked: str | None
    catalog: str | None

    def to_dict(self) -> dict[str, str | None]:
        return {
            "variant": self.variant,
            "base": self.base,
            "status": self.status,
            "locked": self.locked,
            "catalog": self.catalog,
        }


def lock_path(root: Path) -> Path:
    return root / LOCK_NAME


def load_base_lock(root: Path) -> BaseLock:
    """The project's base lock; an empty one when the file does not exist yet."""
    path = lock_path(root)
    try:
        raw = read_small_file(path, BASE_LOCK_MAX_BYTES, lambda p: CatalogError(f"{path}: {p}"))
    except FileNotFoundError:
        return BaseLock()
    data = jsonload.loads(raw, str(path), error=_LockJSONError, max_bytes=BASE_LOCK_MAX_BYTES)
    return parse_base_lock(data, path, raw.decode("utf-8", "replace"))


def _line_of(text: str, after: str | None, key: str) -> int | None:
    """The 1-based line where JSON key ``key`` first appears (after key ``after``, when
    given): the JSON reader keeps no positions, and the lock is one key per line."""
    start = 0
    if after is not None:
        found = text.find(json.dumps(after) + ":")
        if found < 0:
            return None
        start = found
    at = text.find(json.dumps(key) + ":", start)
    return None if at < 0 else text.count("\n", 0, at) + 1


class _Bad(Protocol):
    """Words a refusal of the lock, at the line of ``key`` (after ``within``) when given."""

    def __call__(self, problem: str, key: str = "", within: str | None = None) -> CatalogError: ...


def parse_base_lock(data: Any, path: Path, text: str = "") -> BaseLock:
    def bad(problem: str, key: str = "", within: str | None = None) -> CatalogError:
        line = _line_of(text, within, key) if key else None
        where = f"{path}:{line}" if line else f"{path}"
        return CatalogError(f"{where}: {problem}", hint="restore it from version control")

    version = data.get("schema_version") if isinstance(data, dict) else None
    if not isinstance(data, dict) or version != SCHEMA_VERSION:
        raise bad(
            f"schema_version must be {SCHEMA_VERSION}, got {shorten(version, 40)}", "schema_version"
        )
    raw_bases = data.get("bases")
    if not isinstance(raw_bases, dict):
        raise bad("'bases' must be a mapping of catalog name to pinned base", "bases")
    bases: dict[str, LockedBase] = {}
    for name, raw in raw_bases.items():
        if not isinstance(name, str) or not is_catalog_name(name) or not isinstance(raw, dict):
            raise bad(
                f"base {shorten(name, 60)} must be a catalog name mapped to an object", str(name)
            )
        bases[name] = _locked_base(name, raw, bad)
    return BaseLock(bases)


def _locked_base(name: str, raw: dict[str, Any], bad: _Bad) -> LockedBase:
    """One entry of the lock's ``bases``, every field checked."""
    try:
        ref = parse_pinned(str(raw.get("ref")), what=f"locked base {shorten(name, 60)}")
    except ImageRefError as exc:
        raise bad(exc.message, "ref", name) from None
    entrypoint = raw.get("entrypoint")
    if entrypoint is not None and (
        not isinstance(entrypoint, list) or not all(isinstance(e, str) for e in entrypoint)
    ):
        raise bad(
            f"base {shorten(name, 60)} entrypoint must be null or a list of strings",
            "entrypoint",
            name,
        )
    versions = raw.get("versions", {})
    if not isinstance(versions, dict) or not all(
        isinstance(k, str) and isinstance(v, str) for k, v in versions.items()
    ):
        raise bad(
            f"base {shorten(name, 60)} versions must map names to version strings",
            "versions",
            name,
        )
    platform = raw.get("platform")
    if not isinstance(platform, str) or not platform:
        raise bad(f"base {shorten(name, 60)} lacks its platform", name)
    platforms = raw.get("platforms", {})
    if not isinstance(platforms, dict) or not all(
        isinstance(k, str)
        and _PLATFORM_RE.fullmatch(k)
        and isinstance(v, str)
        and DIGEST_RE.fullmatch(v)
        for k, v in platforms.items()
    ):
        raise bad(
            f"base {shorten(name, 60)} platforms must map OS/ARCH to sha256:<64 hex>",
            "platforms",
            name,
        )
    return LockedBase(
        name=name,
        ref=ref,
        platform=platform,
        entrypoint=None if entrypoint is None else tuple(entrypoint),
        versions=versions,
        locked_by=str(raw.get("locked_by", "unknown")),
        platforms=platforms,
    )


def write_base_lock(root: Path, lock: BaseLock) -> Path:
    path = lock_path(root)
    write_atomic(path, lock.to_json())
    return path


def status(name: str, lock: BaseLock, catalog: Catalog) -> Status:
    locked = lock.bases.get(name)
    entry = catalog.entries.get(name)
    if locked is None:
        return "unlocked"
    if entry is None:
        return "not-in-catalog"
    return "locked" if entry.ref.digest == locked.ref.digest else "catalog-differs"


def pin(root: Path, name: str, catalog: Catalog) -> tuple[LockedBase, bool, str | None]:
    """The base a catalog name means for this project, read only: ``(base, new, note)``.

    Locked: the lock's digest (``new`` false), with a note when the catalog now says
    otherwise. Not locked yet: the catalog's (``new`` true); :func:`record` writes it.
    """
    locked = load_base_lock(root).bases.get(name)
    if locked is not None:
        entry = catalog.entries.get(name)
        note = None
        if entry is not None and entry.ref.digest != locked.ref.digest:
            note = (
                f"{name}: this project stays on {locked.ref.by_digest()} ({LOCK_NAME}); the "
                f"catalog now pins {entry.ref.by_digest()}. To move: reprobuild bases "
                f"--update {name}"
            )
        return locked, False, note
    return LockedBase.from_entry(catalog.get(name)), True, None


def record_platform(root: Path, name: str, platform: str, digest: str) -> str | None:
    """Record the image ``name``'s locked index gives ``platform`` (its own manifest digest),
    once: the note to show, or None when the lock has it already. A locked base the project
    does not have, or another digest recorded for the platform, is an error: the lock was
    edited, or the base moved under it."""
    lock = load_base_lock(root)
    locked = lock.bases.get(name)
    if locked is None:
        raise CatalogError(f"{lock_path(root)}: base {name!r} is not locked", hint=LOCK_HINT)
    held = locked.platforms.get(platform)
    if held == digest:
        return None
    if held is not None:
        raise CatalogError(
            f"{lock_path(root)}: base {name!r} records {held} for {platform}, and its index "
            f"{locked.ref.by_digest()} now gives {digest}",
            hint=LOCK_HINT,
        )
    write_base_lock(root, lock.with_base(locked.with_platform(platform, digest)))
    return f"{name}: recorded its {platform} image {digest} in {lock_path(root)}; commit it"


def record(root: Path, base: LockedBase) -> str | None:
    """Record a base seen for the first time in the project's lock; the note to show. None
    where the lock already holds it at that digest (an earlier platform of the same index
    build recorded it, with its ``platforms``, which are kept)."""
    lock = load_base_lock(root)
    held = lock.bases.get(base.name)
    if held is not None and held.ref == base.ref:
        return None
    write_base_lock(root, lock.with_base(base))
    return (
        f"{base.name}: recorded {base.ref.by_digest()} in {lock_path(root)}; commit it so this "
        "project keeps this base"
    )


def _uses(config: ProjectConfig) -> dict[str, str]:
    """Variant (or base.cpu / base.gpu) -> the base it names, matrix variants included."""
    used = {v.name: v.base for v in config.variants if v.base}
    for key, value in (("base.cpu", config.base_cpu), ("base.gpu", config.base_gpu)):
        if value and value not in used.values():
            used[key] = value
    return used


def project_bases(config: ProjectConfig, catalog: Catalog) -> list[BaseUse]:
    """Every base the project builds on, with its lock status."""
    lock = load_base_lock(config.root)
    out: list[BaseUse] = []
    for variant, name in _uses(config).items():
        locked = lock.bases.get(name)
        entry = catalog.entries.get(name)
        out.append(
            BaseUse(
                variant=variant,
                base=name,
                status=status(name, lock, catalog) if is_catalog_name(name) else "pinned-in-config",
                locked=str(locked.ref) if locked else None,
                catalog=str(entry.ref) if entry else None,
            )
        )
    return out


def update_project(
    config: ProjectConfig, names: list[str], catalog: Catalog
) -> list[tuple[str, str | None, str]]:
    """Re-pin ``names`` (every catalog base the project uses, when empty); a name the
    project does not use is refused before anything is written."""
    used = sorted({n for n in _uses(config).values() if is_catalog_name(n)})
    unknown = sorted(set(names) - set(used))
    if unknown:
        raise CatalogError(
            f"{unknown[0]!r} is not a catalog base this project uses; "
            f"it uses: {', '.join(used) or '(none)'}"
        )
    return update(config.root, names or used, catalog)


def update(root: Path, names: list[str], catalog: Catalog) -> list[tuple[str, str | None, str]]:
    """Re-pin ``names`` to the catalog's current digests: (name, old digest, new digest)."""
    lock = load_base_lock(root)
    changes: list[tuple[str, str | None, str]] = []
    for name in names:
        entry = catalog.get(name)
        old = lock.bases.get(name)
        fresh = LockedBase.from_entry(entry)
        if old is not None and old.ref.digest == fresh.ref.digest:
            fresh = replace(fresh, locked_by=old.locked_by)
        lock = lock.with_base(fresh)
        changes.append((name, old.ref.digest if old else None, str(entry.ref.digest)))
    try:
        write_base_lock(root, lock)
    except OSError as exc:  # a read-only project: nothing was changed
        raise WriteError(
            "the re-pinned bases to",
            lock_path(root),
            exc.strerror or str(exc),
            hint="make the project writable to re-pin its bases",
        ) from None
    return changes
