"""The load step of ``reprobuild image``: a buildah image into the engine, keeping its ID;
only the layers the engine lacks where it holds an earlier build of the project (or of the
same lock) that shares most of the image's bytes."""

from __future__ import annotations

import contextlib
import json
from collections.abc import Callable

from reprobuild.backends import buildah, layerload
from reprobuild.backends.engine import Engine
from reprobuild.bases.refs import ImageRef
from reprobuild.errors import EngineError
from reprobuild.imaging.render import LOCK_LABEL, TITLE_LABEL

Log = Callable[[str], None]


def into_engine(
    engine: Engine,
    image_id: str,
    name: str,
    log: Log,
    *,
    lock: str,
    base: ImageRef,
    previous: str | None = None,
    project: str | None = None,
) -> None:
    """Load a buildah image into the engine under ``name``, keeping its image ID. Through a
    docker-archive streamed to the engine's API (:func:`buildah.archive_stream`), not buildah's
    ``docker-daemon:`` transport: that one always dials /var/run/docker.sock and ignores
    ``DOCKER_HOST`` (a rootless or remote engine, a second daemon), so the image would land in
    another engine than the one used.

    An engine that already holds the image (the same ID: the same config, so the same layers
    by their digests) only gets the tag: a rebuild of an unchanged project skips the archive
    of the whole image and its load (about 11 s of 13 for a 1.3 GB image here).

    The containerd image store loads an OCI layout instead (:func:`layerload.load_oci`),
    shipping the layers the previous build (``previous``, buildah's ID) does not share."""
    if engine.image_store()[1]:
        before = engine.image_id(name)
        try:
            layerload.load_oci(engine, image_id, name, previous, log)
        except BaseException:
            # a load that failed half-way must not leave its image under the name
            give_tag_back(engine, name, before)
            raise
        return
    if engine.image_id(f"sha256:{image_id}") is not None:
        log(f"the engine already holds sha256:{image_id[:12]}: tagging it {name}")
        engine.tag(f"sha256:{image_id}", name)
        return
    before = engine.image_id(name)
    try:
        try:
            if load_new_layers(engine, image_id, name, log, lock=lock, base=base, project=project):
                return
        except (EngineError, OSError) as exc:
            log(f"loading only the new layers did not work ({exc}); loading the whole image")
        with buildah.archive_stream(image_id, name) as chunks:
            engine.load(chunks)
    except BaseException:
        # Either load names the image as it registers it: a push that failed after the
        # archive was whole, or a signal right after the load (the new layers' or the whole
        # image's), must not leave the tag on it.
        give_tag_back(engine, name, before)
        raise


def give_tag_back(engine: Engine, name: str, before: str | None) -> None:
    """After a step that failed: ``name`` goes back to the image it named before (``before``,
    an image ID), or is removed where it named none. Best effort: the step's own error is
    the one to report."""
    with contextlib.suppress(EngineError):
        if engine.image_id(name) != before:
            engine.untag(name)
            if before is not None:
                engine.tag(before, name)


def load_new_layers(
    engine: Engine,
    image_id: str,
    name: str,
    log: Log,
    *,
    lock: str,
    base: ImageRef,
    project: str | None = None,
) -> bool:
    """Ship only the layers the engine lacks (:mod:`reprobuild.backends.layerload`), when the
    engine holds an earlier build of the same lock or of the same project (``project``, the
    image's title) beyond the base, and the layers it lacks are under half the image's bytes
    above the base: a code-only change, or a bump whose package groups lie above the big
    frameworks' (the venv as layers by package). Otherwise (a first build, a change low in
    the image) the whole archive is the faster way in: the shortcut sends the new layers
    twice (to its registry, then to the engine), the archive every layer once."""
    # one `buildah inspect`: the config's diff IDs and the stored manifest's layer sizes
    try:
        manifest: bytes | None
        manifest, config = buildah.stored_manifest(image_id)
    except EngineError:
        manifest, config = None, buildah.config(image_id)
    diff_ids = [str(d) for d in (config.get("rootfs") or {}).get("diff_ids") or []]
    chains = engine.layer_chains(LOCK_LABEL, lock)
    if project:
        chains += engine.layer_chains(TITLE_LABEL, project)
    held = layerload.held_prefix(diff_ids, chains)
    below = len(engine.layers(base.by_digest()))
    if held <= below:
        return False
    if not _mostly_held(manifest, diff_ids, below, held):
        return False
    return layerload.load(engine, image_id, name, diff_ids, held, log)


def _mostly_held(manifest: bytes | None, diff_ids: list[str], below: int, held: int) -> bool:
    """Whether the layers the engine lacks (past the ``held`` prefix) are under half the bytes
    of the image's layers above the base's ``below``, by the sizes in the manifest buildah
    stored when it committed the image (its layers plain tar, by their diff IDs); True where
    the sizes cannot be read so (the shortcut then decides alone)."""
    try:
        layers = json.loads(manifest or b"")["layers"]
        digests = [str(layer["digest"]) for layer in layers]
        sizes = [int(layer.get("size") or 0) for layer in layers]
    except (ValueError, KeyError, TypeError, AttributeError):
        return True
    if digests != diff_ids:  # not the plain layers (a manifest a registry gave)
        return True
    return 2 * sum(sizes[held:]) < sum(sizes[below:])
