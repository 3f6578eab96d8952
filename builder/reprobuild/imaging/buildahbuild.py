"""The build and stamp steps of ``reprobuild image`` with buildah: the layers under the code
kept by their inputs, the code's step, the probe in buildah's storage, the stamp, the load."""

from __future__ import annotations

import contextlib
import functools
import hashlib
import json
import os
import re
import stat
import uuid
from collections.abc import Callable
from pathlib import Path

from reprobuild._util import leftovers
from reprobuild._util.fsutil import sha256_file, write_atomic
from reprobuild._util.progress import timed
from reprobuild.backends import buildah
from reprobuild.backends.engine import Engine
from reprobuild.imaging import platforms, sbom
from reprobuild.imaging.context import write_tree
from reprobuild.imaging.imageprobe import ProbeCache, image_manifest
from reprobuild.imaging.load import into_engine
from reprobuild.imaging.render import (
    CREATED_LABEL,
    UV_IN_CONTEXT,
    RenderSpec,
    epoch_iso,
    render_stamp,
)
from reprobuild.imaging.result import ImageResult, build_info
from reprobuild.locks.wheels import cache_root

Log = Callable[[str], None]


# What buildah prints while it writes a single-commit image (containers/image's copy).
_COPY_LOG = (
    "Getting image source signatures",
    "Copying blob ",
    "Copying config ",
    "Writing manifest to image destination",
    "Storing signatures",
)


def build_with_buildah(
    engine: Engine,
    spec: RenderSpec,
    layers_at: int,
    ctx: Path,
    scratch: str,
    final: str,
    *,
    no_cache: bool,
    network: bool,
    log: Log,
    checked: Callable[[], None],
    wanted: platforms.BuildPlatform | None = None,
) -> ImageResult:
    """Build with buildah, every time from SOURCE_DATE_EPOCH; probe the scratch image in
    buildah's storage (no docker-archive and load of the whole image for that), stamp it
    (with buildah too: a classic stamp would add the wall clock back), load the result
    under ``final`` (``--push`` is the engine's, after: :mod:`reprobuild.imaging.push`). The scratch
    image stays untagged in buildah (the stamp's history would record a tag's name), so no
    run-specific name reaches the image. The run's names are removed from buildah's storage
    and the scratch tag from the engine, whatever happens. A build that worked leaves its
    stamped image under the project's cache name (:func:`buildah.keep`), so that its layers
    stay buildah's cache for the next build; a failed one removes its images."""
    sbom.preload()  # while buildah builds
    info = build_info(engine, "buildah", spec)
    stamp_tag = leftovers.scratch_tag(spec.name, uuid.uuid4().hex[:16])
    # another machine's image: every buildah step says its platform (the config's then too)
    foreign = wanted.name if wanted is not None and not wanted.native else None
    # and its layer cache a name of its own: an amd64 build would evict the arm64 one's
    kept = f"{spec.variant}-{wanted.arch}" if foreign and wanted else spec.variant
    scratch_id = final_id = ""
    done = False
    try:
        buildah.pull(spec.base, log)
        if no_cache:
            buildah.forget(spec.name, kept)
        previous = buildah.image_id(buildah.cache_name(spec.name, kept))
        with timed(log, "building the image with buildah"):
            scratch_id = bud_code_last(
                ctx,
                epoch=layers_at,
                no_cache=no_cache,
                network=network,
                version=str(info["builder_version"]),
                log=log,
                platform=foreign,
            )
        checked()  # the wheels it used were the cache's, byte for byte
        prober = ProbeCache(buildah.Prober(), buildah.config(scratch_id), app=bool(spec.app_files))
        manifest, sbom_json = image_manifest(prober, spec, scratch_id, info)
        stamp = ctx.parent / "stamp"
        stamp.mkdir()
        labels = manifest.labels()
        if layers_at != spec.epoch:  # the layers' LABEL named their epoch: the image's is this
            labels[CREATED_LABEL] = epoch_iso(spec.epoch)
        files = render_stamp(scratch_id, manifest.to_json(), labels, sbom_json)
        write_tree(files, stamp, epoch=spec.epoch)
        # One commit for the stamp's steps: no build reuses them (the manifest is new each
        # time). Its steps are logged as the build's are; the copy of every blob that a single
        # commit prints says nothing to the user.
        final_id = buildah.bud(
            stamp,
            stamp_tag,
            epoch=spec.epoch,
            log=lambda line: None if line.startswith(_COPY_LOG) else log(line),
            network=False,
            layers=False,
            platform=foreign,
        )
        # Into the engine last: the tag appears only once everything else worked.
        with timed(log, f"loading {final} into the engine"):
            into_engine(
                engine,
                final_id,
                final,
                log,
                lock=spec.lock.sha256,
                base=spec.base,
                previous=previous,
                project=spec.name,
            )
        done = True
    finally:
        if done:  # the stamped image keeps the layer cache; its run-specific name goes
            buildah.keep(final_id, spec.name, kept, held=previous, drop=[stamp_tag])
        else:
            buildah.remove_images([stamp_tag, *([scratch_id] if scratch_id else [])])
        engine.untag(scratch)
    image_id = engine.image_id(final) or f"sha256:{final_id}"
    return ImageResult(final, image_id, manifest)


# The Dockerfile's last step where the project has code (templates/Dockerfile.j2).
APP_STEP = "COPY app/ /app/\n"


# What a build that reuses the layers under the code says (tests look for it).
LAYERS_REUSED = "the layers under the code are those built before from the same inputs"


def bud_code_last(
    ctx: Path,
    *,
    epoch: int,
    no_cache: bool,
    network: bool,
    version: str,
    log: Log,
    platform: str | None = None,
) -> str:
    """Build ``ctx`` with buildah in two builds: every step but the code's (``Dockerfile``
    without ``COPY app/ /app/``), then ``FROM <that image's ID>`` and the code's step. The
    image is the one a single build of the whole Dockerfile gives, byte for byte (one ID:
    buildah records the step's parent by its ID either way; the engine tests check it).

    The layers under the code are kept by their inputs (:func:`_layers_key`: the steps'
    text, every file of the context but the code, buildah's version, the epoch and the
    network), so a code-only change builds just the code's step: buildah's own cache would
    reuse those layers too, but looking up each of its steps costs more than a second for a
    torch image here. A Dockerfile without the code's step last is built whole; so is
    everything with ``no_cache``. Return the image ID."""
    bud = functools.partial(
        buildah.bud, ctx, None, epoch=epoch, log=log, no_cache=no_cache, network=network,
        platform=platform,
    )  # fmt: skip
    whole = (ctx / "Dockerfile").read_text()
    if not whole.endswith("\n" + APP_STEP):
        return bud()
    below_text = whole[: -len(APP_STEP)]
    record = (
        cache_root()
        / "buildah-layers"
        / f"v1-{_layers_key(ctx, below_text, epoch, network, version + (platform or ''))}"
    )
    below: str | None = None
    if not no_cache:
        with contextlib.suppress(OSError, UnicodeDecodeError):
            held = record.read_text().strip()
            if _IMAGE_ID.fullmatch(held) and buildah.image_id(held) == held:
                below = held
                log(f"{LAYERS_REUSED} (sha256:{held[:12]}): building the code's step only")
    if below is None:
        path = ctx.parent / "Dockerfile.layers"
        path.write_text(below_text)
        below = bud(dockerfile=path)
        with contextlib.suppress(OSError):  # only a cache
            write_atomic(record, below)
    path = ctx.parent / "Dockerfile.code"
    path.write_text(f"FROM {below}\n{APP_STEP}")
    return bud(dockerfile=path)


_IMAGE_ID = re.compile(r"[0-9a-f]{64}")


def _by_size(rel: Path) -> bool:
    """A wheel (``wheels/``, a group's ``groups/NAME/wheels/``) or the uv binary."""
    in_group = rel.parts[::2][:2] == ("groups", "wheels")
    return rel.parts[0] == "wheels" or in_group or rel == Path(UV_IN_CONTEXT)


def _layers_key(ctx: Path, below: str, epoch: int, network: bool, version: str) -> str:
    """What the layers under the code are a function of: the steps' text (the base by digest,
    the lock's and uv's hashes), every file of the context but the code (path, mode, time,
    and content by sha256), buildah's version, the epoch and the network. The lock's wheels
    and the uv binary by name and size: their hashes are in the steps' text already, and the
    build checks the wheels against the cache byte for byte (``checked``) whichever way it
    went (hashing gigabytes of torch's wheels again would cost more than it saves)."""
    digest = hashlib.sha256(json.dumps(["v1", below, epoch, network, version]).encode())
    for path in sorted(ctx.rglob("*")):
        rel = path.relative_to(ctx)
        if rel.parts[0] == "app" or rel == Path("Dockerfile"):
            continue
        info = path.lstat()
        if stat.S_ISLNK(info.st_mode):
            content = f"link:{os.readlink(path)}"
        elif stat.S_ISDIR(info.st_mode):
            content = "dir"
        elif _by_size(rel):
            content = f"size:{info.st_size}"
        else:
            content = sha256_file(path)
        entry = [rel.as_posix(), info.st_mode, info.st_mtime_ns, content]
        digest.update(json.dumps(entry).encode() + b"\n")
    return digest.hexdigest()
