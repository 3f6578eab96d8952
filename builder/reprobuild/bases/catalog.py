"""The base-image catalog: named, digest-pinned bases stored as data in ``images/catalog.yaml``.

The file is validated against ``images/catalog.schema.json`` (JSON Schema 2020-12) when it is
loaded, then each ``ref`` is parsed and must be pinned by digest. Every version an entry
carries is a :class:`Fact`: a value and where it came from. Nothing here hard-codes a base or a
version. :func:`dump_catalog` writes the canonical text (``resolve --refresh`` rewrites the file
with it), so the shipped file is always in that form.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass, field
from functools import cache
from importlib import resources
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal

import yaml

from reprobuild._util.boundedread import read_small_file
from reprobuild._util.fsutil import write_atomic
from reprobuild._util.yamlload import Marks, load_yaml, load_yaml_marked, undecodable_at
from reprobuild.bases.refs import ImageRef, parse_pinned
from reprobuild.errors import CatalogError, ImageRefError, UnknownBaseError

if TYPE_CHECKING:
    import jsonschema

SCHEMA_VERSION = 2
# The shipped catalog is a few KiB; a catalog file past this is not one.
CATALOG_MAX_BYTES = 4 << 20
Kind = Literal["cpu", "gpu"]
_HEADER = """\
# reprobuild base-image catalog: names a project can use for base.cpu / base.gpu.
# Data only: code never hard-codes a base or a version. Every entry is pinned by digest and
# validated against catalog.schema.json when loaded. Each version is a fact with its source.
# `verified: true` means the digest and the versions were read from the registry itself by
# `reprobuild resolve --refresh NAME` (the digest from the Registry API, the versions from the
# image's own config: its ENV and labels). `entrypoint` is the base's own ENTRYPOINT, which
# reprobuild's entrypoint chains. This file is rewritten in this canonical form by --refresh.
"""


@dataclass(frozen=True)
class Fact:
    """One version an image carries, and where that was read (a URL, or the registry)."""

    value: str
    source: str


@dataclass(frozen=True)
class BaseEntry:
    name: str
    kind: Kind
    ref: ImageRef
    platform: str
    source: str  # where the digest came from
    verified: bool = False
    entrypoint: tuple[str, ...] | None = None  # the base's own ENTRYPOINT; None: not recorded
    versions: Mapping[str, Fact] = field(default_factory=dict)
    platform_digest: str | None = None  # the per-platform manifest digest, when ref is an index

    @property
    def python(self) -> str | None:
        return self.version("python")

    def version(self, key: str) -> str | None:
        fact = self.versions.get(key)
        return fact.value if fact else None

    def to_dict(self) -> dict[str, Any]:
        """The entry as the catalog file stores it (key order is the file's)."""
        out: dict[str, Any] = {
            "kind": self.kind,
            "ref": str(self.ref),
            "platform": self.platform,
        }
        if self.platform_digest:
            out["platform_digest"] = self.platform_digest
        if self.entrypoint is not None:
            out["entrypoint"] = list(self.entrypoint)
        out["source"] = self.source
        out["verified"] = self.verified
        out["versions"] = {
            k: {"value": f.value, "source": f.source} for k, f in self.versions.items()
        }
        return out


@dataclass(frozen=True)
class Catalog:
    entries: dict[str, BaseEntry]

    def get(self, name: str) -> BaseEntry:
        try:
            return self.entries[name]
        except KeyError:
            known = ", ".join(sorted(self.entries)) or "(none)"
            raise UnknownBaseError(
                f"no base named {name!r} in the catalog; known: {known}",
                hint="or give a full NAME@sha256:<64 hex> reference",
            ) from None

    def with_entry(self, entry: BaseEntry) -> Catalog:
        return Catalog({**self.entries, entry.name: entry})


def _data_text(name: str) -> str:
    """A file shipped inside the wheel (a copy of images/NAME), or the source tree's."""
    if _shipped(name):
        return resources.files("reprobuild").joinpath(f"data/{name}").read_text("utf-8")
    return (Path(__file__).resolve().parents[3] / "images" / name).read_text("utf-8")


def _shipped(name: str) -> bool:
    """Whether images/NAME is read from the installed wheel, where the build checked it,
    rather than from a source tree that may be being edited."""
    return resources.files("reprobuild").joinpath(f"data/{name}").is_file()


def default_catalog_text() -> str:
    return _data_text("catalog.yaml")


@cache
def schema() -> dict[str, Any]:
    loaded: dict[str, Any] = json.loads(_data_text("catalog.schema.json"))
    return loaded


def fact_keys() -> tuple[str, ...]:
    """The version keys an entry may carry, as the schema lists them."""
    return tuple(schema()["$defs"]["base"]["properties"]["versions"]["properties"])


def load_catalog(path: Path | None = None) -> Catalog:
    where = str(path) if path else "the built-in catalog"
    try:
        raw = (
            read_small_file(path, CATALOG_MAX_BYTES, lambda p: CatalogError(f"{where}: {p}"))
            if path
            else default_catalog_text().encode("utf-8")
        )
        text = raw.decode("utf-8")
    except FileNotFoundError:
        raise CatalogError(f"{where}: not found") from None
    except UnicodeDecodeError as exc:
        raise CatalogError(f"{where}:{undecodable_at(raw, exc)}: is not UTF-8") from None
    data, marks = load_yaml_marked(
        text,
        lambda at, problem: CatalogError(
            f"{where}:{at}: {problem}" if at else f"{where}: {problem}"
        ),
    )
    # The wheel's own catalog went through the schema when the wheel was tested
    # (tests/unit/test_catalog.py); importing jsonschema costs 0.2 s, and 1.9 s where
    # jsonschema[format-nongpl] is installed (its rfc3987-syntax builds grammars at import),
    # on every build. A catalog named by path, or a source tree's, is checked in full.
    shipped = path is None and _shipped("catalog.yaml")
    return parse_catalog(data, where, marks, schema_checked=shipped)


def _path_of(error: jsonschema.ValidationError) -> str:
    return ".".join(str(p) for p in error.absolute_path) or "(top level)"


def _message(error: jsonschema.ValidationError) -> str:
    """jsonschema's message, kept to one readable line: a choice of required keys is named,
    and a long value is named by its type instead of printed whole."""
    choices = error.validator_value
    if (
        error.validator in ("anyOf", "oneOf")
        and isinstance(choices, list)
        and all(isinstance(c, dict) and set(c) == {"required"} for c in choices)
    ):
        return "needs one of: " + ", ".join(k for c in choices for k in c["required"])
    text = repr(error.instance)
    if len(text) > 60 and text in error.message:
        return error.message.replace(text, f"a {type(error.instance).__name__}")
    return error.message


def _schema_error(data: Any) -> jsonschema.ValidationError | None:
    import jsonschema

    validator = jsonschema.Draft202012Validator(schema())
    error: jsonschema.ValidationError | None = jsonschema.exceptions.best_match(
        validator.iter_errors(data)
    )
    return error


def parse_catalog(
    data: Any, where: str, marks: Marks | None = None, *, schema_checked: bool = False
) -> Catalog:
    """Validate a loaded catalog; ``marks`` (from the loader) put each message at its line.
    ``schema_checked``: the data is known to follow the schema (the wheel's own catalog)."""

    def at(*keys: Any) -> str:
        line = marks.line(*keys) if marks is not None else None
        return f"{where}:{line}" if line else where

    version = data.get("schema_version") if isinstance(data, dict) else None
    if isinstance(version, bool) or version != SCHEMA_VERSION:
        raise CatalogError(
            f"{at('schema_version')}: schema_version must be {SCHEMA_VERSION}, got {version!r}",
            hint="this reprobuild reads catalog schema 2 (images/catalog.schema.json)",
        )
    error = None if schema_checked else _schema_error(data)
    if error is not None:
        raise CatalogError(
            f"{at(*error.absolute_path)}: {_path_of(error)}: {_message(error)}",
            hint="the catalog's format is images/catalog.schema.json",
        )
    entries: dict[str, BaseEntry] = {}
    for name, raw in data["bases"].items():
        try:
            ref = parse_pinned(str(raw["ref"]), what=f"catalog base {name!r}")
        except ImageRefError as exc:
            raise CatalogError(f"{at('bases', name, 'ref')}: {exc}") from exc
        if ref.tag is None:
            raise CatalogError(
                f"{at('bases', name, 'ref')}: catalog base {name!r} ref {raw['ref']!r} has "
                "no tag; write NAME:TAG@sha256:<digest> (the tag is what `resolve --refresh` "
                "re-resolves)"
            )
        entrypoint = raw.get("entrypoint")
        entries[name] = BaseEntry(
            name=name,
            kind=raw["kind"],
            ref=ref,
            platform=raw["platform"],
            source=raw["source"],
            verified=raw["verified"],
            entrypoint=None if entrypoint is None else tuple(entrypoint),
            versions={k: Fact(v["value"], v["source"]) for k, v in raw["versions"].items()},
            platform_digest=raw.get("platform_digest"),
        )
    return Catalog(entries)


def dump_catalog(catalog: Catalog) -> str:
    """The canonical text of a catalog: the header, then the entries sorted by name."""
    data = {
        "schema_version": SCHEMA_VERSION,
        "bases": {name: catalog.entries[name].to_dict() for name in sorted(catalog.entries)},
    }
    body = yaml.safe_dump(data, sort_keys=False, width=100, allow_unicode=True)
    return _HEADER + body


def write_catalog(path: Path, catalog: Catalog) -> None:
    """Validate the new text by loading it back, then replace ``path`` atomically."""
    text = dump_catalog(catalog)
    parse_catalog(load_yaml(text, lambda _line, problem: CatalogError(problem)), str(path))
    write_atomic(path, text, what="the catalog")


def is_catalog_name(value: str) -> bool:
    return "/" not in value and ":" not in value and "@" not in value


def python_eol(catalog: Catalog, python: str) -> Fact | None:
    """When CPython ``python`` (X.Y) reaches its upstream end of life, as the catalog's CPU
    bases record it (``python_eol``, ``YYYY-MM`` from the release schedule's PEP)."""
    for name in sorted(catalog.entries):
        entry = catalog.entries[name]
        have = ".".join((entry.python or "").split(".")[:2])
        fact = entry.versions.get("python_eol")
        if have == python and fact is not None:
            return fact
    return None


def eol_warning(python: str, fact: Fact | None, today: str) -> str | None:
    """One line when ``python`` is past its end of life on ``today`` (``YYYY-MM...``)."""
    if fact is None or fact.value > today[:7]:
        return None
    where = fact.source.split(":")[0]  # "PEP 596 (Python 3.9 release schedule)"
    return (
        f"CPython {python} reached its upstream end of life in {fact.value} ({where}): "
        "the image builds, but that Python gets no more security fixes"
    )
