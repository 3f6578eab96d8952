"""What ``reprobuild image`` gives back, and what the manifest records about the build."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from reprobuild.backends import buildah
from reprobuild.backends.builders import REPRODUCIBLE, Builder
from reprobuild.backends.engine import Engine
from reprobuild.imaging.manifest import Manifest
from reprobuild.imaging.push import PushReport
from reprobuild.imaging.render import RenderSpec


@dataclass(frozen=True)
class ImageResult:
    image: str
    id: str
    manifest: Manifest
    # ``--push REF``: the reference pushed, and what the push did (the registry's manifest
    # digest, the layers and bytes sent), as ``reprobuild push`` reports it.
    pushed: str | None = None
    push: PushReport | None = None

    @property
    def digest(self) -> str | None:
        return self.push.digest if self.push is not None else None

    def to_dict(self) -> dict[str, object]:
        data: dict[str, object] = {
            "image": self.image,
            "id": self.id,
            "manifest": self.manifest.to_dict(),
        }
        if self.pushed and self.push is not None:
            data["pushed"] = self.pushed
            data["digest"] = self.push.digest
            data["push"] = self.push.to_dict()
        return data


def build_info(
    engine: Engine, tool: Builder, spec: RenderSpec, *, from_epoch: bool = False
) -> dict[str, Any]:
    """What the manifest records about the build: the builder, its version and whether the
    same inputs give the same image (apt installs whatever the mirror serves that day).
    ``from_epoch``: the engine's BuildKit built it from SOURCE_DATE_EPOCH with file times
    clamped (:meth:`Engine.buildkit_reproducible` said it can)."""
    version = buildah.version() if tool == "buildah" else engine.server_version()
    return {
        "builder": tool,
        "builder_version": version,
        "reproducible": (tool in REPRODUCIBLE or from_epoch) and not spec.apt,
        # What installed the wheels in the image: uv (the very binary, by sha256) or pip.
        "installer": "uv" if spec.uv_sha256 else "pip",
        **({"installer_sha256": spec.uv_sha256} if spec.uv_sha256 else {}),
    }
