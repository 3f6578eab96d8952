"""``reprobuild image``: render, fetch, build, probe, stamp, tag. The tag is applied last,
so a failure at any step leaves nothing under the requested tag."""

from __future__ import annotations

import platform
import tempfile
import uuid
from collections.abc import Callable
from dataclasses import replace
from functools import partial
from pathlib import Path
from typing import Any, TextIO

from reprobuild._util import leftovers
from reprobuild._util.fsutil import sha256_file
from reprobuild._util.progress import timed
from reprobuild.backends import buildah
from reprobuild.backends.builders import Builder
from reprobuild.backends.engine import Engine
from reprobuild.bases.refs import parse_ref
from reprobuild.bases.registry import RegistryClient
from reprobuild.errors import (
    ImageRefError,
    LockfileError,
    ReprobuildError,
)
from reprobuild.imaging import fetchstep, plan, platformindex, platforms
from reprobuild.imaging.baseprobe import base_probe
from reprobuild.imaging.buildahbuild import build_with_buildah
from reprobuild.imaging.context import write_tree
from reprobuild.imaging.imageprobe import image_manifest
from reprobuild.imaging.load import give_tag_back
from reprobuild.imaging.platformindex import IndexResult
from reprobuild.imaging.push import push_image, registry_manifest
from reprobuild.imaging.render import (
    CREATED_LABEL,
    ENTRYPOINT,
    RenderSpec,
    epoch_iso,
    layers_epoch,
    render_stamp,
)
from reprobuild.imaging.result import ImageResult, build_info
from reprobuild.locks.wheels import (
    Target,
    WheelError,
)

Log = Callable[[str], None]


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


def choose_builder(engine: Engine, builder: Builder, note: Log, *, push: bool = False) -> Builder:
    """The builder to use, checked once, before the base is pulled. ``auto`` picks the fastest
    builder whose output is a function of the inputs: buildah where it is installed and works;
    else the engine's BuildKit where :meth:`Engine.buildkit_reproducible` says it clamps file
    times (Engine 26 with the containerd image store; there it is the slower of the two, its
    clamped archive costing more than buildah's whole build: docs, Benchmarks), unless the
    image is to be pushed (`--push` builds with buildah); else what the engine offers (buildx, else
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
    a hermetic RUN --mount install (buildah, BuildKit from an epoch), a plain base (see
    :func:`plain_base`: a GPU image from the lock's CUDA wheels is built on one too), and a base
    of the host's machine with a glibc the binary runs on (manylinux 2.17)."""
    if not spec.mount_install or spec.online or not plain_base(spec, probe):
        return None
    try:
        target = Target.from_probe(probe)
    except WheelError:  # no platform facts: pip, which needs none
        return None
    if target.machine != platform.machine() or target.glibc is None or target.glibc < (2, 17):
        return None
    return pinned_uv()


def plain_base(spec: RenderSpec, probe: dict[str, Any]) -> bool:
    """Whether the image's venv sees nothing of the base's but the installer's tools: a CPU
    image's venv sees none of them, and a GPU image's (--system-site-packages) sees only pip,
    setuptools and wheel where the base has no pip constraint and no other distribution (a
    plain Python base, the CUDA from the lock's wheels). An NGC base's torch, TensorFlow or
    CUDA libraries are another matter: pip keeps what the base has at the locked version and
    its PIP_CONSTRAINT, where uv would install a second copy beside them."""
    if spec.variant != "gpu":
        return True
    if probe.get("pip_constraint"):
        return False
    names = {str(d.get("name", "")) for d in probe.get("distributions") or []}
    return names <= INSTALLER_TOOLS


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
) -> ImageResult | IndexResult:
    """``note`` gets the lines that are said even with a quiet ``log`` (leftovers removed).
    ``bar``: where to draw the wheel fetch's live progress bar when it is a terminal (else
    its progress is plain lines through ``log``). ``platform``: ``--platform``'s value
    (:mod:`reprobuild.imaging.platforms`); None: the host's. Several platforms give an
    :class:`IndexResult` (:mod:`reprobuild.imaging.platformindex`)."""
    engine = engine or Engine()
    targets = platforms.targets_of(platform)
    one = partial(
        _build_image,
        directory,
        gpu=gpu,
        base=base,
        online=online,
        ca_cert=ca_cert,
        builder=builder,
        no_cache=no_cache,
        engine=engine,
        log=log,
        note=note or log,
        variant=variant,
        bar=bar,
    )

    def check(wanted: platforms.BuildPlatform, push: str) -> tuple[str, _Planned]:
        _check_asked(builder, push, wanted)
        planned = _plan_for(
            directory, gpu=gpu, base=base, online=online, ca_cert=ca_cert, variant=variant,
            wanted=wanted,
        )  # fmt: skip
        spec = planned[1][0]
        final = platforms.tag_for(
            normalize_tag(tag) if tag else plan.spec_tag(spec, variant), wanted
        )
        return final, planned

    try:
        if len(targets) > 1:
            return _build_index(one, check, targets, push=push, engine=engine, log=log)
        try:
            return one(tag=tag, push=push, wanted=targets[0] if targets else None)
        except _BaseOfAnotherPlatform as other:  # before any work: build for the base's
            platforms.require_runnable(other.platform)
            (note or log)(
                f"note: the base is a {other.platform.name} image: building for "
                f"{other.platform.name}, as --platform {other.platform.name} does"
            )
            return one(tag=tag, push=push, wanted=other.platform)
    except KeyboardInterrupt:  # Ctrl-C, or SIGTERM/SIGHUP as the CLI maps them
        leftovers.reap(engine, log, mine=True, also=[buildah.Storage()])
        raise


def _build_index(
    one: Callable[..., ImageResult],
    check: Callable[[platforms.BuildPlatform, str], tuple[str, _Planned]],
    targets: tuple[platforms.BuildPlatform, ...],
    *,
    push: str | None,
    engine: Engine,
    log: Log,
) -> IndexResult:
    """Several platforms: each built and pushed as ``one`` builds it, then the index of them
    put at ``push``. What can be refused is refused before the first build: ``check`` runs
    ``one``'s own checks (the builder, the push target, the platform's lock coverage and
    base) for every platform first, and names each platform's engine tag and plan, which
    its build then uses (planned once). A failure later gives back the engine tags this run
    moved."""
    names = ",".join(t.name for t in targets)
    if push is None:
        raise ReprobuildError(
            f"--platform {names}: an image index of several platforms lives in a registry, "
            "and no --push was given",
            hint="add --push REGISTRY/NAME[:TAG], or build one platform per run "
            + " and ".join(f"(--platform {t.name})" for t in targets),
        )
    push = normalize_push(push)
    checked = {wanted: check(wanted, push) for wanted in targets}
    # the engine tags this run may move (each platform's, and the one its push makes) -> the
    # image each named before
    moved = {
        name: engine.image_id(name)
        for wanted in targets
        for name in (checked[wanted][0], platformindex.platform_ref(push, wanted))
    }

    def build_one(wanted: platforms.BuildPlatform, ref: str) -> ImageResult:
        final, planned = checked[wanted]
        return one(tag=final, push=ref, wanted=wanted, checked_plan=planned)

    try:
        return platformindex.build_index(
            targets, push, build_one, engine=engine, registry=RegistryClient, log=log
        )
    except BaseException:
        for name, before in moved.items():
            give_tag_back(engine, name, before)
        raise


class _BaseOfAnotherPlatform(Exception):
    """No ``--platform``, and the base is a single-platform image of another machine: the
    build is for that machine (raised before any work, and caught by :func:`build_image`)."""

    def __init__(self, platform: platforms.BuildPlatform) -> None:
        super().__init__(platform.name)
        self.platform = platform


# A platform's plan and its spec for the platform, with the platform's base digest.
_Planned = tuple[plan.Plan, tuple[RenderSpec, str | None]]


def _plan_for(
    directory: Path,
    *,
    gpu: bool,
    base: str | None,
    online: bool,
    ca_cert: Path | None,
    variant: str | None,
    wanted: platforms.BuildPlatform | None,
) -> _Planned:
    """The plan, its spec for the platform and the platform's base digest
    (:func:`platforms.for_platform`): checked before any work."""
    planned = plan.plan_build(
        directory, gpu=gpu, base=base, online=online, ca_cert=ca_cert, variant_name=variant,
        machine=wanted.machine if wanted else "x86_64",
    )  # fmt: skip
    return planned, platforms.for_platform(planned.spec, wanted)


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
    checked_plan: _Planned | None = None,
) -> ImageResult:
    """One image. ``checked_plan``: its plan where the caller checked it already (an index's
    platform), else planned here; both before any work."""
    push = _check_asked(builder, push, wanted)
    planned, (spec, base_digest) = checked_plan or _plan_for(
        directory, gpu=gpu, base=base, online=online, ca_cert=ca_cert, variant=variant,
        wanted=wanted,
    )  # fmt: skip
    plan.record_new_base(planned, log)  # first: a read-only project is refused before a pull
    if wanted is not None and base_digest is not None:
        plan.record_base_platform(planned, wanted.name, base_digest, log)
    if wanted is None:  # no --platform: a base of another machine says which (its plan notes
        # come again, once it builds for that machine: rare, and only those)
        engine.ensure_base(spec.base, log)
        other = platforms.of_image(engine.inspect(spec.base.by_digest()))
        if other is not None:
            raise _BaseOfAnotherPlatform(other)
    final = normalize_tag(tag) if tag else platforms.tag_for(plan.spec_tag(spec, variant), wanted)
    builder, from_epoch = _pick_builder(engine, builder, push, wanted, log)
    # One note for all of it: the engine's leftovers and buildah's (reaped first: a dead
    # run's temp dir may name an image it left in buildah's storage). Meanwhile the plan goes
    # on; the build waits for it.
    reaped = leftovers.reap_soon(
        engine, note, also=[buildah.Storage(note)] if builder == "buildah" else []
    )
    engine.ensure_base(spec.base, log)
    # RUN --mount and the layers at an epoch of their own: buildah, and BuildKit where it
    # builds from the epoch (Engine 20.10's BuildKit would take --mount too, but its image is
    # not reproducible either way)
    at_epoch = builder == "buildah" or from_epoch
    spec = replace(spec, base_entrypoint=base_entrypoint(engine, spec), mount_install=at_epoch)
    probe = base_probe(engine, spec.base)
    plan.check_base_python(planned.config, str(probe["python"].get("version", "")), str(spec.base))
    check_base_conflicts(spec, probe)
    uv = uv_installer(spec, probe)
    if uv is not None:
        spec = replace(spec, uv_sha256=sha256_file(uv))
    # buildah builds the layers under the stamp at an epoch of their own (layers_epoch): a
    # commit moves SOURCE_DATE_EPOCH, and with it every step's text and file time, so the next
    # build would start over at the first step and install every wheel again. The stamp, built
    # from the project's epoch, sets the image's time and its created label. The engine's
    # BuildKit from an epoch too: its package layers then keep their diff IDs across commits
    # (reprobuild.imaging.layers), as buildah's do.
    built = replace(spec, epoch=layers_epoch(spec.epoch)) if at_epoch else spec
    scratch = leftovers.scratch_tag(spec.name, uuid.uuid4().hex[:16])
    with tempfile.TemporaryDirectory(prefix=leftovers.temp_prefix("ctx")) as tmp:
        ctx = own_folder(Path(tmp), "context")
        checked = fetchstep.prepare_context(built, probe, uv, ctx, online=online, log=log, bar=bar)
        # Hermetic builds get no network unless apt packages must be fetched.
        network = online or bool(spec.apt)
        reaped()
        if builder == "buildah":
            held = engine.image_id(final) if push is not None else None
            try:
                result = build_with_buildah(
                    engine, spec, built.epoch, ctx, scratch, final, no_cache=no_cache,
                    network=network, log=log, checked=checked, wanted=wanted,
                )  # fmt: skip
            except ReprobuildError:
                checked()  # a damaged cached wheel failed the build: that is the one line
                raise
            return result if push is None else _push(engine, result, push, held, log)
        try:
            return _build_with_engine(
                engine, spec, built.epoch, ctx, scratch, final, builder=builder,
                from_epoch=from_epoch, no_cache=no_cache, network=network, log=log,
                checked=checked,
            )  # fmt: skip
        finally:
            engine.untag(scratch)


def _push(engine: Engine, result: ImageResult, ref: str, held: str | None, log: Log) -> ImageResult:
    """``--push``: the built image, from the engine, as ``reprobuild push`` sends it. The
    engine sends only the layers the registry lacks and then knows the image by its pushed
    digest, which compose, k8s and slurm pin it by. As when buildah pushed before the load,
    the tag appears only once the push worked: a failed push gives the tag back to the image
    it named before (``held``), or removes it. The layers stay in buildah's cache, so running
    the command again builds nothing."""
    log(f"pushing {ref}")
    try:
        report = push_image(
            engine, result.image, ref, read_manifest=registry_manifest, log=log, move=True
        )
    except BaseException:
        give_tag_back(engine, result.image, held)
        raise
    return replace(result, pushed=ref, push=report)


def _check_asked(
    builder: Builder, push: str | None, wanted: platforms.BuildPlatform | None
) -> str | None:
    """What can be refused before any work: a builder asked for by name that cannot build
    for the platform or is missing, ``--push`` with another builder; the push target."""
    if builder != "auto":
        platforms.check_builder(wanted, builder)
    buildah.jobs()  # REPROBUILD_BUILDAH_JOBS, checked before any work (one line where bad)
    if builder == "buildah":
        buildah.require()  # before any work: a missing tool is the first thing to hear about
    elif push is not None and builder != "auto":
        raise ReprobuildError(
            f"--push needs --builder buildah (got --builder {builder})",
            hint="or push the built image yourself: docker push",
        )
    return normalize_push(push) if push is not None else None


def _pick_builder(
    engine: Engine,
    asked: Builder,
    push: str | None,
    wanted: platforms.BuildPlatform | None,
    log: Log,
) -> tuple[Builder, bool]:
    """The builder, and whether the engine's BuildKit builds from SOURCE_DATE_EPOCH (scratch
    and stamp alike, where it can clamp file times: the same inputs then give the same image
    ID)."""
    builder = choose_builder(engine, asked, log, push=push is not None)
    platforms.check_builder(wanted, builder)
    from_epoch = False
    if builder == "buildkit":
        possible, why = engine.buildkit_reproducible()
        if asked == "buildkit":  # auto has said it
            log(f"builder: buildkit {'from SOURCE_DATE_EPOCH' if possible else 'as is'}: {why}")
        from_epoch = possible
    if push is not None and builder != "buildah":
        raise ReprobuildError(
            f"--push needs the buildah builder, and --builder auto picked {builder} "
            "(buildah is not installed or not usable here)",
            hint=buildah.INSTALL_HINT.replace(", or use --builder classic", ""),
        )
    return builder, from_epoch


def own_folder(parent: Path, name: str) -> Path:
    """``parent/NAME-<random>``, a build context's folder: a name no other build had. buildx
    keys its cache of a context it sent by the folder's name alone and sends again only the
    files whose size or time changed; the contexts' times are clamped, so a Dockerfile, a
    group's requirements or a manifest changed to the same length (a bump from 3.5.0 to 3.6.0)
    was not sent, and BuildKit built, or stamped, the previous build's."""
    return parent / f"{name}-{uuid.uuid4().hex[:16]}"


def _build_with_engine(
    engine: Engine,
    spec: RenderSpec,
    layers_at: int,
    ctx: Path,
    scratch: str,
    final: str,
    *,
    builder: Builder,
    from_epoch: bool,
    no_cache: bool,
    network: bool,
    log: Log,
    checked: Callable[[], None],
) -> ImageResult:
    """Build with the engine (BuildKit, buildx or classic) under ``scratch``, probe it, stamp
    it into ``final``. ``from_epoch``: BuildKit builds from the epoch, the layers at
    ``layers_at`` and the stamp at the project's."""
    with timed(log, f"building the image ({builder})"):
        try:
            engine.build(
                ctx, scratch, builder=builder, log=log, no_cache=no_cache, network=network,
                epoch=layers_at if from_epoch else None,
            )  # fmt: skip
        except ReprobuildError:
            checked()
            raise
    checked()
    info = build_info(engine, builder, spec, from_epoch=from_epoch)
    manifest, sbom_json = image_manifest(engine, spec, scratch, info)
    stamp = own_folder(ctx.parent, "stamp")
    stamp.mkdir()
    labels = manifest.labels()
    if layers_at != spec.epoch:  # the layers' LABEL named their epoch
        labels[CREATED_LABEL] = epoch_iso(spec.epoch)
    write_tree(
        render_stamp(scratch, manifest.to_json(), labels, sbom_json), stamp, epoch=spec.epoch
    )
    image_id = engine.build(  # classic writes the wall clock: not from an epoch
        stamp,
        final,
        builder="buildkit" if from_epoch else "classic",
        log=log,
        network=False,
        epoch=spec.epoch if from_epoch else None,
    )
    return ImageResult(final, image_id, manifest)
