"""The engine's BuildKit (``--builder buildkit``), engine by engine (issue 29). BuildKit can
give the same image for the same inputs only with 0.13's ``rewrite-timestamp`` (file times in
new layers clamped to SOURCE_DATE_EPOCH), which needs Engine 26 with the containerd image
store (Engine.buildkit_reproducible says, measured on 26.1.5 with buildx 0.13.1). Where the
engine can, the build is reproducible: two ``--no-cache`` builds and one under a clock 40 days
on give one image ID, the manifest says ``reproducible: true``, and the image pushed under two
tags has one registry digest (``IMAGE_STORE=containerd scripts/test-debian13`` runs this case).
Where it cannot (Engine 20.10 on Debian 12; Engine 26 with its default graph-driver store on
Debian 13, plain ``scripts/test-debian13``), the manifest says ``reproducible: false`` with
the reason, and two builds do differ, so the label is not merely cautious. Either way the
builder is really run: Debian 13 has no Docker CLI older than 23, and ``buildkit`` goes
through ``docker buildx build --builder default``."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import uuid
from pathlib import Path
from typing import TYPE_CHECKING

import pytest

from helpers import REGISTRY, MakeProject, MakeTag, build_json, registry_digest, run_cli
from reprobuild.backends.engine import Engine

if TYPE_CHECKING:
    from docker import DockerClient

pytestmark = [pytest.mark.engine, pytest.mark.registry]
ENV = {"SOURCE_DATE_EPOCH": "1700000000"}


def test_buildkit_is_reproducible_exactly_where_the_engine_allows(
    base_ref: str, project: MakeProject, unique_tag: MakeTag, docker_client: DockerClient
) -> None:
    possible, why = Engine().buildkit_reproducible()
    print(f"engine BuildKit reproducible: {possible} ({why})")
    root = str(project("tiny"))
    tags = [unique_tag("buildkit"), unique_tag("buildkit")]
    first, second = (
        build_json(root, "--base", base_ref, "--builder", "buildkit", "--no-cache", "--tag", tag,
                   env=ENV)
        for tag in tags
    )  # fmt: skip
    ids = [first["id"], second["id"]]
    assert {docker_client.images.get(t).id for t in tags} == set(ids)
    build = first["manifest"]["build"]
    assert build["builder"] == "buildkit"
    assert build["builder_version"] == docker_client.version()["Version"]
    if not possible:
        assert build["reproducible"] is False, why
        assert why.startswith(f"Engine {build['builder_version']} "), why
        print("image IDs:", ids)
        assert ids[0] != ids[1], f"one image ID twice, yet {why}: is the engine now able to?"
        return
    # The stack can: the same image on any day, and the manifest says so.
    later_tag = unique_tag("buildkit")
    later = subprocess.run(
        ["faketime", "-f", "+40d", sys.executable, "-m", "reprobuild", "image", "--json", root,
         "--base", base_ref, "--builder", "buildkit", "--no-cache", "--tag", later_tag],
        capture_output=True, text=True, env={**os.environ, **ENV}, check=False, timeout=900,
    )  # fmt: skip
    assert later.returncode == 0, later.stderr[-3000:]
    ids.append(json.loads(later.stdout)["id"])
    assert build["reproducible"] is True, f"{why}, but the manifest says not reproducible"
    print("image IDs:", ids)
    assert len(set(ids)) == 1, ids
    # The first build and the one 40 days on, pushed under two tags: one registry digest.
    pushed = [f"{REGISTRY}/reprobuild-test/bk-{uuid.uuid4().hex[:12]}:{n}" for n in ("one", "two")]
    try:
        for source, ref in zip((tags[0], later_tag), pushed, strict=True):
            docker_client.images.get(source).tag(ref)
            out = subprocess.run(["docker", "push", ref], capture_output=True, text=True)
            assert out.returncode == 0, out.stderr[-2000:]
        digests = [registry_digest(ref) for ref in pushed]
    finally:
        for ref in pushed:
            subprocess.run(["docker", "rmi", ref], capture_output=True, check=False)
    print("registry digests:", digests)
    assert digests[0] == digests[1], digests
    # The rebuild check rebuilds it with the engine's BuildKit: the same image; one byte of
    # app code changed: it differs, and the table names that file (from `docker save` of the
    # containerd store's images).
    same = run_cli("rebuild", tags[0], root, "--json", env=ENV)
    assert same.returncode == 0, same.stderr[-3000:]
    report = json.loads(same.stdout)
    assert report["match"] is True and report["recorded_id"] == report["rebuilt_id"] == ids[0]
    hello = Path(root, "hello.py")
    hello.write_bytes(hello.read_bytes().replace(b"print(", b"print ("))
    differ = run_cli("rebuild", tags[0], root, "-q", env=ENV)
    assert differ.returncode == 1, differ.stderr[-3000:]
    print(differ.stdout)
    assert "  - app/hello.py " in differ.stdout and "  + app/hello.py " in differ.stdout


def test_auto_picks_the_fastest_reproducible_builder_and_says_why(
    base_ref: str, project: MakeProject, unique_tag: MakeTag, docker_client: DockerClient
) -> None:
    """Issue 29: --builder auto takes buildah (installed by setup-engine on every test machine),
    the faster reproducible builder even where the engine's BuildKit is reproducible too
    (Engine 26, containerd store; docs: Benchmarks); the build log says why not BuildKit, in
    words that depend on whether it could have been."""
    possible, why = Engine().buildkit_reproducible()
    tag = unique_tag("auto")
    proc = run_cli("image", str(project("tiny")), "--base", base_ref, "--tag", tag, env=ENV)
    assert proc.returncode == 0, proc.stderr[-3000:]
    labels = docker_client.images.get(tag).labels
    lines = proc.stderr.splitlines()
    assert labels["io.reprobuild.build.builder"] == "buildah"
    assert labels["io.reprobuild.build.reproducible"] == "true"
    assert "builder: buildah (auto: reproducible, the same inputs give the same image ID)" in lines
    if possible:
        why_not = (
            "builder: not the engine's BuildKit, though reproducible here too: buildah builds "
            "the same inputs faster (docs: Benchmarks, Engine 26)"
        )
    else:
        why_not = f"builder: not the engine's BuildKit, though faster: {why}"
    assert why_not in lines, proc.stderr[-3000:]
