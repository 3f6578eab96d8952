"""The fetch step of ``reprobuild image``: the build context written, with the locked wheels
and the wheel-build stage's inputs fetched and checked on the host into it."""

from __future__ import annotations

import shutil
from collections.abc import Callable
from pathlib import Path
from typing import Any, TextIO

from reprobuild.imaging import layers
from reprobuild.imaging.context import clamp_times, write_tree
from reprobuild.imaging.render import (
    BUILD_DIR,
    BUILD_EPOCH,
    UV_IN_CONTEXT,
    RenderSpec,
    package_groups,
    render_context,
)
from reprobuild.locks.wheels import (
    CACHED_MTIME_NS,
    Target,
    WheelCheck,
    fetch_sources,
    fetch_wheels,
    wheel_folder,
)


def nothing_to_check() -> None:
    """An online build installs from the indexes: pip checks the hashes there."""


def fill_build_stage(
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


def prepare_context(
    built: RenderSpec,
    probe: dict[str, Any],
    uv: Path | None,
    ctx: Path,
    *,
    online: bool,
    log: Callable[[str], None],
    bar: TextIO | None,
) -> Callable[[], None]:
    """Write the build context for ``built`` into ``ctx`` (made here): the rendered files, the
    pinned uv, the locked wheels (fetched into the cache and linked from it, each group's into
    its folder) and the wheel-build stage's inputs, for the base's platform as ``probe`` (the
    base's) says it. Returns the check that every wheel the
    build read is still the cache's checked bytes (:class:`WheelCheck`), to be called once the
    build is done; an online build installs from the indexes and checks nothing here."""
    ctx.mkdir()
    write_tree(render_context(built), ctx, epoch=built.epoch)
    if uv is not None:  # a copy: the context's times are clamped, the venv's uv is not ours
        # in a folder of its own, which the steps mount (a mounted file, buildah 1.39 opens
        # for writing: "text file busy" while a stage beside runs it)
        dest = ctx / UV_IN_CONTEXT
        dest.parent.mkdir()
        dest.parent.chmod(0o755)  # the sdists' builds run as nobody
        shutil.copyfile(uv, dest)
        dest.chmod(0o755)
    checked: Callable[[], None] = nothing_to_check
    if not online:
        target = Target.from_probe(probe)
        fetch_wheels(built.lock, target, ctx / "wheels", log=log, bar=bar)
        layers.link_wheels(package_groups(built), ctx / "wheels", ctx)
        if built.mount_install:  # a RUN --mount source: its mtimes reach the history
            # the wheels are links into the cache, at its one fixed time: kept as they are
            clamp_times(ctx, built.epoch, linked_at=CACHED_MTIME_NS)
        checked = WheelCheck(built.lock, ctx / "wheels", wheel_folder(target)).wait
    if built.build_lock is not None:
        fill_build_stage(built, Target.from_probe(probe), ctx, log, bar)
    return checked
