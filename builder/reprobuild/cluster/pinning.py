"""Pinning a project's image: one image for good, as every job file names it.

One job: look a tag or an image ID up on the engine and name the image by its repository
digest (``NAME@sha256:<digest>``, when it was pushed or pulled) or else by its image ID; check
that reprobuild built it for the variant asked for, and read its manifest (checked against its
label) for what a multi-node job needs (torch).
"""

from __future__ import annotations

import hashlib
import json
import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any, Protocol

from reprobuild.bases.refs import ImageRef, parse_ref
from reprobuild.errors import ImageNotBuiltError, ImageRefError, RegistryError, ReprobuildError
from reprobuild.imaging.plan import project_tag, variant_of
from reprobuild.project.config import ProjectConfig
from reprobuild_entrypoint.contract import LABEL_PREFIX

IMAGE_ID_RE = re.compile(r"^(?:sha256:)?([0-9a-f]{12,64})$")
FULL_ID_RE = re.compile(r"^sha256:[0-9a-f]{64}$")


def check_pinned(image: str) -> None:
    """An image for a compose file must name one image for good: ``NAME@sha256:<digest>`` or
    a full image ID ``sha256:<64 hex>``."""
    if FULL_ID_RE.fullmatch(image):
        return
    if parse_ref(image).digest is None:
        raise ImageRefError(
            f"image {image!r} is not pinned: use NAME@sha256:<digest> or an image ID "
            "sha256:<64 hex>"
        )


class ImageLookup(Protocol):
    """What pinning needs from the engine (``reprobuild.backends.engine.Engine`` has it)."""

    def image_id(self, ref: str) -> str | None: ...

    def inspect(self, ref: str) -> dict[str, Any]: ...


class ImageReader(ImageLookup, Protocol):
    """What a multi-node job needs too: the image's manifest, to see that it has torch."""

    def read_file(self, image: str, path: str, *, max_bytes: int = ...) -> bytes: ...


@dataclass(frozen=True)
class PinnedImage:
    requested: str
    reference: str
    id: str
    labels: Mapping[str, str] = field(default_factory=dict)
    cmd: tuple[str, ...] = ()
    """The image's CMD (what a job runs when the project names no command)."""
    workdir: str = ""
    """The image's WorkingDir (a runtime that does not apply it is given it)."""
    architecture: str = ""
    """The image's architecture as its config says it (``amd64``, ``arm64``; "" unknown, or
    an image index's several)."""
    platforms: tuple[str, ...] = ()
    """An image index's platforms (``linux/amd64``, ``linux/arm64``); () a single image."""


def pinned_reference(name: str | None, image_id: str, repo_digests: list[str]) -> str:
    """The most immutable name of an image: ``NAME@sha256:<repo digest>``, else its image ID.
    Among its repository digests, one in a registry named outright (``127.0.0.1:5000/...``,
    where it was pushed) before one that names none: Engine 26's containerd image store gives
    a digest for every tag, pushed or not (``team/model@sha256:...`` for a local tag), and no
    registry serves that one. Within each, the one for ``name``'s repository first, else the
    first in sorted order."""
    wanted = _repository(name) if name is not None else None
    digests: list[tuple[bool, str, str]] = []
    for entry in sorted(repo_digests):
        try:
            ref = parse_ref(entry)
        except ImageRefError:
            continue
        if ref.digest:
            digests.append((ref.explicit_registry, ref.name, ref.digest))
    for explicit in (True, False):
        held = [(n, d) for e, n, d in digests if e == explicit]
        for ref_name, digest in held:
            if wanted is not None and _repository(ref_name) == wanted:
                return f"{ref_name}@{digest}"
        if held:
            return f"{held[0][0]}@{held[0][1]}"
    if not FULL_ID_RE.fullmatch(image_id):
        raise ReprobuildError(f"the engine gave image ID {image_id!r}, not sha256:<64 hex>")
    return image_id


def _repository(name: str) -> tuple[str, str]:
    """``python``, ``docker.io/library/python``: one repository, written two ways."""
    ref = parse_ref(name)
    return ref.registry, ref.repository


IndexReader = Callable[[ImageRef], "list[tuple[str, str]] | None"]
"""An image reference's index in its registry: (platform, manifest digest) per entry; None
where the reference names a single image."""


def registry_index(ref: ImageRef) -> list[tuple[str, str]] | None:
    """The entries of the index ``ref`` (``REGISTRY/NAME@sha256:...``) names, read from its
    registry (every body checked against its digest)."""
    from reprobuild.bases.oci import INDEX_TYPES, platform_of
    from reprobuild.bases.registry import RegistryClient

    assert ref.digest is not None
    with RegistryClient() as client:
        body, media_type, _ = client.get_manifest(ref, ref.digest)
    if media_type not in INDEX_TYPES:
        return None
    document = json.loads(body)
    entries: list[tuple[str, str]] = []
    for entry in document.get("manifests") or []:
        platform = platform_of(entry) if isinstance(entry, dict) else None
        if platform is not None and isinstance(entry.get("digest"), str):
            entries.append((f"{platform.os}/{platform.architecture}", entry["digest"]))
    return entries


def pin_index(
    engine: ImageLookup, ref: str, read_index: IndexReader | None = None
) -> PinnedImage | None:
    """``ref`` is ``REGISTRY/NAME@sha256:<index digest>`` (what ``image --platform A,B
    --push`` prints), absent from the engine, which holds its platforms' images: the image
    pinned by the index's digest, read from this host's platform's image (else the first the
    engine holds). None where ``ref`` names no index."""
    parsed = parse_ref(ref)
    if parsed.digest is None or not parsed.explicit_registry:
        return None
    try:
        entries = (read_index or registry_index)(parsed)
    except (RegistryError, ValueError):  # no registry answers for it: the engine's word stands
        return None
    if not entries:
        return None
    from reprobuild.imaging.platforms import host_platform

    host = host_platform().name
    held = [
        (platform, f"{parsed.name}@{digest}")
        for platform, digest in sorted(entries, key=lambda e: e[0] != host)
        if engine.image_id(f"{parsed.name}@{digest}") is not None
    ]
    if not held:
        raise ReprobuildError(
            f"{ref} is an image index, and none of its images is on this engine",
            hint=f"docker pull {ref}",
        )
    local = held[0][1]
    image = pin_image(engine, local)
    names = tuple(platform for platform, _ in entries)
    return replace(image, requested=ref, reference=ref, architecture="", platforms=names)


def pin_image(engine: ImageLookup, ref: str, *, build_command: str | None = None) -> PinnedImage:
    """Look ``ref`` (a tag or an image ID) up on the engine and pin it. An image index's
    ``REGISTRY/NAME@sha256:<digest>`` is pinned by :func:`pin_index`."""
    # an image ID (full or short, as docker accepts it) names no repository
    name = None if IMAGE_ID_RE.fullmatch(ref) else parse_ref(ref).name
    if engine.image_id(ref) is None:
        index = pin_index(engine, ref) if name is not None else None
        if index is not None:
            return index
        raise ImageNotBuiltError(ref, build_command)
    attrs = engine.inspect(ref)
    image_id = str(attrs.get("Id", ""))
    labels = dict((attrs.get("Config") or {}).get("Labels") or {})
    reference = pinned_reference(name, image_id, list(attrs.get("RepoDigests") or []))
    config = attrs.get("Config") or {}
    cmd = tuple(str(w) for w in config.get("Cmd") or ())
    workdir = str(config.get("WorkingDir") or "")
    arch = attrs.get("Architecture")
    return PinnedImage(
        ref, reference, image_id, labels, cmd, workdir, arch if isinstance(arch, str) else ""
    )


def build_command(directory: Path, *, gpu: bool, variant: str | None = None) -> str:
    if variant is not None:
        return f"reprobuild image {directory} --variant {variant}"
    return f"reprobuild image {directory}{' --gpu' if gpu else ''}"


def pin_project_image(
    directory: Path,
    config: ProjectConfig,
    image: str | None,
    engine: ImageLookup | None,
    *,
    gpu: bool,
    variant: str | None,
    what: str = "compose file",
) -> tuple[PinnedImage, ImageLookup]:
    if engine is None:
        from reprobuild.backends.engine import Engine

        engine = Engine()
    if image is None:
        tag = project_tag(config, gpu=gpu, variant_name=variant)
        pinned = pin_image(
            engine, tag, build_command=build_command(directory, gpu=gpu, variant=variant)
        )
    else:
        pinned = pin_image(engine, image)
    check_variant(pinned, gpu=gpu, what=what)
    return pinned, engine


def image_distributions(engine: ImageLookup, image: PinnedImage) -> tuple[str, ...]:
    """The distribution names in the image's manifest (checked against its label)."""
    from reprobuild.imaging.manifest import MANIFEST_LABEL, MAX_MANIFEST_BYTES, Manifest
    from reprobuild_entrypoint import MANIFEST_PATH

    if not hasattr(engine, "read_file"):
        raise TypeError("a multi-node job needs an engine that can read the image's manifest")
    reader: ImageReader = engine  # type: ignore[assignment]
    raw = reader.read_file(image.id, MANIFEST_PATH, max_bytes=MAX_MANIFEST_BYTES)
    want = image.labels.get(MANIFEST_LABEL)
    got = hashlib.sha256(raw).hexdigest()
    if want != got:
        raise ReprobuildError(
            f"{image.requested}: {MANIFEST_PATH} has sha256 {got[:12]}... but the label says "
            f"{(want or 'nothing')[:12]}...; the image was altered after it was built"
        )
    return tuple(d.name for d in Manifest.from_json(raw).distributions)


def check_variant(image: PinnedImage, *, gpu: bool, what: str = "compose file") -> None:
    variant = image.labels.get(f"{LABEL_PREFIX}variant")
    if variant is None:
        raise ReprobuildError(
            f"{image.requested} was not built by reprobuild (no io.reprobuild.variant label): "
            "it has no reprobuild runtime to write run records"
        )
    want = variant_of(gpu)
    if variant != want:
        flag = "add --gpu" if variant == "gpu" else "drop --gpu"
        raise ReprobuildError(
            f"{image.requested} is a {variant.upper()} image but a {want.upper()} {what} "
            f"was asked for: {flag}"
        )
