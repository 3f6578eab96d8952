"""The venv as layers by package (issue 52), on real builders, with a torch-shaped lock of
small stand-in wheels (tests/layerimage.py): a one-package bump together with a code change
re-installs only that package's group, and every other layer keeps its diff ID, and an engine
that pulled the old image downloads none of the big groups' layers for the new one; no layer
rewrites another's files (listed from each layer's tar: no whiteout, no file in two layers,
no folder with two owners or modes); and nothing outside /app, /tmp and the home is writable by
the user the image runs as, nor is any installer's leftover shipped. On buildah, and on the
engine's BuildKit where it builds from an epoch (Engine 26 with the containerd store: the
case ``IMAGE_STORE=containerd scripts/test-debian13`` runs)."""

from __future__ import annotations

import contextlib
import re
import shutil
import uuid
from pathlib import Path
from typing import TYPE_CHECKING

import docker.errors
import pytest

from helpers import DATA, REGISTRY, MakeTag, registry_manifest, run_cli
from layerimage import (
    BUMPED,
    STANDINS,
    dist_infos,
    image_layers,
    overlaps,
    standin_lock,
    writable_by,
)
from reprobuild.backends import buildah
from reprobuild.backends.engine import Engine
from reprobuild.imaging.layers import plan_groups
from reprobuild.imaging.render import UID
from reprobuild.locks.lockfile import load_lock

if TYPE_CHECKING:
    from docker import DockerClient

pytestmark = [pytest.mark.engine, pytest.mark.registry]
ENV = {"SOURCE_DATE_EPOCH": "1700000000"}
# What an installer leaves behind, which no layer may ship.
LEFTOVERS = re.compile(r"(^|/)(\.lock|\.reprobuild[^/]*|uv_cache\.json)$")


def _builder(name: str) -> str:
    if name == "buildah" and not buildah.usable():  # scripts/setup installs it: never a skip
        pytest.fail("buildah is not usable here; run `scripts/setup`")
    if name == "buildkit":
        possible, why = Engine().buildkit_reproducible()
        if not possible:
            pytest.skip(f"the engine's BuildKit builds from no epoch here: {why}")
    return name


def _project(tmp_path: Path, nonce: str = "") -> Path:
    root = tmp_path / "layered"
    shutil.copytree(DATA / "projects" / "tiny", root)
    (root / "requirements.lock").write_text(standin_lock(tmp_path / "wheels", nonce=nonce))
    (root / "hello.py").write_text("import torch, threadpoolctl\nprint(threadpoolctl.V)\n")
    return root


def _build(root: Path, tag: str, builder: str, base_ref: str) -> str:
    proc = run_cli(
        "image", str(root), "--base", base_ref, "--builder", builder, "--tag", tag, env=ENV
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    return proc.stderr


def _installed(log: str) -> set[str]:
    """The packages a build's log says uv installed (`` + name==version``, after BuildKit's
    step number and time where BuildKit built)."""
    return set(re.findall(r"^(?:#\d+ [0-9.]+ )? \+ ([a-z0-9_.-]+)==", log, re.MULTILINE))


@pytest.mark.parametrize("builder", ["buildah", "buildkit"])
def test_a_bump_moves_only_its_own_group(
    builder: str, base_ref: str, tmp_path: Path, unique_tag: MakeTag, docker_client: DockerClient
) -> None:
    _builder(builder)
    # this run's own wheels: no earlier run's stages in the builder's cache (CI's engine is
    # not always empty), so each build's log shows what it installed
    nonce = uuid.uuid4().hex
    root = _project(tmp_path, nonce)
    first, second = unique_tag("layers"), unique_tag("layers")
    log = _build(root, first, builder, base_ref)
    before = list(image_layers(docker_client, first))
    assert len(_installed(log)) == len(STANDINS), log[-3000:]

    # the bump and a code change at once
    (root / "requirements.lock").write_text(
        standin_lock(tmp_path / "wheels", bumped=True, nonce=nonce)
    )
    (root / "hello.py").write_text((root / "hello.py").read_text() + "print('changed')\n")
    log = _build(root, second, builder, base_ref)
    after = list(image_layers(docker_client, second))

    groups = plan_groups(load_lock(root / "requirements.lock"))
    bumped = next(g for g in groups if BUMPED[0] in {r.name for r in g.requirements})
    assert len(groups) >= 5, [g.name for g in groups]  # torch, cuda-less buckets...
    assert {"torch"} <= {g.name for g in groups}
    # the layers of every group but the bumped one keep their diff IDs
    old = {layer.diff_id for layer in before}
    new = [layer for layer in after if layer.diff_id not in old]
    held = [dist_infos(layer) for layer in after if layer.diff_id in old]
    assert sum(1 for names in held if names) == len(groups) - 1, held
    package_layers = [layer for layer in new if dist_infos(layer)]
    assert len(package_layers) == 1, [sorted(dist_infos(layer)) for layer in new]
    assert dist_infos(package_layers[0]) == {r.name.replace("-", "_") for r in bumped.requirements}
    # besides it: the code's layer and the stamp's (manifest and SBOM), nothing else
    assert len(new) == 3, [sorted(m.name for m in layer.members)[:5] for layer in new]
    # only the bumped group was installed again (uv names each package it installs)
    assert _installed(log) == {r.name for r in bumped.requirements}, log[-3000:]
    ran = docker_client.containers.run(second, remove=True)
    assert ran.strip().splitlines()[-2:] == [b"3.6.0", b"changed"]
    assert f"{BUMPED[0]}=={BUMPED[1]}+standin" in log

    # A node that pulled the old image pulls the new one: the big groups' layers (torch's,
    # the big libraries' in place above it) are never downloaded again. The containerd store
    # downloads the new blobs at most; the classic store keys a layer by those below it, so it
    # downloads every layer from the lowest new one up: the small buckets', by the layers' order.
    big = [n for n, layer in enumerate(before) if dist_infos(layer) & {"torch", "sympy"}]
    assert len(big) == 2, [sorted(dist_infos(layer)) for layer in before]
    downloaded, blobs, held_blobs, statuses = _pulled_again(docker_client, first, second)
    if Engine().image_store()[1]:
        # the new blobs at most (a blob the engine's own build left in its content store, as
        # BuildKit's does, is not downloaded again)
        fresh = {n for n, d in enumerate(blobs) if d not in held_blobs}
        assert downloaded and downloaded <= fresh, (downloaded, fresh, statuses)
    else:
        lowest = min(n for n, layer in enumerate(after) if layer.diff_id not in old)
        assert downloaded == set(range(lowest, len(after))), (downloaded, lowest, statuses)
    assert not downloaded & set(big), (downloaded, big, statuses)


def _pulled_again(
    client: DockerClient, old: str, new: str
) -> tuple[set[int], list[str], set[str], dict[str, set[str]]]:
    """Push ``old`` and ``new`` (``reprobuild push``) to the loopback registry, remove both
    from the engine, pull ``old``, then pull ``new``: the indexes of ``new``'s layers the
    engine downloaded (by the short IDs its progress names them by), ``new``'s layer blobs
    and ``old``'s, and each ID's statuses."""
    repository = f"reprobuild-test/layers-pull-{uuid.uuid4().hex[:12]}"
    refs = {old: f"{REGISTRY}/{repository}:old", new: f"{REGISTRY}/{repository}:new"}
    for tag, ref in refs.items():
        proc = run_cli("push", tag, ref)
        assert proc.returncode == 0, proc.stderr[-3000:]
        client.images.remove(client.images.get(tag).id, force=True)  # every tag (push's too)
    statuses: dict[str, set[str]] = {}
    try:
        client.images.pull(refs[old])
        for line in client.api.pull(refs[new], stream=True, decode=True):
            assert "error" not in line, line
            statuses.setdefault(str(line.get("id")), set()).add(str(line.get("status")))
    finally:
        for ref in refs.values():
            with contextlib.suppress(docker.errors.ImageNotFound):
                client.images.remove(ref, force=True)
    blobs = _registry_layers(repository, "new")
    # a layer the engine holds is "Already exists" (the classic store) or not named at all
    # (the containerd store, for the layers below the first it lacks)
    got = {i for i, seen in statuses.items() if seen & {"Downloading", "Download complete"}}
    downloaded = {n for n, d in enumerate(blobs) if d.removeprefix("sha256:")[:12] in got}
    return downloaded, blobs, set(_registry_layers(repository, "old")), statuses


def _registry_layers(repository: str, reference: str) -> list[str]:
    return [str(layer["digest"]) for layer in registry_manifest(repository, reference)["layers"]]


@pytest.mark.parametrize("builder", ["buildah", "buildkit"])
def test_no_layer_rewrites_another_and_nothing_is_left_writable(
    builder: str, base_ref: str, tmp_path: Path, unique_tag: MakeTag, docker_client: DockerClient
) -> None:
    _builder(builder)
    root = _project(tmp_path)
    tag = unique_tag("layers")
    _build(root, tag, builder, base_ref)
    layers = list(image_layers(docker_client, tag))
    base = len(docker_client.images.get(base_ref).attrs["RootFS"]["Layers"])
    assert len(layers) <= 40, len(layers)
    assert overlaps(layers) == []
    ours = layers[base:]
    assert writable_by(ours, UID) == []
    shipped = [m.name for layer in ours for m in layer.members if LEFTOVERS.search(m.name)]
    assert shipped == []
    # the shared places hold each file once, in the layer of the group that ships it
    names = {m.name for layer in ours for m in layer.members}
    site = next(n for n in names if n.endswith("/site-packages"))
    for path in ("nvidia/__init__.py", "backports/__init__.py", "pthpkg-init.pth"):
        assert f"{site}/{path}" in names, path
    for script in ("torchrun", "isympy", "pthpkg"):
        assert f"opt/venv/bin/{script}" in names, script
    out = docker_client.containers.run(tag, ["torchrun"], entrypoint=[], remove=True)
    assert out.strip() == b"torch"
