"""``reprobuild push IMAGE REF``: an image built earlier, from the engine to a registry.

The engine asks the registry for each layer before it sends it, so only the layers the
registry lacks move: after a one-package bump, the bumped group's layer, the app's and the
stamp's. The report names the bytes sent (the compressed sizes, from the pushed manifest)
and the digest. The engine then knows the image by ``NAME@sha256:<digest>`` (its
RepoDigests), which ``compose``, ``k8s`` and ``slurm`` pin the image by.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Protocol

from reprobuild.backends.engine import PushOutcome
from reprobuild.bases.refs import ImageRef, parse_ref
from reprobuild.errors import ImageRefError, ReprobuildError

Log = Callable[[str], None]


class PushEngine(Protocol):
    def image_id(self, ref: str) -> str | None: ...
    def inspect(self, ref: str) -> dict[str, Any]: ...
    def tag(self, image: str, ref: str) -> None: ...
    def untag(self, ref: str) -> None: ...
    def push(self, name: str, tag: str, log: Log = ...) -> PushOutcome: ...


ManifestReader = Callable[[ImageRef, str], bytes]


@dataclass(frozen=True)
class PushReport:
    image_id: str
    reference: str
    """``NAME@sha256:<manifest digest>``: the image as pushed, for good."""
    digest: str
    layers: int
    sent_layers: int
    sent_bytes: int | None
    """The compressed bytes of the layers sent (None: the manifest could not be read)."""
    present_bytes: int | None

    def to_dict(self) -> dict[str, Any]:
        return {
            "image_id": self.image_id,
            "reference": self.reference,
            "digest": self.digest,
            "layers": self.layers,
            "sent_layers": self.sent_layers,
            "sent_bytes": self.sent_bytes,
            "present_bytes": self.present_bytes,
        }

    def summary(self) -> str:
        sent = f" ({_size(self.sent_bytes)})" if self.sent_bytes is not None else ""
        had = self.layers - self.sent_layers
        return (
            f"pushed {self.reference}: {self.sent_layers} of {self.layers} layers sent{sent}; "
            f"the registry had the other {had}"
        )


def push_image(
    engine: PushEngine,
    image: str,
    ref: str,
    *,
    read_manifest: ManifestReader | None = None,
    log: Log = lambda _: None,
    move: bool = False,
) -> PushReport:
    """Push ``image`` (a tag or an ID on the engine) as ``ref`` (``[REGISTRY/]NAME[:TAG]``).
    The engine's tag ``ref`` naming another image is refused, unless ``move`` (``image
    --push``: this build is what the user pushes there, as ``docker build -t REF`` and ``docker
    push REF`` would move it); a failed push gives it back."""
    target = parse_ref(ref)
    if target.digest is not None:
        raise ImageRefError(
            f"push target {ref!r} names a digest: give [REGISTRY/]NAME[:TAG] "
            "(the registry gives the digest)"
        )
    image_id = engine.image_id(image)
    if image_id is None:
        raise ReprobuildError(f"no image {image} on this engine", hint="build it first")
    tag = target.tag or "latest"
    local = f"{target.name}:{tag}"
    held = engine.image_id(local)
    if held is not None and held != image_id and not move:
        raise ReprobuildError(
            f"the engine's tag {local} names another image ({held[:19]}), not {image}",
            hint="push to another tag, or remove that tag (`docker rmi`) if it is not needed",
        )
    engine.tag(image_id, local)
    try:
        outcome = engine.push(target.name, tag, log)
    except BaseException:
        if held is None:  # a tag this push made: gone with the failed push
            engine.untag(local)
        elif held != image_id:  # a tag this push moved: back to the image it named
            engine.tag(held, local)
        raise
    diff_ids = [str(d) for d in (engine.inspect(image_id).get("RootFS") or {}).get("Layers") or []]
    sizes = _layer_sizes(read_manifest, target, outcome.digest, len(diff_ids))
    sent = present = 0
    sent_layers = 0
    for index, diff_id in enumerate(diff_ids):
        state = outcome.layers.get(diff_id.removeprefix("sha256:")[:12], "present")
        size = sizes[index] if sizes is not None else 0
        if state == "sent":
            sent_layers += 1
            sent += size
        else:
            present += size
    return PushReport(
        image_id=image_id,
        reference=f"{target.name}@{outcome.digest}",
        digest=outcome.digest,
        layers=len(diff_ids),
        sent_layers=sent_layers,
        sent_bytes=sent if sizes is not None else None,
        present_bytes=present if sizes is not None else None,
    )


def _layer_sizes(
    read_manifest: ManifestReader | None, target: ImageRef, digest: str, count: int
) -> list[int] | None:
    """The compressed size of each layer, in the image's order, from the pushed manifest;
    None where it cannot be read (a registry that wants a login to read, say)."""
    if read_manifest is None:
        return None
    try:
        document = json.loads(read_manifest(target, digest))
    except (ReprobuildError, ValueError):
        return None
    layers = document.get("layers") if isinstance(document, dict) else None
    if not isinstance(layers, list) or len(layers) != count:
        return None
    sizes = [entry.get("size") if isinstance(entry, dict) else None for entry in layers]
    if not all(isinstance(size, int) and size >= 0 for size in sizes):
        return None
    return [int(size) for size in sizes if isinstance(size, int)]


def registry_manifest(target: ImageRef, digest: str) -> bytes:
    """The manifest ``digest`` of ``target``'s repository, from its registry (checked)."""
    from reprobuild.bases.registry import RegistryClient

    with RegistryClient() as client:
        body, _, _ = client.get_manifest(target, digest)
    return body


def _size(n: int) -> str:
    for unit, scale in (("GB", 1e9), ("MB", 1e6), ("kB", 1e3)):
        if n >= scale:
            return f"{n / scale:.1f} {unit}"
    return f"{n} B"
