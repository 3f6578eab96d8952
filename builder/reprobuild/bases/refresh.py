"""Refresh a catalog entry from its registry: ``reprobuild resolve --refresh NAME``.

The entry's tag is resolved through the Registry API (the index digest, and the platform's
own manifest digest), then the platform image's config is read by that digest, so the
versions and the digest come from the same image. Versions come from the config's ENV and
labels (NGC's and nvidia/cuda's conventions, :mod:`reprobuild.bases.gpustack`), never from the tag
string. Facts the image does not declare (Python on NGC images, for one) keep their old value
and source. The minimum driver follows from the declared CUDA version through the CUDA
release notes' table that the in-image check uses.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, Protocol

from reprobuild.bases import gpustack as stacklib
from reprobuild.bases.catalog import BaseEntry, Fact, fact_keys, load_catalog, write_catalog
from reprobuild.bases.refs import ImageRef
from reprobuild.bases.registry import Resolved
from reprobuild.errors import CatalogError
from reprobuild_entrypoint.drivercheck import required_driver

# ENV names that declare a fact the stack module does not read (the official python images').
_EXTRA_ENV = {"PYTHON_VERSION": "python"}


class Registry(Protocol):
    """What a refresh needs of a registry (:class:`reprobuild.bases.registry.RegistryClient`)."""

    def resolve(self, ref: ImageRef | str, *, platform: str = ...) -> Resolved: ...

    def image_config(self, ref: ImageRef | str, *, platform: str = ...) -> dict[str, Any]: ...


@dataclass(frozen=True)
class Change:
    field: str
    old: str | None
    new: str | None

    def line(self) -> str:
        return f"{self.field}: {self.old or '(none)'} -> {self.new or '(none)'}"


@dataclass(frozen=True)
class Refreshed:
    entry: BaseEntry
    changes: list[Change]
    written: bool


def refresh_catalog(path: Path, name: str, client: Registry, *, dry_run: bool) -> Refreshed:
    """Refresh entry ``name`` of the catalog file ``path``; rewrite the file (atomically)
    unless ``dry_run``. A failure leaves the file as it was."""
    if not path.is_file():
        raise CatalogError(
            f"{path}: no such catalog file",
            hint="run from the repository root or give --catalog FILE (the catalog inside the "
            "installed package is read-only)",
        )
    catalog = load_catalog(path)
    old = catalog.get(name)
    new = refreshed_entry(old, client)
    if not dry_run:
        write_catalog(path, catalog.with_entry(new))
    return Refreshed(new, changes(old, new), written=not dry_run)


def tag_ref(ref: ImageRef) -> ImageRef:
    return replace(ref, digest=None)


def refreshed_entry(entry: BaseEntry, client: Registry, *, today: str | None = None) -> BaseEntry:
    """``entry`` as its registry describes its tag today."""
    resolved = client.resolve(tag_ref(entry.ref), platform=entry.platform)
    pinned = resolved.ref.by_digest()
    config = client.image_config(pinned, platform=entry.platform)
    inner: dict[str, Any] = config.get("config") or {}
    env = stacklib.parse_env(inner.get("Env"))
    labels = {str(k): str(v) for k, v in (inner.get("Labels") or {}).items()}
    date = today or datetime.now(UTC).date().isoformat()
    where = f"{resolved.ref.registry}/{resolved.ref.repository}@{resolved.ref.digest}"

    read: dict[str, Fact] = {}
    declared = stacklib.declared_with_origin(env, labels)
    for key in fact_keys():
        if key in declared:
            value, origin = declared[key]
            read[key] = Fact(value, f"image config of {where} ({origin}), read {date}")
    for env_name, key in _EXTRA_ENV.items():
        if env.get(env_name):
            read[key] = Fact(
                env[env_name], f"image config of {where} (ENV {env_name}), read {date}"
            )
    cuda = read.get("cuda")
    requirement = required_driver(cuda.value) if cuda else None
    if cuda and requirement is not None and requirement.driver_min:  # else: keep the old fact
        read["driver_min"] = Fact(
            requirement.driver_min,
            f"minimum driver for CUDA {cuda.value} per {requirement.source}",
        )
    versions = {**entry.versions, **read}
    raw_entrypoint = inner.get("Entrypoint")
    entrypoint = tuple(str(e) for e in raw_entrypoint) if isinstance(raw_entrypoint, list) else ()
    return replace(
        entry,
        ref=resolved.ref if resolved.ref.tag else replace(resolved.ref, tag=entry.ref.tag),
        platform_digest=resolved.platform_digest if resolved.is_index else None,
        entrypoint=entrypoint,
        source=f"Registry API of {resolved.ref.registry}, tag {entry.ref.tag} resolved {date}",
        verified=True,
        versions={k: versions[k] for k in fact_keys() if k in versions},
    )


def changes(old: BaseEntry, new: BaseEntry) -> list[Change]:
    """What a refresh changed, in the catalog file's field order."""
    out: list[Change] = []

    def add(name: str, a: object, b: object) -> None:
        if a != b:
            out.append(Change(name, None if a is None else str(a), None if b is None else str(b)))

    add("digest", old.ref.digest, new.ref.digest)
    add("platform_digest", old.platform_digest, new.platform_digest)
    add("entrypoint", _words(old.entrypoint), _words(new.entrypoint))
    for key in fact_keys():
        add(key, old.version(key), new.version(key))
    add("verified", old.verified, new.verified)
    return out


def _words(words: tuple[str, ...] | None) -> str | None:
    return None if words is None else "[" + ", ".join(words) + "]"
