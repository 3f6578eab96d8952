"""The image manifest: a typed, schema-versioned record of the stack an image carries.

Stored in the image at /opt/reprobuild/manifest.json; its sha256 is a label, so a copy can be
checked against the image it claims to describe.
"""

from __future__ import annotations

import hashlib
import json
import re
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from typing import Any

from reprobuild._util import jsonload
from reprobuild.errors import ReprobuildError
from reprobuild.locks.records import LockChoice
from reprobuild_entrypoint.contract import LABEL_PREFIX

SCHEMA_VERSION = 1
# Fields a manifest may lack (images built before they existed); distributions is read apart.
_OPTIONAL = (
    "distributions",
    "stack",
    "gpu",
    "build",
    "sbom_sha256",
    "lock_format",
    "lock_selection",
    "built_from_source",
    "build_lock",
)
# Left out of the JSON when None: a manifest from before they existed keeps its bytes.
_OMIT_NONE = ("sbom_sha256", "lock_format", "lock_selection", "built_from_source", "build_lock")
# What each entry of built_from_source holds (the wheel-build stage's built.json).
BUILT_KEYS = ("name", "version", "sdist", "sdist_sha256", "wheel", "wheel_sha256")
# The label carrying the manifest file's sha256 (the file's path in the image is the runtime's
# reprobuild_entrypoint.MANIFEST_PATH: it reads the file in every run).
MANIFEST_LABEL = f"{LABEL_PREFIX}manifest.sha256"
# Labels that say how the image was built (builder, its version, reproducible: true/false).
BUILD_LABEL = f"{LABEL_PREFIX}build."
# An image is untrusted input: a manifest file larger than this is refused before parsing.
MAX_MANIFEST_BYTES = 8 * 1024 * 1024


def _strings(value: Any, keys: tuple[str, ...]) -> bool:
    return isinstance(value, dict) and all(isinstance(value.get(k), str) for k in keys)


def _lock_selection(value: Any) -> bool:
    return (
        isinstance(value, dict)
        and all(isinstance(value.get(k), list) for k in ("extras", "groups"))
        and isinstance(value.get("default_groups"), bool)
    )


# The optional fields' shapes, checked when a manifest carries them (an image is untrusted
# input): what a value must be, and how the error names it. None is allowed where the field
# itself may be None.
_FIELD_SHAPES: dict[str, tuple[Callable[[Any], bool], str]] = {
    "build": (lambda v: isinstance(v, dict), "a JSON object"),
    "sbom_sha256": (
        lambda v: v is None or (isinstance(v, str) and bool(re.fullmatch("[0-9a-f]{64}", v))),
        "a sha256 hex digest",
    ),
    "lock_format": (lambda v: v is None or isinstance(v, str), "a string"),
    "lock_selection": (
        lambda v: v is None or _lock_selection(v),
        "{extras: [...], groups: [...], default_groups: true|false}",
    ),
    "built_from_source": (
        lambda v: v is None or (isinstance(v, list) and all(_strings(b, BUILT_KEYS) for b in v)),
        f"a list of {{{', '.join(BUILT_KEYS)}}}",
    ),
    "build_lock": (
        lambda v: v is None or _strings(v, ("file", "sha256")),
        "{file: ..., sha256: ...}",
    ),
}


@dataclass(frozen=True, order=True)
class Distribution:
    name: str
    version: str
    origin: str = "lock"  # "lock": installed from the lock; "base": the base image's own


@dataclass(frozen=True)
class Manifest:
    builder_version: str
    name: str
    variant: str
    base_ref: str
    base_digest: str
    lock_file: str
    lock_sha256: str
    seed: int
    determinism: str
    created: str
    python_version: str
    machine: str
    distributions: tuple[Distribution, ...] = field(default_factory=tuple)
    # GPU images: what the stack declares and reports (see reprobuild.bases.gpustack), and the
    # facts the in-image host check needs:
    # {"cuda": "12.6", "driver_min": ..., "driver_min_compat": ...}.
    stack: dict[str, Any] = field(default_factory=dict)
    gpu: dict[str, str] | None = None
    # How it was built: {"builder": "buildah", "builder_version": "1.28.2", "reproducible":
    # true}; reproducible means the same inputs give the same image ID (see buildah.py).
    build: dict[str, Any] = field(default_factory=dict)
    # The sha256 of the image's SBOM (reprobuild.imaging.sbom.SBOM_PATH); None in an image built
    # before images had one, and then left out of the JSON, so such a manifest keeps its bytes.
    sbom_sha256: str | None = None
    # The lock's format as its tool names the file (uv.lock, poetry.lock, Pipfile.lock,
    # pdm.lock, pylock.toml, or requirements for a hashed requirements file); None in an image
    # built before manifests named it.
    lock_format: str | None = None
    # A native lock's selection: {"extras": [...], "groups": [...], "default_groups": false};
    # None for the requirements and pylock formats (and in older images).
    lock_selection: dict[str, Any] | None = None
    # The packages built from their sdists in the image's wheel-build stage: name, version,
    # sdist, sdist_sha256, wheel, wheel_sha256 (each "sha256:<hex>"); None when none was.
    built_from_source: list[dict[str, str]] | None = None
    # The build requirements lock those were built with: {"file": ..., "sha256": ...}.
    build_lock: dict[str, str] | None = None
    schema_version: int = SCHEMA_VERSION

    @property
    def lock_description(self) -> str | None:
        """``uv.lock (extras cpu; groups dev)``; None when the image does not record it."""
        if self.lock_format is None:
            return None
        chosen = self.lock_selection
        if chosen is None:
            return self.lock_format
        choice = LockChoice(
            tuple(str(e) for e in chosen["extras"]),
            tuple(str(g) for g in chosen["groups"]),
            bool(chosen["default_groups"]),
        )
        return f"{self.lock_format} ({choice.describe()})"

    def to_dict(self) -> dict[str, Any]:
        data = asdict(self)
        data["distributions"] = [asdict(d) for d in self.distributions]
        for key in _OMIT_NONE:
            if data[key] is None:
                del data[key]
        return data

    def to_json(self) -> bytes:
        """Canonical bytes: sorted keys, two-space indent, trailing newline."""
        return (json.dumps(self.to_dict(), sort_keys=True, indent=2) + "\n").encode()

    @property
    def sha256(self) -> str:
        return hashlib.sha256(self.to_json()).hexdigest()

    @classmethod
    def from_dict(cls, data: Any) -> Manifest:
        if not isinstance(data, dict):
            raise ReprobuildError("manifest is not a JSON object")
        version = data.get("schema_version")
        if version != SCHEMA_VERSION:
            raise ReprobuildError(
                f"manifest schema_version {version!r} is not supported (this reprobuild reads "
                f"{SCHEMA_VERSION})",
                hint="use the reprobuild release that built the image",
            )
        try:
            dists = tuple(
                Distribution(str(d["name"]), str(d["version"]), str(d.get("origin", "lock")))
                for d in data["distributions"]
            )
            fields = {k: data[k] for k in cls.__dataclass_fields__ if k not in _OPTIONAL}
            fields.update({k: data[k] for k in _OPTIONAL if k in data and k != "distributions"})
        except (KeyError, TypeError) as exc:
            raise ReprobuildError(f"manifest is missing field {exc}") from None
        for key, (valid, what) in _FIELD_SHAPES.items():
            if key in fields and not valid(fields[key]):
                raise ReprobuildError(f"manifest field {key!r} is not {what}")
        return cls(**fields, distributions=dists)

    @classmethod
    def from_json(cls, raw: bytes) -> Manifest:
        return cls.from_dict(jsonload.loads(raw, "manifest", max_bytes=MAX_MANIFEST_BYTES))

    def labels(self) -> dict[str, str]:
        """The labels that depend on what the build produced."""
        labels = {
            MANIFEST_LABEL: self.sha256,
            f"{LABEL_PREFIX}python": self.python_version,
        }
        labels.update(self.stack.get("labels", {}))
        if self.build:
            labels[BUILD_LABEL + "builder"] = str(self.build.get("builder", ""))
            labels[BUILD_LABEL + "builder-version"] = str(self.build.get("builder_version", ""))
            labels[BUILD_LABEL + "reproducible"] = json.dumps(bool(self.build.get("reproducible")))
        if self.gpu and self.gpu.get("driver_min"):
            labels[f"{LABEL_PREFIX}driver.min"] = self.gpu["driver_min"]
        return labels
