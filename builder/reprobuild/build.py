"""``reprobuild image``: render, fetch, build, probe, stamp, tag. The tag is applied last,
so a failure at any step leaves nothing under the requested tag."""

from __future__ import annotations

import json
import tempfile
import uuid
from collections.abc import Callable
from dataclasses import dataclass, replace
from pathlib import Path

from reprobuild.context import write_tree
from reprobuild.engine import Builder, Engine
from reprobuild.errors import EngineError, ImageRefError, ReprobuildError
from reprobuild.fsutil import write_atomic
from reprobuild.lockfile import Lock
from reprobuild.manifest import Distribution, Manifest
from reprobuild.plan import make_spec
from reprobuild.refs import parse_ref
from reprobuild.render import ENTRYPOINT, RenderSpec, epoch_iso, render_context, render_stamp
from reprobuild.wheels import Target, cache_root, fetch_wheels

Log = Callable[[str], None]
PROBE = ["/opt/venv/bin/python", "-I", "-m", "reprobuild_entrypoint.probe"]


@dataclass(frozen=True)
class ImageResult:
    image: str
    id: str
    manifest: Manifest

    def to_dict(self) -> dict[str, object]:
        return {"image": self.image, "id": self.id, "manifest": self.manifest.to_dict()}


def default_tag(spec: RenderSpec) -> str:
    return f"{spec.name}:{spec.variant}-{spec.lock.sha256[:12]}"


def normalize_tag(tag: str) -> str:
    ref = parse_ref(tag)
    if ref.digest:
        raise ImageRefError(f"--tag {tag!r} must be NAME[:TAG], not a digest reference")
    return f"{ref.name}:{ref.tag or 'latest'}"


def base_probe(engine: Engine, spec: RenderSpec) -> dict[str, object]:
    """Python version and platform of the base, read by running its own python3.

    Cached by digest: what a digest names never changes."""
    from reprobuild_entrypoint import probe as probe_module

    cached = cache_root() / "bases" / f"{(spec.base.digest or '').replace(':', '-')}.json"
    try:
        data: dict[str, object] = json.loads(cached.read_text())
        return data
    except (OSError, ValueError):
        pass

    source = Path(probe_module.__file__).read_text()
    result = engine.run(spec.base.by_digest(), [], entrypoint=["python3", "-c", source])
    if result.exit_code != 0:
        raise EngineError(
            f"base {spec.base} has no working python3 (exit {result.exit_code}): "
            f"{result.stderr.decode(errors='replace').strip()[-200:]}",
            hint="use a python:*-slim base or a Debian base with python3 and python3-venv",
        )
    data = json.loads(result.stdout)
    data.pop("distributions", None)
    write_atomic(cached, json.dumps(data, sort_keys=True))
    return data


def base_entrypoint(engine: Engine, spec: RenderSpec) -> tuple[str, ...]:
    """The base's ENTRYPOINT, to be chained by ours; none when the base is itself a
    reprobuild image (its entrypoint is ours)."""
    entry = engine.entrypoint_of(spec.base.by_digest())
    return () if entry == ENTRYPOINT else entry


def check_installed(lock: Lock, dists: tuple[Distribution, ...]) -> None:
    """The image's venv must hold exactly what the lock pins: nothing more, nothing else."""
    pinned = {r.name: r for r in lock.requirements}
    for dist in dists:
        req = pinned.get(dist.name)
        if req is None:
            raise ReprobuildError(
                f"the image holds {dist.name}=={dist.version}, which the lock does not pin"
            )
        if req.version != dist.version:
            raise ReprobuildError(
                f"the image holds {dist.name}=={dist.version} but the lock pins {req.version}"
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
) -> ImageResult:
    _config, spec = make_spec(directory, gpu=gpu, base=base, online=online, ca_cert=ca_cert)
    final = normalize_tag(tag) if tag else default_tag(spec)
    engine = engine or Engine()
    engine.ensure_base(spec.base, log)
    spec = replace(spec, base_entrypoint=base_entrypoint(engine, spec))
    files = render_context(spec)
    probe = base_probe(engine, spec)
    scratch = f"reprobuild-scratch/{spec.name.replace('/', '-')}:{uuid.uuid4().hex[:16]}"
    with tempfile.TemporaryDirectory(prefix="reprobuild-ctx-") as tmp:
        ctx = Path(tmp) / "context"
        ctx.mkdir()
        write_tree(files, ctx, epoch=spec.epoch)
        if not online:
            fetch_wheels(spec.lock, Target.from_probe(probe), ctx / "wheels", log=log)
        try:
            engine.build(ctx, scratch, builder=builder, log=log, no_cache=no_cache)
            manifest = _manifest(engine, spec, scratch)
            stamp = Path(tmp) / "stamp"
            stamp.mkdir()
            labels = manifest.labels()
            write_tree(render_stamp(scratch, manifest.to_json(), labels), stamp, epoch=spec.epoch)
            image_id = engine.build(stamp, final, builder="classic", log=log)
        finally:
            engine.untag(scratch)
    return ImageResult(final, image_id, manifest)


def _manifest(engine: Engine, spec: RenderSpec, image: str) -> Manifest:
    result = engine.run(image, [], entrypoint=PROBE)
    if result.exit_code != 0:
        raise EngineError(
            f"the probe failed in the built image (exit {result.exit_code}): "
            f"{result.stderr.decode(errors='replace').strip()[-300:]}"
        )
    probe = json.loads(result.stdout)
    dists = tuple(sorted(Distribution(d["name"], d["version"]) for d in probe["distributions"]))
    check_installed(spec.lock, dists)
    return Manifest(
        builder_version=spec.builder_version,
        name=spec.name,
        variant=spec.variant,
        base_ref=str(spec.base),
        base_digest=spec.base.digest or "",
        lock_file=spec.lock.path.name,
        lock_sha256=spec.lock.sha256,
        seed=spec.seed,
        determinism=spec.determinism,
        created=epoch_iso(spec.epoch),
        python_version=str(probe["python"]["version"]),
        machine=str(probe["platform"]["machine"]),
        distributions=dists,
    )
