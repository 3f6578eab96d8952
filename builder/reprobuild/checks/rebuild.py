"""``reprobuild rebuild IMAGE [DIR]``: build the image again from the inputs its manifest
records and say whether the result is the same image.

The inputs: the project (at the recorded git revision, when the image records one), the lock
(its sha256), the base (its digest), SOURCE_DATE_EPOCH (the manifest's ``created``), the
builder and its version, and this reprobuild's version. One that is not at hand is an error
naming it (exit 2). When the rebuilt image differs, the first layer that differs is named
and, inside it, every file that differs: path, size, mode, owner, mtime and sha256.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import re
import tarfile
import tempfile
import uuid
from collections.abc import Callable, Iterator
from dataclasses import asdict, dataclass, field, replace
from datetime import UTC, datetime
from pathlib import Path
from typing import IO, Any

from reprobuild import __version__
from reprobuild._util import leftovers
from reprobuild._util.fsutil import sha256_file
from reprobuild.backends import buildah
from reprobuild.backends.builders import Builder
from reprobuild.backends.engine import Engine
from reprobuild.bases.refs import parse_ref
from reprobuild.checks.imageinfo import read_image
from reprobuild.errors import EngineError, RebuildInputError, ReprobuildError, shorten
from reprobuild.imaging.manifest import Manifest
from reprobuild.imaging.plan import git_revision, plan_build
from reprobuild.imaging.platforms import platform_named
from reprobuild.imaging.result import ImageResult

Log = Callable[[str], None]
# The builders whose reproducible builds the check rebuilds, with the same builder.
REBUILDERS = ("buildah", "buildkit")
REVISION_LABEL = "org.opencontainers.image.revision"


@dataclass(frozen=True)
class FileFacts:
    """One entry of a layer, as its tar header and bytes give it."""

    kind: str  # file, dir, symlink, hardlink, other
    size: int
    mode: str  # octal permission bits, e.g. "0644"
    owner: str  # uid:gid
    mtime: str  # ISO 8601, UTC
    sha256: str  # of the content (a link: of its target); "" for directories


@dataclass(frozen=True)
class FileDiff:
    path: str
    recorded: FileFacts | None  # None: not in the recorded image's layer
    rebuilt: FileFacts | None  # None: not in the rebuilt image's layer


@dataclass(frozen=True)
class LayerDiff:
    index: int  # 1-based, counting from the bottom (the base's first layer is 1)
    count: int
    created_by: str  # the build step that made it, from the image's history
    recorded: str  # diff IDs
    rebuilt: str
    files: tuple[FileDiff, ...] = ()


@dataclass(frozen=True)
class RebuildReport:
    image: str
    recorded_id: str
    rebuilt_id: str
    layer: LayerDiff | None = None
    config: tuple[str, ...] = field(default_factory=tuple)  # config keys that differ
    # The SBOMs' sha256 (the manifests' sbom_sha256): None where an image has none.
    sbom_recorded: str | None = None
    sbom_rebuilt: str | None = None

    @property
    def match(self) -> bool:
        return self.recorded_id == self.rebuilt_id

    def to_dict(self) -> dict[str, Any]:
        data = asdict(self)
        data["match"] = self.match
        data["config"] = list(self.config)
        return data


def epoch_of(created: str) -> int:
    """The manifest's ``created`` (``YYYY-MM-DDTHH:MM:SSZ``) back as SOURCE_DATE_EPOCH."""
    try:
        when = datetime.strptime(created, "%Y-%m-%dT%H:%M:%SZ").replace(tzinfo=UTC)
    except (TypeError, ValueError):
        raise RebuildInputError(
            f"the manifest's created {shorten(created)} is not a time of the form "
            "YYYY-MM-DDTHH:MM:SSZ"
        ) from None
    return int(when.timestamp())


def _uv_sha256() -> str | None:
    """The sha256 of the uv binary reprobuild installs images' wheels with; None: none."""
    from reprobuild.imaging.image import pinned_uv

    uv = pinned_uv()
    try:
        return sha256_file(uv) if uv is not None else None
    except OSError:
        return None


def check_inputs(engine: Engine, image: str, directory: Path) -> tuple[Any, dict[str, str], int]:
    """The image's manifest, labels and epoch, once every recorded input is at hand."""
    try:
        info = read_image(engine, image)
    except RebuildInputError:
        raise
    except ReprobuildError as exc:
        raise RebuildInputError(exc.message, hint=exc.hint) from None
    manifest = info.manifest
    _check_builder(engine, image, manifest.build)
    _check_tools(image, manifest)
    _check_base(manifest)
    _check_revision(info.labels.get(REVISION_LABEL), directory)
    return manifest, info.labels, epoch_of(manifest.created)


def _check_builder(engine: Engine, image: str, build: dict[str, Any]) -> None:
    """The image was built by a reproducible builder, and that builder's version is at hand
    (able to build reproducibly, for the engine's BuildKit)."""
    if not build:
        raise RebuildInputError(
            f"{image} records no builder (built before reprobuild recorded one)",
            hint="rebuild checks images built with `reprobuild image` by a reproducible builder",
        )
    builder = str(build.get("builder", ""))
    if builder not in REBUILDERS or not build.get("reproducible"):
        raise RebuildInputError(
            f"{image} was built with {builder!r} and is marked not reproducible; only a "
            "reproducible build (--builder buildah, or buildkit where the engine builds it "
            "reproducibly; no apt packages) can be checked",
        )
    recorded = str(build.get("builder_version", ""))
    # buildah's own version; for the engine's BuildKit, the engine's (it vendors BuildKit)
    if builder == "buildah":
        have, tool, here, where = (
            buildah.version(),
            "buildah",
            "this machine has buildah",
            f"where buildah {recorded} is installed",
        )
    else:
        have, tool, here, where = (
            engine.server_version(),
            "buildkit of Engine",
            "this engine is",
            f"against Docker Engine {recorded}",
        )
    if have != recorded:
        raise RebuildInputError(
            f"builder {tool} {recorded!r} is not at hand ({here} {have}); another version may "
            "write other bytes",
            hint=f"run the check {where}",
        )
    if builder == "buildkit":
        possible, why = engine.buildkit_reproducible()
        if not possible:
            raise RebuildInputError(
                f"{image} was built reproducibly with the engine's BuildKit, which cannot "
                f"build reproducibly here: {why}",
                hint="run the check where the engine keeps images in the containerd store",
            )


def _check_tools(image: str, manifest: Manifest) -> None:
    """This reprobuild built the image, and the uv it installed the wheels with is at hand."""
    if manifest.builder_version != __version__:
        raise RebuildInputError(
            f"reprobuild {manifest.builder_version!r} built {image}; this is reprobuild "
            f"{__version__}",
            hint=f"install reprobuild {manifest.builder_version} to check it",
        )
    installer = manifest.build.get("installer_sha256")
    if installer:
        uv_here = _uv_sha256()
        if uv_here != installer:
            raise RebuildInputError(
                f"installer uv {shorten(str(installer))} (sha256) installed the wheels in "
                f"{image}, and is not at hand ("
                + (f"this reprobuild's uv is {uv_here}" if uv_here else "this reprobuild has no uv")
                + "); another uv may write other bytes",
                hint=f"check it with reprobuild {manifest.builder_version} and the uv it pins",
            )


def _check_base(manifest: Manifest) -> None:
    """The manifest's base is an image reference pinned to its recorded digest."""
    try:
        base = parse_ref(manifest.base_ref)
    except ReprobuildError:
        raise RebuildInputError(
            f"the manifest's base {shorten(manifest.base_ref)} is not an image reference"
        ) from None
    if not base.digest or base.digest != manifest.base_digest:
        raise RebuildInputError(
            f"the manifest's base {shorten(manifest.base_ref)} is not pinned to its recorded "
            f"digest {shorten(manifest.base_digest)}"
        )


def _check_revision(revision: str | None, directory: Path) -> None:
    """The project is checked out at the commit the image records (where it records one)."""
    if not revision:
        return
    if not re.fullmatch(r"[0-9a-f]{40}|[0-9a-f]{64}", revision):
        raise RebuildInputError(
            f"the image's {REVISION_LABEL} label {shorten(revision)} is not a git commit id"
        )
    at = git_revision(directory)
    if at != revision:
        now = "has uncommitted changes or is not a git checkout" if at is None else f"is at {at}"
        raise RebuildInputError(
            f"the project {shorten(str(directory))} is not at the recorded revision "
            f"{revision}: it {now}",
            hint=f"check it out (git checkout {revision[:12]}) and run it again",
        )


@contextlib.contextmanager
def _epoch_env(epoch: int) -> Iterator[None]:
    old = os.environ.get("SOURCE_DATE_EPOCH")
    os.environ["SOURCE_DATE_EPOCH"] = str(epoch)
    try:
        yield
    finally:
        if old is None:
            os.environ.pop("SOURCE_DATE_EPOCH", None)
        else:
            os.environ["SOURCE_DATE_EPOCH"] = old


def rebuild(
    image: str, directory: Path, *, engine: Engine | None = None, log: Log = lambda _: None
) -> RebuildReport:
    from reprobuild.imaging.image import build_image

    engine = engine or Engine()
    manifest, _labels, epoch = check_inputs(engine, image, directory)
    recorded_id = str(engine.inspect(image)["Id"])
    gpu = manifest.variant == "gpu"
    builder: Builder = "buildkit" if manifest.build.get("builder") == "buildkit" else "buildah"
    with _epoch_env(epoch):
        machine = manifest.machine or "x86_64"  # the image's: an arm64 one is rebuilt for arm64
        spec = plan_build(directory, gpu=gpu, base=manifest.base_ref, machine=machine).spec
        recorded_sha = manifest.lock_sha256
        if re.fullmatch(r"[0-9a-f]{64}", recorded_sha):
            recorded_sha = recorded_sha[:12] + "..."
        else:
            recorded_sha = shorten(recorded_sha)
        if spec.lock.sha256 != manifest.lock_sha256:
            raise RebuildInputError(
                f"the lock {str(spec.lock.path)!r} has sha256 {spec.lock.sha256[:12]}..., the "
                f"image records {shorten(manifest.lock_file)} with sha256 {recorded_sha}",
                hint="restore the lock the image was built from",
            )
        chosen = spec.lock.choice.to_dict() if spec.lock.choice else None
        if manifest.lock_selection is not None and chosen != manifest.lock_selection:
            raise RebuildInputError(
                f"reprobuild.yaml's select reads {spec.lock.path.name} for "
                f"{spec.lock.choice.describe() if spec.lock.choice else 'no selection'}, the "
                f"image records {manifest.lock_description}",
                hint="restore the select: the image was built with",
            )
        try:
            engine.ensure_base(parse_ref(manifest.base_ref), log)
        except EngineError as exc:
            raise RebuildInputError(
                f"the recorded base {manifest.base_ref} is not available: {exc.message}"
            ) from None
        tag = leftovers.scratch_tag("rebuild", uuid.uuid4().hex[:16])
        try:
            result = build_image(
                directory, gpu=gpu, tag=tag, base=manifest.base_ref, builder=builder,
                engine=engine, log=log, no_cache=True, platform=platform_named(machine),
            )  # fmt: skip
            assert isinstance(result, ImageResult)  # one platform: one image
            if result.id == recorded_id:
                report = RebuildReport(image, recorded_id, result.id)
            else:
                report = _compare(engine, image, recorded_id, tag, result.id)
            return replace(
                report,
                sbom_recorded=manifest.sbom_sha256,
                sbom_rebuilt=result.manifest.sbom_sha256,
            )
        finally:
            engine.untag(tag)


def _compare(
    engine: Engine, image: str, recorded_id: str, tag: str, rebuilt_id: str
) -> RebuildReport:
    with tempfile.TemporaryDirectory(prefix=leftovers.temp_prefix("ctx")) as tmp:
        a, b = Path(tmp) / "recorded.tar", Path(tmp) / "rebuilt.tar"
        engine.save(image, a)
        engine.save(tag, b)
        with tarfile.open(a) as ta, tarfile.open(b) as tb:
            config_a, layers_a = _saved(ta)
            config_b, layers_b = _saved(tb)
            ids_a = list(config_a.get("rootfs", {}).get("diff_ids", []))
            ids_b = list(config_b.get("rootfs", {}).get("diff_ids", []))
            for i in range(max(len(ids_a), len(ids_b))):
                da = ids_a[i] if i < len(ids_a) else ""
                db = ids_b[i] if i < len(ids_b) else ""
                if da == db:
                    continue
                files = _diff_files(
                    _facts(ta, layers_a[i]) if da else {}, _facts(tb, layers_b[i]) if db else {}
                )
                layer = LayerDiff(
                    index=i + 1,
                    count=len(ids_a),
                    created_by=_created_by(config_a, i) or _created_by(config_b, i),
                    recorded=da,
                    rebuilt=db,
                    files=files,
                )
                return RebuildReport(image, recorded_id, rebuilt_id, layer=layer)
        keys = sorted(
            k for k in set(config_a) | set(config_b) if config_a.get(k) != config_b.get(k)
        )
        return RebuildReport(image, recorded_id, rebuilt_id, config=tuple(keys))


def _saved(tar: tarfile.TarFile) -> tuple[dict[str, Any], list[str]]:
    """The config and the layer paths of a ``docker save`` archive."""
    index = _read(tar, "manifest.json")
    entry = json.loads(index)[0]
    config = json.loads(_read(tar, str(entry["Config"])))
    return config, [str(p) for p in entry["Layers"]]


def _read(tar: tarfile.TarFile, name: str) -> bytes:
    fh = tar.extractfile(name)
    if fh is None:
        raise EngineError(f"the saved image has no {name}")
    return fh.read()


def _created_by(config: dict[str, Any], index: int) -> str:
    """The history entry of the ``index``-th layer (entries that made no layer skipped)."""
    layers = [h for h in config.get("history", []) if not h.get("empty_layer")]
    return str(layers[index].get("created_by", "")) if index < len(layers) else ""


def _facts(outer: tarfile.TarFile, name: str) -> dict[str, FileFacts]:
    """Every entry of one layer (read, never extracted): path -> facts."""
    raw: IO[bytes] | None = outer.extractfile(name)
    if raw is None:
        raise EngineError(f"the saved image has no layer {name}")
    out: dict[str, FileFacts] = {}
    with tarfile.open(fileobj=raw, mode="r|*") as layer:
        for member in layer:
            digest = ""
            if member.isfile():
                fh = layer.extractfile(member)
                h = hashlib.sha256()
                if fh is not None:
                    for chunk in iter(lambda fh=fh: fh.read(1 << 20), b""):  # type: ignore[misc]
                        h.update(chunk)
                digest = h.hexdigest()
            elif member.issym() or member.islnk():
                digest = hashlib.sha256(member.linkname.encode()).hexdigest()
            kind = (
                "file" if member.isfile() else "dir" if member.isdir() else
                "symlink" if member.issym() else "hardlink" if member.islnk() else "other"
            )  # fmt: skip
            mtime = _when(member.mtime)
            out[member.name.rstrip("/")] = FileFacts(
                kind, member.size, f"{member.mode & 0o7777:04o}",
                f"{member.uid}:{member.gid}", mtime, digest,
            )  # fmt: skip
    return out


def _when(mtime: float) -> str:
    """A layer entry's mtime as UTC text; a value no calendar holds (a hostile layer's) is
    shown as the number it is."""
    try:
        return datetime.fromtimestamp(mtime, UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
    except (OverflowError, OSError, ValueError):
        return f"@{mtime!r}"


def _diff_files(a: dict[str, FileFacts], b: dict[str, FileFacts]) -> tuple[FileDiff, ...]:
    return tuple(
        FileDiff(path, a.get(path), b.get(path))
        for path in sorted(set(a) | set(b))
        if a.get(path) != b.get(path)
    )


def shown(path: str) -> str:
    """A path from an image, safe to print on one line (control characters escaped)."""
    return path if path.isprintable() else repr(path)


def _sbom_line(report: RebuildReport) -> str:
    recorded, rebuilt = report.sbom_recorded, report.sbom_rebuilt
    if recorded is None:
        return "sbom      the recorded image has none (built before images had one)"
    if recorded == rebuilt:
        return f"sbom      the same (sha256 {recorded[:12]}...)"
    return f"sbom      differs: recorded sha256 {recorded[:12]}..., rebuilt {str(rebuilt)[:12]}..."


def render_table(report: RebuildReport) -> list[str]:
    lines = [
        f"image     {report.image} ({report.recorded_id})",
        f"rebuilt   {report.rebuilt_id}",
    ]
    lines.append(_sbom_line(report))
    if report.match:
        lines.append("result    the same image: the recorded inputs give it again")
        return lines
    if report.layer is None:
        keys = ", ".join(report.config) or "nothing visible"
        lines.append(f"result    differs: every layer matches; the config differs in {keys}")
        return lines
    layer = report.layer
    lines.append(
        f"result    differs from layer {layer.index} of {layer.count}: "
        f"{shown(layer.created_by)[:120]}"
    )
    lines.append(
        f"  {'':1} {'path':<48} {'size':>9} {'mode':>4} {'owner':>11} {'mtime':<20} sha256"
    )
    for diff in layer.files:
        for sign, facts in (("-", diff.recorded), ("+", diff.rebuilt)):
            if facts is None:
                lines.append(f"  {sign} {shown(diff.path):<48} (absent)")
            else:
                lines.append(
                    f"  {sign} {shown(diff.path):<48} {facts.size:>9} {facts.mode:>4} "
                    f"{facts.owner:>11} {facts.mtime:<20} {facts.sha256[:16]}"
                )
    lines.append("  (-: the image as recorded; +: rebuilt from its inputs)")
    return lines
