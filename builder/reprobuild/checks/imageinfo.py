"""Read back what an image says about itself: its labels and its manifest file."""

from __future__ import annotations

import hashlib
from dataclasses import dataclass

from reprobuild.backends.engine import Engine
from reprobuild.errors import ReprobuildError
from reprobuild.imaging.manifest import MANIFEST_LABEL, MAX_MANIFEST_BYTES, Manifest
from reprobuild_entrypoint import MANIFEST_PATH


@dataclass(frozen=True)
class ImageInfo:
    image: str
    id: str
    labels: dict[str, str]
    manifest: Manifest

    def to_dict(self) -> dict[str, object]:
        return {
            "image": self.image,
            "id": self.id,
            "labels": self.labels,
            "manifest": self.manifest.to_dict(),
        }


def read_image(engine: Engine, image: str) -> ImageInfo:
    attrs = engine.inspect(image)
    labels = dict((attrs.get("Config") or {}).get("Labels") or {})
    want = labels.get(MANIFEST_LABEL)
    if want is None:
        raise ReprobuildError(f"{image} was not built by reprobuild (no {MANIFEST_LABEL} label)")
    raw = engine.read_file(image, MANIFEST_PATH, max_bytes=MAX_MANIFEST_BYTES)
    got = hashlib.sha256(raw).hexdigest()
    if got != want:
        raise ReprobuildError(
            f"{image}: {MANIFEST_PATH} has sha256 {got[:12]}... but the label says {want[:12]}...; "
            "the image was altered after it was built"
        )
    return ImageInfo(image, str(attrs["Id"]), labels, Manifest.from_json(raw))
