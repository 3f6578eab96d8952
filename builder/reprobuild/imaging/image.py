"""``reprobuild image``: render, fetch, build, probe, stamp, tag. The tag is applied last,
so a failure at any step leaves nothing under the requested tag."""

from __future__ import annotations

import contextlib
import functools
import hashlib
import json
import os
import platform
import re
import shutil
import stat
import tempfile
import uuid
from collections.abc import Callable
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any, Protocol, TextIO

from reprobuild import __version__
from reprobuild._util import jsonload, leftovers
from reprobuild._util.fsutil import sha256_file, write_atomic
from reprobuild._util.progress import timed
from reprobuild.backends import buildah, layerload
from reprobuild.backends.builders import REPRODUCIBLE, Builder
from reprobuild.backends.engine import Engine, RunResult
from reprobuild.bases import gpustack as stacklib
from reprobuild.bases.refs import ImageRef, parse_ref
from reprobuild.errors import (
    EngineError,
    ImageRefError,
    LockfileError,
    ReprobuildError,
)
from reprobuild.imaging import layers, plan, platforms, sbom
from reprobuild.imaging.baseprobe import base_probe
from reprobuild.imaging.context import clamp_times, write_tree
from reprobuild.imaging.manifest import BUILT_KEYS, Distribution, Manifest
from reprobuild.imaging.render import (
    BUILD_DIR,
    BUILD_EPOCH,
    CREATED_LABEL,
    ENTRYPOINT,
    LOCK_LABEL,
    RenderSpec,
    epoch_iso,
    layers_epoch,
    package_groups,
    render_context,
    render_stamp,
)
from reprobuild.locks.lockfile import Lock
from reprobuild.locks.wheels import (
    CACHED_MTIME_NS,
    Target,
    WheelCheck,
    WheelError,
    cache_root,
    fetch_sources,
    fetch_wheels,
    wheel_folder,
)
from reprobuild_entrypoint.contract import MODE_VAR

Log = Callable[[str], None]
# One process in the built image, the runtime off (the start-up hook configures nothing while
# frameworks are imported): the runtime's probe (``--stack``: GPU images also report their
# frameworks' build facts) and the SBOM's facts (reprobuild.imaging.sbomfacts, whose source is
# the first argument), printed as one JSON object. One container, not one each: a container
# start is about 0.4 s of a code-only rebuild.
PROBE = [
    "/opt/venv/bin/python",
    "-I",
    "-c",
    "import json, sys\n"
    "from reprobuild_entrypoint import probe\n"
    "facts = {'__name__': 'sbomfacts'}\n"
    "exec(compile(sys.argv[1], 'sbomfacts.py', 'exec'), facts)\n"
    "out = {'probe': probe.probe(), 'sbom': facts['facts']()}\n"
    "if '--stack' in sys.argv[2:]:\n"
    "    out['probe']['frameworks'] = probe.frameworks()\n"
    "json.dump(out, sys.stdout, sort_keys=True, default=str)\n",
]


@dataclass(frozen=True)
class ImageResult:
    image: str
    id: str
    manifest: Manifest
    # ``--push REF``: the reference pushed and the registry's manifest digest for it.
    pushed: str | None = None
    digest: str | None = None

    def to_dict(self) -> dict[str, object]:
        data: dict[str, object] = {
            "image": self.image,
            "id": self.id,
            "manifest": self.manifest.to_dict(),
        }
        if self.pushed:
            data["pushed"] = self.pushed
            data["digest"] = self.digest
        return data


def normalize_push(ref: str) -> str:
    parsed = parse_ref(ref)
    if parsed.digest:
        raise ImageRefError(f"--push {ref!r} must be REGISTRY/NAME[:TAG], not a digest reference")
    if not parsed.explicit_registry:
        raise ImageRefError(
            f"--push {ref!r} names no registry; give REGISTRY/NAME[:TAG] "
            "(e.g. 127.0.0.1:5000/team/model:v1)"
        )
    return f"{parsed.name}:{parsed.tag or 'latest'}"


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


def choose_builder(engine: Engine, builder: Builder, note: Log, *, push: bool = False) -> Builder:
    """The builder to use, checked once, before the base is pulled. ``auto`` picks the fastest
    builder whose output is a function of the inputs: buildah where it is installed and works;
    else the engine's BuildKit where :meth:`Engine.buildkit_reproducible` says it clamps file
    times (Engine 26 with the containerd image store; there it is the slower of the two, its
    clamped archive costing more than buildah's whole build: docs, Benchmarks), unless the
    image is to be pushed (buildah pushes); else what the engine offers (buildx, else
    classic), which is not reproducible. The choice and why are said in the build log (and
    recorded in the manifest's ``build``). An engine builder asked for by name must be there
    (:meth:`Engine.resolve_builder`)."""
    if builder == "buildah":
        return builder
    if builder == "auto":
        possible, why = engine.buildkit_reproducible()
        if buildah.usable():
            note("builder: buildah (auto: reproducible, the same inputs give the same image ID)")
            if possible:
                note(
                    "builder: not the engine's BuildKit, though reproducible here too: buildah "
                    "builds the same inputs faster (docs: Benchmarks, Engine 26)"
                )
            else:
                note(f"builder: not the engine's BuildKit, though faster: {why}")
            return "buildah"
        if possible and not push:
            note(
                "builder: buildkit (auto: buildah is not installed or not usable here, and the "
                f"engine's BuildKit is reproducible: {why})"
            )
            return "buildkit"
    chosen = engine.resolve_builder(builder)
    if builder == "auto":
        note(
            f"builder: {chosen} (auto: buildah is not installed or not usable here, so this "
            "image is not reproducible; see `reprobuild image --help`)"
        )
    return chosen


def normalize_tag(tag: str) -> str:
    ref = parse_ref(tag)
    if ref.digest:
        raise ImageRefError(f"--tag {tag!r} must be NAME[:TAG], not a digest reference")
    return f"{ref.name}:{ref.tag or 'latest'}"


def base_entrypoint(engine: Engine, spec: RenderSpec) -> tuple[str, ...]:
    """The base's ENTRYPOINT, to be chained by ours; none when the base is itself a
    reprobuild image (its entrypoint is ours)."""
    entry = engine.entrypoint_of(spec.base.by_digest())
    return () if entry == ENTRYPOINT else entry


def uv_installer(spec: RenderSpec, probe: dict[str, Any]) -> Path | None:
    """The host's pinned uv, where it installs the wheels in the image instead of pip; None:
    pip, as before. uv unpacks and compiles on every CPU, pip one file after another: torch's
    install step with its commit took 31 s with pip and 16 to 25 s with uv on 2 cores
    (docs/benchmarks.md). Only where it can stand in for pip in what it decides:
    a hermetic RUN --mount install (buildah, BuildKit from an epoch), a CPU image (a GPU image's
    venv sees the base's packages, and an NGC base's PIP_CONSTRAINT is pip's), and a base of
    the host's machine with a glibc the binary runs on (manylinux 2.17)."""
    if not spec.mount_install or spec.online or spec.variant != "cpu":
        return None
    try:
        target = Target.from_probe(probe)
    except WheelError:  # no platform facts: pip, which needs none
        return None
    if target.machine != platform.machine() or target.glibc is None or target.glibc < (2, 17):
        return None
    return pinned_uv()


def pinned_uv() -> Path | None:
    """The uv binary reprobuild pins (its ``uv`` dependency); None where the install lacks it."""
    try:
        from uv import find_uv_bin

        path = Path(find_uv_bin())
    except (ImportError, FileNotFoundError):
        return None
    return path if path.is_file() else None


# The installer's own tools: every Python base carries some (Debian's python3-pip brings pip,
# setuptools and wheel), and a venv's copy shadows the base's without touching it. Not the
# stack a GPU base was built and tested with, so a lock may pin its own (a uv or Poetry lock
# cannot drop them); a base's pip constraint on them still holds.
INSTALLER_TOOLS = frozenset({"pip", "setuptools", "wheel"})


def check_base_conflicts(spec: RenderSpec, probe: dict[str, Any]) -> None:
    """A GPU image's venv sees the base's packages (NGC's own torch, TensorFlow, CUDA
    libraries). A lock that would install another version of one of them would replace what
    the base was built and tested with: refuse it before building, naming both versions.
    The installer's tools (:data:`INSTALLER_TOOLS`) are not that stack."""
    if spec.variant != "gpu":
        return
    base_dists = probe.get("distributions") or []
    constraint = probe.get("pip_constraint") or {}
    constraint_pins: dict[str, str] = constraint.get("pins") or {}
    constraint_path = constraint.get("path", "")
    base = {str(d["name"]): str(d["version"]) for d in base_dists}
    for req in spec.lock.requirements:
        have = base.get(req.name)
        if have is not None and have != req.version and req.name not in INSTALLER_TOOLS:
            raise LockfileError(
                spec.lock.path,
                req.line,
                f"{req.name}=={req.version} would replace the base's {req.name} {have} "
                f"({spec.base.by_digest()}): a GPU image keeps the base's stack",
                hint=f"drop {req.name} from the GPU lock, or compile the lock against the base's "
                "constraint file (uv pip compile --constraint constraint.txt ...)",
            )
        pinned = constraint_pins.get(req.name)
        if pinned is not None and pinned != req.version:
            raise LockfileError(
                spec.lock.path,
                req.line,
                f"{req.name}=={req.version} conflicts with the base's pip constraint "
                f"{req.name}=={pinned} ({constraint_path})",
                hint="compile the GPU lock against the base's constraint file "
                "(uv pip compile --constraint constraint.txt ...)",
            )


def check_installed(lock: Lock, dists: tuple[Distribution, ...]) -> None:
    """The image's venv must hold exactly what the lock pins: nothing more, nothing else. A
    lock may pin a package twice, each under a marker (one version per machine): the image's
    is one of them."""
    pinned: dict[str, list[str]] = {}
    for r in lock.requirements:
        pinned.setdefault(r.name, []).append(r.version)
    for dist in dists:
        versions = pinned.get(dist.name)
        if versions is None:
            raise ReprobuildError(
                f"the image holds {dist.name}=={dist.version}, which the lock does not pin"
            )
        if dist.version not in versions:
            raise ReprobuildError(
                f"the image holds {dist.name}=={dist.version} but the lock pins "
                f"{' or '.join(versions)}"
            )
    installed = {d.name for d in dists}
    absent = sorted(
        r.name for r in lock.requirements if r.marker is None and r.name not in installed
    )
    if absent:
        raise ReprobuildError(f"locked distributions missing from the image: {', '.join(absent)}")


def build_image(
    directory: Path,
    *,
    gpu: bool = False,
    tag: str | None = None,
    base: str | None = None,
    online: bool = False,
    ca_cert: Path | None = None,
    builder: Builder = "auto",
    no_cache: bool = False,
    engine: Engine | None = None,
    log: Log = lambda _: None,
    variant: str | None = None,
    note: Log | None = None,
    push: str | None = None,
    bar: TextIO | None = None,
    platform: str | None = None,
) -> ImageResult:
    """``note`` gets the lines that are said even with a quiet ``log`` (leftovers removed).
    ``bar``: where to draw the wheel fetch's live progress bar when it is a terminal (else
    its progress is plain lines through ``log``). ``platform``: ``--platform``'s value
    (:mod:`reprobuild.imaging.platforms`); None: the host's."""
    engine = engine or Engine()
    try:
        return _build_image(
            directory,
            gpu=gpu,
            tag=tag,
            base=base,
            online=online,
            ca_cert=ca_cert,
            builder=builder,
            no_cache=no_cache,
            engine=engine,
            log=log,
            note=note or log,
            variant=variant,
            push=push,
            bar=bar,
            wanted=platforms.target_of(platform),
        )
    except KeyboardInterrupt:  # Ctrl-C, or SIGTERM/SIGHUP as the CLI maps them
        leftovers.reap(engine, log, mine=True, also=[buildah.Storage()])
        raise


def _build_image(
    directory: Path,
    *,
    gpu: bool,
    tag: str | None,
    base: str | None,
    online: bool,
    ca_cert: Path | None,
    builder: Builder,
    no_cache: bool,
    engine: Engine,
    log: Log,
    note: Log,
    variant: str | None,
    push: str | None,
    bar: TextIO | None,
    wanted: platforms.BuildPlatform | None = None,
) -> ImageResult:
    if builder != "auto":  # a builder asked for by name is checked before any work
        platforms.check_builder(wanted, builder)
    if builder == "buildah":
        buildah.require()  # before any work: a missing tool is the first thing to hear about
    elif push is not None and builder != "auto":
        raise ReprobuildError(
            f"--push needs --builder buildah (got --builder {builder})",
            hint="or push the built image yourself: docker push",
        )
    push = normalize_push(push) if push is not None else None
    planned = plan.plan_build(
        directory, gpu=gpu, base=base, online=online, ca_cert=ca_cert, variant_name=variant,
        machine=wanted.machine if wanted else None,
    )  # fmt: skip
    plan.record_new_base(planned, log)
    spec = platforms.for_platform(planned.spec, wanted)
    final = normalize_tag(tag) if tag else platforms.tag_for(plan.spec_tag(spec, variant), wanted)
    asked, builder = builder, choose_builder(engine, builder, log, push=push is not None)
    platforms.check_builder(wanted, builder)
    # The engine's BuildKit from SOURCE_DATE_EPOCH, scratch and stamp alike, where it can
    # clamp file times: the same inputs then give the same image ID.
    epoch: int | None = None
    if builder == "buildkit":
        possible, why = engine.buildkit_reproducible()
        if asked == "buildkit":  # auto has said it
            log(f"builder: buildkit {'from SOURCE_DATE_EPOCH' if possible else 'as is'}: {why}")
        epoch = spec.epoch if possible else None
    if push is not None and builder != "buildah":
        raise ReprobuildError(
            f"--push needs the buildah builder, and --builder auto picked {builder} "
            "(buildah is not installed or not usable here)",
            hint=buildah.INSTALL_HINT.replace(", or use --builder classic", ""),
        )
    # One note for all of it: the engine's leftovers and buildah's (reaped first: a dead
    # run's temp dir may name an image it left in buildah's storage). Meanwhile the plan goes
    # on; the build waits for it.
    reaped = leftovers.reap_soon(
        engine, note, also=[buildah.Storage(note)] if builder == "buildah" else []
    )
    engine.ensure_base(spec.base, log)
    spec = replace(
        spec,
        base_entrypoint=base_entrypoint(engine, spec),
        # RUN --mount: buildah, and BuildKit where it builds from the epoch (Engine 20.10's
        # BuildKit would take it too, but its image is not reproducible either way)
        mount_install=builder == "buildah" or epoch is not None,
    )
    # buildah builds the layers under the stamp at an epoch of their own (layers_epoch): a
    # commit moves SOURCE_DATE_EPOCH, and with it every step's text and file time, so the next
    # build would start over at the first step and install every wheel again. The stamp, built
    # from the project's epoch, sets the image's time and its created label.
    probe = base_probe(engine, spec.base)
    plan.check_base_python(planned.config, str(probe["python"].get("version", "")), str(spec.base))
    check_base_conflicts(spec, probe)
    uv = uv_installer(spec, probe)
    if uv is not None:
        spec = replace(spec, uv_sha256=sha256_file(uv))
    # The engine's BuildKit from an epoch too: its package layers then keep their diff IDs
    # across commits (reprobuild.imaging.layers), as buildah's do.
    at_epoch = builder == "buildah" or epoch is not None
    built = replace(spec, epoch=layers_epoch(spec.epoch)) if at_epoch else spec
    files = render_context(built)
    scratch = leftovers.scratch_tag(spec.name, uuid.uuid4().hex[:16])
    with tempfile.TemporaryDirectory(prefix=leftovers.temp_prefix("ctx")) as tmp:
        ctx = Path(tmp) / "context"
        ctx.mkdir()
        write_tree(files, ctx, epoch=built.epoch)
        if uv is not None:  # a copy: the context's times are clamped, the venv's uv is not ours
            shutil.copyfile(uv, ctx / "uv")
            (ctx / "uv").chmod(0o755)
        checked: Callable[[], None] = _nothing_to_check
        if not online:
            target = Target.from_probe(probe)
            fetch_wheels(spec.lock, target, ctx / "wheels", log=log, bar=bar)
            layers.link_wheels(package_groups(built), ctx / "wheels", ctx)
            if spec.mount_install:  # a RUN --mount source: its mtimes reach the history
                # the wheels are links into the cache, at its one fixed time: kept as they are
                clamp_times(ctx, built.epoch, linked_at=CACHED_MTIME_NS)
            checked = WheelCheck(spec.lock, ctx / "wheels", wheel_folder(target)).wait
        if spec.build_lock is not None:
            _fill_build_stage(spec, Target.from_probe(probe), ctx, log, bar)
        # Hermetic builds get no network unless apt packages must be fetched.
        network = online or bool(spec.apt)
        reaped()
        if builder == "buildah":
            try:
                return _build_buildah(
                    engine,
                    spec,
                    built.epoch,
                    ctx,
                    scratch,
                    final,
                    no_cache=no_cache,
                    network=network,
                    log=log,
                    push=push,
                    checked=checked,
                    wanted=wanted,
                )
            except ReprobuildError:
                checked()  # a damaged cached wheel failed the build: that is the one line
                raise
        try:
            with timed(log, f"building the image ({builder})"):
                try:
                    engine.build(
                        ctx,
                        scratch,
                        builder=builder,
                        log=log,
                        no_cache=no_cache,
                        network=network,
                        epoch=built.epoch if epoch is not None else None,
                    )
                except ReprobuildError:
                    checked()
                    raise
            checked()
            manifest, sbom_json = _manifest(
                engine,
                spec,
                scratch,
                build_info(engine, builder, spec, from_epoch=epoch is not None),
            )
            stamp = Path(tmp) / "stamp"
            stamp.mkdir()
            labels = manifest.labels()
            if built.epoch != spec.epoch:  # the layers' LABEL named their epoch
                labels[CREATED_LABEL] = epoch_iso(spec.epoch)
            files = render_stamp(scratch, manifest.to_json(), labels, sbom_json)
            write_tree(files, stamp, epoch=spec.epoch)
            image_id = engine.build(  # classic writes the wall clock: not from an epoch
                stamp,
                final,
                builder="classic" if epoch is None else "buildkit",
                log=log,
                network=False,
                epoch=epoch,
            )
        finally:
            engine.untag(scratch)
    return ImageResult(final, image_id, manifest)


# What buildah prints while it writes a single-commit image (containers/image's copy).
_COPY_LOG = (
    "Getting image source signatures",
    "Copying blob ",
    "Copying config ",
    "Writing manifest to image destination",
    "Storing signatures",
)


def _nothing_to_check() -> None:
    """An online build installs from the indexes: pip checks the hashes there."""


def _fill_build_stage(
    spec: RenderSpec, target: Target, ctx: Path, log: Callable[[str], None], bar: TextIO | None
) -> None:
    """The wheel-build stage's inputs, fetched on the host: the sdists (sha256-checked) and
    the build lock's wheels (hash-checked), online or not (the stage never reaches an index).
    Their times are the stage's own epoch, so its cache does not move with the project's."""
    assert spec.build_lock is not None
    build = ctx / BUILD_DIR
    fetch_sources(spec.lock, build / "sdists", log=log)
    fetch_wheels(spec.build_lock, target, build / "wheels", log=log, bar=bar)
    clamp_times(build, BUILD_EPOCH, linked_at=CACHED_MTIME_NS)


def _build_buildah(
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
    push: str | None,
    checked: Callable[[], None],
    wanted: platforms.BuildPlatform | None = None,
) -> ImageResult:
    """Build with buildah, every time from SOURCE_DATE_EPOCH; probe the scratch image in
    buildah's storage (no docker-archive and load of the whole image for that), stamp it
    (with buildah too: a classic stamp would add the wall clock back), load the result
    under ``final`` and, with ``push``, push it. The scratch
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
            scratch_id = _bud_code_last(
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
        manifest, sbom_json = _manifest(prober, spec, scratch_id, info)
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
        digest = None
        if push is not None:
            log(f"pushing {push}")
            pushed = parse_ref(push)
            digest = buildah.push(
                final_id, f"docker://{push}", tls_verify=not buildah.insecure(pushed), log=log
            )
        # Into the engine last: the tag appears only once everything else worked.
        with timed(log, f"loading {final} into the engine"):
            _into_engine(
                engine,
                final_id,
                final,
                log,
                lock=spec.lock.sha256,
                base=spec.base,
                previous=previous,
            )
        done = True
    finally:
        if done:  # the stamped image keeps the layer cache; its run-specific name goes
            buildah.keep(final_id, spec.name, kept, held=previous, drop=[stamp_tag])
        else:
            buildah.remove_images([stamp_tag, *([scratch_id] if scratch_id else [])])
        engine.untag(scratch)
    image_id = engine.image_id(final) or f"sha256:{final_id}"
    return ImageResult(final, image_id, manifest, pushed=push, digest=digest)


# The Dockerfile's last step where the project has code (templates/Dockerfile.j2).
APP_STEP = "COPY app/ /app/\n"
# What a build that reuses the layers under the code says (tests look for it).
LAYERS_REUSED = "the layers under the code are those built before from the same inputs"


def _bud_code_last(
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
    return rel.parts[0] == "wheels" or in_group or rel == Path("uv")


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


def _into_engine(
    engine: Engine,
    image_id: str,
    name: str,
    log: Log,
    *,
    lock: str,
    base: ImageRef,
    previous: str | None = None,
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
            # a load that failed half-way must not leave its image under the name: the name
            # goes back to the image it named before, if any
            with contextlib.suppress(EngineError):
                if engine.image_id(name) != before:
                    engine.untag(name)
                    if before is not None:
                        engine.tag(before, name)
            raise
        return
    if engine.image_id(f"sha256:{image_id}") is not None:
        log(f"the engine already holds sha256:{image_id[:12]}: tagging it {name}")
        engine.tag(f"sha256:{image_id}", name)
        return
    try:
        if _load_new_layers(engine, image_id, name, log, lock=lock, base=base):
            return
    except (EngineError, OSError) as exc:
        log(f"loading only the new layers did not work ({exc}); loading the whole image")
    try:
        with buildah.archive_stream(image_id, name) as chunks:
            engine.load(chunks)
    except BaseException:
        # The load names the image as it registers it: a push that failed after the archive
        # was whole, or Ctrl-C right after the load, must not leave the tag on it.
        if engine.image_id(name) == f"sha256:{image_id}":
            engine.untag(name)
        raise


def _load_new_layers(
    engine: Engine, image_id: str, name: str, log: Log, *, lock: str, base: ImageRef
) -> bool:
    """Ship only the layers the engine lacks (:mod:`reprobuild.backends.layerload`), when the engine
    holds an earlier build of the same lock beyond the base: a code-only change. Otherwise
    (a new lock, a first build) the new layers are most of the image, and the whole archive
    is the faster way in (plain tar over a local HTTP push is not)."""
    rootfs = buildah.config(image_id).get("rootfs") or {}
    diff_ids = [str(d) for d in rootfs.get("diff_ids") or []]
    chains = engine.layer_chains(LOCK_LABEL, lock)
    held = layerload.held_prefix(diff_ids, chains)
    if held <= len(engine.layers(base.by_digest())):
        return False
    return layerload.load(engine, image_id, name, diff_ids, held, log)


class Prober(Protocol):
    """Where the built image is probed: the engine, or buildah's storage (buildah.Prober)."""

    def run(
        self,
        image: str,
        command: list[str],
        *,
        entrypoint: list[str] | None = None,
        environment: dict[str, str] | None = None,
    ) -> RunResult: ...

    def inspect(self, image: str) -> dict[str, Any]: ...


class ProbeCache:
    """The image probe's answer kept by what it can depend on: the image's layers but the
    project's code (the probe runs ``python -I``: /app is not on its path), the image's
    environment, and the probe's command and environment. A code-only rebuild then probes
    nothing (about a second of a few here); any other change is a new key. Only where the
    layer with the code is known to be the last (``COPY app/ /app/``, as the Dockerfile
    renders it): else every layer is in the key."""

    def __init__(self, inner: Prober, config: dict[str, Any], *, app: bool) -> None:
        self._inner, self._config = inner, config
        self._layers = self._without_app(config) if app else self._all_layers(config)

    @staticmethod
    def _all_layers(config: dict[str, Any]) -> list[str]:
        return [str(d) for d in (config.get("rootfs") or {}).get("diff_ids") or []]

    @classmethod
    def _without_app(cls, config: dict[str, Any]) -> list[str]:
        layers = cls._all_layers(config)
        history = [h for h in config.get("history") or [] if not h.get("empty_layer")]
        last = str(history[-1].get("created_by", "")) if history else ""
        if layers and "COPY" in last and last.rstrip().endswith(" /app/"):
            return layers[:-1]
        return layers

    def key(self, command: list[str], entrypoint: list[str] | None, env: dict[str, str]) -> str:
        config = self._config.get("config") or {}
        what = [self._layers, sorted(config.get("Env") or []), entrypoint, command, env]
        return hashlib.sha256(json.dumps(what, sort_keys=True).encode()).hexdigest()

    def run(
        self,
        image: str,
        command: list[str],
        *,
        entrypoint: list[str] | None = None,
        environment: dict[str, str] | None = None,
    ) -> RunResult:
        env = environment or {}
        cached = cache_root() / "probes" / f"v1-{self.key(command, entrypoint, env)}.json"
        with contextlib.suppress(OSError):
            if cached.is_file() and cached.stat().st_size <= sbom.MAX_FACTS_BYTES:
                return RunResult(0, cached.read_bytes(), b"")
        result = self._inner.run(image, command, entrypoint=entrypoint, environment=env)
        if result.exit_code == 0:
            with contextlib.suppress(OSError):  # only a cache
                write_atomic(cached, result.stdout)
        return result

    def inspect(self, image: str) -> dict[str, Any]:
        found = self._config.get("config")
        return {"Config": found if isinstance(found, dict) else {}}


def _manifest(
    engine: Prober, spec: RenderSpec, image: str, build: dict[str, Any]
) -> tuple[Manifest, bytes]:
    """The manifest and the SBOM (:mod:`reprobuild.imaging.sbom`) of the built image; the
    manifest records the SBOM's sha256."""
    gpu = spec.variant == "gpu"
    result = engine.run(
        image,
        [sbom.facts_source(), *(["--stack"] if gpu else [])],
        entrypoint=PROBE,
        environment={MODE_VAR: "off", "REPRO_QUIET": "1"},
    )
    if result.exit_code != 0:
        raise EngineError(
            f"the probe failed in the built image (exit {result.exit_code}): "
            f"{result.stderr.decode(errors='replace').strip()[-300:]}"
        )
    what = "the probe output of the built image"
    out = jsonload.loads(result.stdout, what, max_bytes=sbom.MAX_FACTS_BYTES, error=EngineError)
    if not isinstance(out, dict) or not all(
        isinstance(out.get(k), dict) for k in ("probe", "sbom")
    ):
        raise EngineError(f"{what} is not a JSON object with a probe and the SBOM's facts")
    probe, facts = out["probe"], out["sbom"]
    dists = tuple(
        sorted(
            Distribution(d["name"], d["version"], "lock" if d.get("in_venv", True) else "base")
            for d in probe["distributions"]
        )
    )
    check_installed(spec.lock, tuple(d for d in dists if d.origin == "lock"))
    built = _built_from_source(engine, spec, image)
    stack, gpu_facts = _gpu_stack(engine, image, probe, dists) if gpu else ({}, None)
    manifest = Manifest(
        builder_version=spec.builder_version,
        name=spec.name,
        variant=spec.variant,
        base_ref=str(spec.base),
        base_digest=spec.base.digest or "",
        lock_file=spec.lock.path.name,
        lock_sha256=spec.lock.sha256,
        lock_format=spec.lock.format_name,
        lock_selection=spec.lock.choice.to_dict() if spec.lock.choice else None,
        seed=spec.seed,
        determinism=spec.determinism,
        created=epoch_iso(spec.epoch),
        python_version=str(probe["python"]["version"]),
        machine=str(probe["platform"]["machine"]),
        distributions=dists,
        stack=stack,
        gpu=gpu_facts,
        build=build,
        built_from_source=built,
        build_lock=(
            {"file": spec.build_lock.path.name, "sha256": spec.build_lock.sha256}
            if spec.build_lock is not None
            else None
        ),
    )
    document = _sbom(manifest, spec.lock, facts, spec.epoch)
    return replace(manifest, sbom_sha256=sbom.sha256(document)), document


def _sbom(manifest: Manifest, lock: Lock, facts: dict[str, Any], epoch: int) -> bytes:
    """:func:`sbom.make_sbom`, kept by everything it is made of: the manifest (before it records
    the SBOM's sha256), the lock's requirements, the probe's facts, the epoch, and the code that
    makes it (reprobuild's version, the sha256 of the module's source, CycloneDX's version). A
    code-only rebuild then makes none: CycloneDX's model and serializer took 0.2 to 0.4 s of a
    2.4 s torch rebuild here."""
    what = [
        __version__,
        sbom.code_sha256(),
        manifest.to_json().decode(),
        repr(lock.requirements),
        facts,
        epoch,
    ]
    key = hashlib.sha256(json.dumps(what, sort_keys=True, default=str).encode()).hexdigest()
    cached = cache_root() / "sboms" / f"v1-{key}.json"
    with contextlib.suppress(OSError):
        if cached.is_file() and cached.stat().st_size <= sbom.MAX_SBOM_BYTES:
            return cached.read_bytes()
    document = sbom.make_sbom(manifest, lock, facts, epoch)
    with contextlib.suppress(OSError):  # only a cache
        write_atomic(cached, document)
    return document


BUILT_JSON = "/opt/reprobuild/built/built.json"


def _built_from_source(engine: Prober, spec: RenderSpec, image: str) -> list[dict[str, str]] | None:
    """What the wheel-build stage built (its ``built.json`` in the image), checked against
    the lock: one entry per sdist the lock builds, each with the locked sdist's sha256."""
    if spec.build_lock is None or not spec.lock.sources:
        return None
    result = engine.run(image, [BUILT_JSON], entrypoint=["cat"])
    what = f"{BUILT_JSON} in the built image"
    if result.exit_code != 0:
        raise EngineError(f"cannot read {what}: {result.stderr.decode(errors='replace')[-200:]}")
    data = jsonload.loads(result.stdout, what, max_bytes=1 << 20, error=EngineError)
    want = {r.name: r.source.sha256 for r in spec.lock.sources if r.source is not None}
    if not isinstance(data, list) or not all(
        isinstance(b, dict) and all(isinstance(b.get(k), str) for k in BUILT_KEYS) for b in data
    ):
        raise EngineError(f"{what} is not a list of {{{', '.join(BUILT_KEYS)}}}")
    got = {b["name"]: b["sdist_sha256"] for b in data}
    if got != want:
        raise EngineError(f"{what} does not list the lock's sdists: {sorted(got)}")
    # A git commit or a project folder packed on the host: where it came from (the commit).
    origins = {r.name: r.source.origin for r in spec.lock.sources if r.source and r.source.origin}
    return [
        {k: str(b[k]) for k in BUILT_KEYS}
        | ({"origin": origins[b["name"]]} if b["name"] in origins else {})
        for b in sorted(data, key=lambda b: b["name"])
    ]


def _gpu_stack(
    engine: Prober, image: str, probe: dict[str, Any], dists: tuple[Distribution, ...]
) -> tuple[dict[str, Any], dict[str, str] | None]:
    """CUDA, cuDNN, NCCL and framework versions as the base declares them (its ENV and
    labels), as the frameworks report them (the --stack probe; no GPU needed) and as the
    lock's CUDA wheels installed in the image say, plus the minimum host driver the CUDA
    version needs, for the in-image host check. ``gpu.stack`` says where CUDA came from:
    ``base`` (an NGC base declares it) or ``wheels`` (the lock's own, on a plain base: such
    an image runs on CPU too)."""
    from reprobuild_entrypoint.drivercheck import required_driver

    frameworks = probe.get("frameworks", {})
    config = engine.inspect(image).get("Config") or {}
    declared = stacklib.declared(stacklib.parse_env(config.get("Env")), config.get("Labels") or {})
    reported = stacklib.reported(frameworks)
    wheels = stacklib.from_wheels([(d.name, d.version) for d in dists if d.origin == "lock"])
    stack: dict[str, Any] = {"declared": declared, "reported": reported}
    if wheels:
        stack["wheels"] = wheels
    constraint = probe.get("pip_constraint") or {}
    if constraint.get("sha256"):
        stack["pip_constraint"] = {"path": constraint["path"], "sha256": constraint["sha256"]}
    stack["labels"] = stacklib.stack_labels(stack)
    cuda = (
        declared.get("cuda")
        or reported.get("torch.cuda")
        or reported.get("tensorflow.cuda")
        or wheels.get("cuda", {}).get("value")
    )
    if not cuda:
        return stack, None
    gpu = {"cuda": cuda, "stack": "base" if declared.get("cuda") else "wheels"}
    requirement = required_driver(cuda)
    if requirement is not None:
        facts = {
            "driver_min": requirement.driver_min,
            "driver_min_compat": requirement.driver_min_compat,
            "driver_source": requirement.source,
        }
        gpu.update({k: v for k, v in facts.items() if v})
    return stack, gpu
