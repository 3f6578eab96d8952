"""The base-image catalog: named, digest-pinned bases stored as data in ``images/catalog.yaml``."""

from __future__ import annotations

from dataclasses import dataclass
from importlib import resources
from pathlib import Path
from typing import Any, Literal

import yaml

from reprobuild.errors import CatalogError, ImageRefError
from reprobuild.refs import ImageRef, parse_pinned

SCHEMA_VERSION = 1
Kind = Literal["cpu", "gpu"]
_ENTRY_KEYS = {
    "kind",
    "ref",
    "platform",
    "python",
    "os",
    "source",
    "verified",
    "versions",
    "entrypoint",
}
_REQUIRED = ("kind", "ref", "platform", "source")


@dataclass(frozen=True)
class BaseEntry:
    name: str
    kind: Kind
    ref: ImageRef
    platform: str
    source: str
    python: str | None = None
    os: str | None = None
    verified: bool = False
    entrypoint: tuple[str, ...] | None = None  # the base's own ENTRYPOINT; None: not recorded


@dataclass(frozen=True)
class Catalog:
    entries: dict[str, BaseEntry]

    def get(self, name: str) -> BaseEntry:
        try:
            return self.entries[name]
        except KeyError:
            known = ", ".join(sorted(self.entries)) or "(none)"
            raise CatalogError(
                f"no base named {name!r} in the catalog; known: {known}",
                hint="or give a full NAME@sha256:<64 hex> reference",
            ) from None


def default_catalog_text() -> str:
    """The catalog shipped inside the wheel (a copy of images/catalog.yaml), or the source
    tree's images/catalog.yaml when running from a checkout."""
    packaged = resources.files("reprobuild").joinpath("data/catalog.yaml")
    if packaged.is_file():
        return packaged.read_text("utf-8")
    return (Path(__file__).resolve().parents[2] / "images" / "catalog.yaml").read_text("utf-8")


def load_catalog(path: Path | None = None) -> Catalog:
    where = str(path) if path else "the built-in catalog"
    try:
        text = path.read_text("utf-8") if path else default_catalog_text()
        data = yaml.safe_load(text)
    except (OSError, UnicodeDecodeError, yaml.YAMLError) as exc:
        raise CatalogError(f"{where}: cannot be read: {exc}") from exc
    return parse_catalog(data, where)


def parse_catalog(data: Any, where: str) -> Catalog:
    version = data.get("schema_version") if isinstance(data, dict) else None
    if isinstance(version, bool) or version != SCHEMA_VERSION:
        raise CatalogError(f"{where}: schema_version must be {SCHEMA_VERSION}")
    bases = data.get("bases")
    if not isinstance(bases, dict):
        raise CatalogError(f"{where}: 'bases' must be a mapping of name to entry")
    entries: dict[str, BaseEntry] = {}
    for name, raw in bases.items():
        if not isinstance(raw, dict):
            raise CatalogError(f"{where}: base {name!r} must be a mapping")
        unknown = sorted(set(raw) - _ENTRY_KEYS)
        if unknown:
            raise CatalogError(f"{where}: base {name!r} has unknown key {unknown[0]!r}")
        missing = [k for k in _REQUIRED if k not in raw]
        if missing:
            raise CatalogError(f"{where}: base {name!r} lacks {missing[0]!r}")
        entrypoint = raw.get("entrypoint")
        if entrypoint is not None and (
            not isinstance(entrypoint, list)
            or not all(isinstance(e, str) and e for e in entrypoint)
        ):
            raise CatalogError(f"{where}: base {name!r} entrypoint must be a list of strings")
        if not isinstance(raw.get("verified", False), bool):
            raise CatalogError(f"{where}: base {name!r} verified must be true or false")
        if raw["kind"] not in ("cpu", "gpu"):
            raise CatalogError(f"{where}: base {name!r} kind must be cpu or gpu")
        try:
            ref = parse_pinned(str(raw["ref"]), what=f"catalog base {name!r}")
        except ImageRefError as exc:
            raise CatalogError(f"{where}: {exc}") from exc
        entries[str(name)] = BaseEntry(
            name=str(name),
            kind=raw["kind"],
            ref=ref,
            platform=str(raw["platform"]),
            source=str(raw["source"]),
            python=None if raw.get("python") is None else str(raw["python"]),
            os=None if raw.get("os") is None else str(raw["os"]),
            verified=bool(raw.get("verified", False)),
            entrypoint=None if entrypoint is None else tuple(entrypoint),
        )
    return Catalog(entries)


def is_catalog_name(value: str) -> bool:
    return "/" not in value and ":" not in value and "@" not in value


def resolve_base(value: str, catalog: Catalog) -> ImageRef:
    """A project's base value: a catalog name, or a full reference pinned by digest."""
    if is_catalog_name(value):
        return catalog.get(value).ref
    return parse_pinned(value)
