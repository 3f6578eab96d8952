"""``reprobuild image --platform linux/amd64,linux/arm64 --push REGISTRY/NAME:TAG``: one image
per platform, each built as ``--platform P`` alone builds it (same layers, same image ID) and
pushed as ``NAME:TAG-ARCH``; then an OCI image index of those manifests, put at ``NAME:TAG``.
One digest then names every platform's image, and an engine or a cluster node pulls the one
for its own machine.

The index's bytes are a function of the platforms' manifests alone (their digests, sizes and
media types, in the order ``--platform`` names them; no annotation, no time): when every
platform's image is the same, the index digest is the same.

Everything that can be refused is refused before the first build: a lock that does not cover
a platform, a base with no image for it, a machine this host cannot run. A build or push that
fails later leaves the engine's tags as they were and the index unwritten (a platform pushed
before stays at its ``-ARCH`` tag in the registry: a registry does not forget a tag).
"""

from __future__ import annotations

import json
from collections.abc import Callable, Sequence
from contextlib import AbstractContextManager
from dataclasses import dataclass
from typing import Any, Protocol

from reprobuild.bases.oci import OCI_INDEX
from reprobuild.bases.refs import ImageRef, parse_ref
from reprobuild.errors import ReprobuildError
from reprobuild.imaging.platforms import BuildPlatform
from reprobuild.imaging.push import PushReport
from reprobuild.imaging.result import ImageResult

Log = Callable[[str], None]


class IndexEngine(Protocol):
    def image_id(self, ref: str) -> str | None: ...
    def inspect(self, ref: str) -> dict[str, Any]: ...


class IndexRegistry(Protocol):
    def get_manifest(self, ref: ImageRef, reference: str) -> tuple[bytes, str, str]: ...
    def put_manifest(self, ref: ImageRef, reference: str, body: bytes, media_type: str) -> str: ...


BuildOne = Callable[[BuildPlatform, str], ImageResult]
"""Builds and pushes one platform's image to the given ``NAME:TAG-ARCH``; its result."""


@dataclass(frozen=True)
class IndexEntry:
    platform: BuildPlatform
    result: ImageResult
    media_type: str
    size: int

    @property
    def push(self) -> PushReport:
        assert self.result.push is not None  # every entry was pushed
        return self.result.push

    def to_dict(self) -> dict[str, Any]:
        return {
            "platform": self.platform.name,
            "media_type": self.media_type,
            "size": self.size,
            **self.result.to_dict(),
        }


@dataclass(frozen=True)
class IndexResult:
    """What ``image`` gives back for several platforms: the index as pushed, and each
    platform's image (tag, ID, manifest, push report)."""

    pushed: str
    """``NAME:TAG``, where the index was put."""
    reference: str
    """``NAME@sha256:<index digest>``: every platform's image, for good."""
    digest: str
    entries: tuple[IndexEntry, ...]

    @property
    def image(self) -> str:
        return self.reference

    def to_dict(self) -> dict[str, Any]:
        return {
            "image": self.reference,
            "pushed": self.pushed,
            "digest": self.digest,
            "media_type": OCI_INDEX,
            "platforms": [entry.to_dict() for entry in self.entries],
        }

    def summary(self) -> str:
        each = ", ".join(f"{e.platform.name} {e.push.digest[:19]}" for e in self.entries)
        return f"pushed the index {self.reference} at {self.pushed}: {each}"


def index_document(entries: Sequence[tuple[str, str, int, dict[str, str]]]) -> bytes:
    """The OCI image index of ``(media type, digest, size, platform)`` entries, in their
    order, as compact JSON with a fixed key order: the same entries, the same bytes."""
    manifests = [
        {"mediaType": media_type, "digest": digest, "size": size, "platform": platform}
        for media_type, digest, size, platform in entries
    ]
    document = {"schemaVersion": 2, "mediaType": OCI_INDEX, "manifests": manifests}
    return json.dumps(document, separators=(",", ":"), sort_keys=True).encode()


def platform_of_image(engine: IndexEngine, image_id: str, wanted: BuildPlatform) -> dict[str, str]:
    """The index entry's platform, as the image's config says it (os, architecture and, where
    it names one, variant); it must be the platform built for."""
    attrs = engine.inspect(image_id)
    os_name, arch = str(attrs.get("Os") or ""), str(attrs.get("Architecture") or "")
    if f"{os_name}/{arch}" != wanted.name:
        raise ReprobuildError(
            f"--platform {wanted.name}: the built image {image_id[:19]} says {os_name}/{arch}",
            hint="the base's image for the platform is not of it; pin another base",
        )
    platform = {"architecture": arch, "os": os_name}
    variant = attrs.get("Variant")
    if isinstance(variant, str) and variant:
        platform["variant"] = variant
    return platform


def platform_ref(push: str, target: BuildPlatform) -> str:
    """Where a platform's image goes: ``NAME:TAG-ARCH`` beside the index's ``NAME:TAG``."""
    ref = parse_ref(push)
    return f"{ref.name}:{ref.tag or 'latest'}-{target.arch}"


def build_index(
    targets: Sequence[BuildPlatform],
    push: str,
    build_one: BuildOne,
    *,
    engine: IndexEngine,
    registry: Callable[[], AbstractContextManager[IndexRegistry]],
    log: Log = lambda _: None,
) -> IndexResult:
    """Build and push each platform's image, then put the index of them at ``push``.
    ``registry`` opens a client once the builds are done (a client's deadline counts from its
    start)."""
    target = parse_ref(push)
    built: list[tuple[BuildPlatform, ImageResult, PushReport]] = []
    for wanted in targets:
        log(f"platform {wanted.name}")
        result = build_one(wanted, platform_ref(push, wanted))
        if result.push is None:
            raise ReprobuildError(f"--platform {wanted.name}: the image was not pushed")
        built.append((wanted, result, result.push))
    tag = target.tag or "latest"
    with registry() as client:
        entries: list[IndexEntry] = []
        for wanted, result, report in built:
            body, media_type, _ = client.get_manifest(target, report.digest)
            entries.append(IndexEntry(wanted, result, media_type, len(body)))
        document = index_document(
            [
                (e.media_type, e.push.digest, e.size, platform_of_image(engine, e.result.id, w))
                for e, w in zip(entries, targets, strict=True)
            ]
        )
        log(f"putting the index of {len(entries)} platforms at {target.name}:{tag}")
        digest = client.put_manifest(target, tag, document, OCI_INDEX)
    return IndexResult(f"{target.name}:{tag}", f"{target.name}@{digest}", digest, tuple(entries))
