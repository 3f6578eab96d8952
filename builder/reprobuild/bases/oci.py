"""What a registry serves, as the registry client reads it: the manifest media types, the
:class:`Resolved` answer, an index entry's platform and the choice among them, and the
digest check every fetched body goes through (split out of :mod:`reprobuild.bases.registry`).
"""

from __future__ import annotations

import hashlib
import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, NamedTuple

from reprobuild.bases.refs import DIGEST_RE, ImageRef
from reprobuild.errors import RegistryError

OCI_INDEX = "application/vnd.oci.image.index.v1+json"
DOCKER_MANIFEST_LIST = "application/vnd.docker.distribution.manifest.list.v2+json"
OCI_MANIFEST = "application/vnd.oci.image.manifest.v1+json"
DOCKER_MANIFEST = "application/vnd.docker.distribution.manifest.v2+json"
ACCEPT_MANIFESTS = ", ".join((OCI_INDEX, DOCKER_MANIFEST_LIST, OCI_MANIFEST, DOCKER_MANIFEST))
INDEX_TYPES = frozenset({OCI_INDEX, DOCKER_MANIFEST_LIST})
MANIFEST_TYPES = frozenset({OCI_MANIFEST, DOCKER_MANIFEST})

_PLATFORM_RE = re.compile(r"^([a-z0-9_.-]+)/([a-z0-9_.-]+)(?:/([a-z0-9_.-]+))?$")
ARCH_ALIASES = {"x86_64": "amd64", "x86-64": "amd64", "aarch64": "arm64"}
# The variant an architecture means when none is written (containerd's platform matcher).
_DEFAULT_VARIANT = {"arm64": "v8", "arm": "v7", "amd64": "v1"}
_ATTESTATION_ANNOTATION = "vnd.docker.reference.type"


@dataclass(frozen=True)
class Resolved:
    """The answer to "what does this tag mean today": a pinned ref plus what it points at."""

    ref: ImageRef
    media_type: str
    platform: str | None
    platform_digest: str
    config_digest: str | None

    @property
    def is_index(self) -> bool:
        return self.media_type in INDEX_TYPES

    def to_dict(self) -> dict[str, object]:
        return {
            "ref": str(self.ref),
            "pinned": self.ref.by_digest(),
            "registry": self.ref.registry,
            "repository": self.ref.repository,
            "tag": self.ref.tag,
            "digest": self.ref.digest,
            "media_type": self.media_type,
            "platform": self.platform,
            "platform_digest": self.platform_digest,
            "config_digest": self.config_digest,
        }


# --- platforms -----------------------------------------------------------------------------


class Platform(NamedTuple):
    os: str
    architecture: str
    variant: str | None

    def __str__(self) -> str:
        base = f"{self.os}/{self.architecture}"
        return f"{base}/{self.variant}" if self.variant else base


def parse_platform(text: str) -> Platform:
    match = _PLATFORM_RE.match(text.strip().lower()) if isinstance(text, str) else None
    if match is None:
        raise RegistryError(
            f"invalid platform {text!r}: expected OS/ARCH[/VARIANT], e.g. linux/amd64"
        )
    os_, arch, variant = match.groups()
    return Platform(os_, ARCH_ALIASES.get(arch, arch), variant)


def platform_of(entry: Mapping[str, Any]) -> Platform | None:
    """The platform of an index entry, or None for attestations and unknown platforms."""
    annotations = entry.get("annotations")
    if isinstance(annotations, Mapping) and _ATTESTATION_ANNOTATION in annotations:
        return None
    platform = entry.get("platform")
    if not isinstance(platform, Mapping):
        return None
    os_, arch = platform.get("os"), platform.get("architecture")
    if not isinstance(os_, str) or not isinstance(arch, str) or "unknown" in (os_, arch):
        return None
    variant = platform.get("variant")
    arch = ARCH_ALIASES.get(arch.lower(), arch.lower())
    return Platform(os_.lower(), arch, variant.lower() if isinstance(variant, str) else None)


def platform_matches(have: Platform, want: Platform) -> bool:
    if (have.os, have.architecture) != (want.os, want.architecture):
        return False
    if want.variant is None:
        return True
    default = _DEFAULT_VARIANT.get(have.architecture)
    return (have.variant or default) == want.variant


def select_platform(
    entries: list[tuple[Platform, Mapping[str, Any]]], want: Platform
) -> int | None:
    """Index of the entry for ``want``; with no variant asked, the default variant wins."""
    candidates = [i for i, (have, _) in enumerate(entries) if platform_matches(have, want)]
    if not candidates:
        return None
    default = _DEFAULT_VARIANT.get(want.architecture)
    for i in candidates:
        if entries[i][0].variant in (None, default):
            return i
    return candidates[0]


def sha256_of(data: bytes) -> str:
    return "sha256:" + hashlib.sha256(data).hexdigest()


def check_digest(digest: str, what: str) -> None:
    if not isinstance(digest, str) or not DIGEST_RE.fullmatch(digest):
        raise RegistryError(
            f"unsupported digest {digest!r} for {what}: "
            "expected sha256: and 64 lowercase hex digits"
        )
