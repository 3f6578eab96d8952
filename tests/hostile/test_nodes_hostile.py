"""Hostile inputs to the multi-node renderings (issue 13) that need a real image: the tiny
project's image (six and idna, no torch) asked for a torchrun job, and a CPU image asked for
a GPU job. Each: one ``error:`` line, no file, nothing else changed (hostile_harness)."""

from __future__ import annotations

import shutil
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING

import pytest

from helpers import DATA, build_json, run_cli
from hostile_harness import Snapshot, assert_clean_failure

if TYPE_CHECKING:
    from docker import DockerClient

pytestmark = [pytest.mark.engine, pytest.mark.registry]


@pytest.fixture(scope="module")
def tiny_image(base_ref: str, docker_client: DockerClient) -> Iterator[str]:
    tag = f"reprobuild-hostile/nodes-tiny:{uuid.uuid4().hex[:12]}"
    build_json(str(DATA / "projects" / "tiny"), "--base", base_ref, "--tag", tag)
    yield tag
    docker_client.images.remove(tag, force=True)


CASES = {
    "compose-no-torch": (["compose", "--nodes", "2"], "has no torch"),
    "compose-gpu-for-cpu-image": (
        ["compose", "--nodes", "2", "--gpu"],
        "is a CPU image but a GPU compose file was asked for",
    ),
    "k8s-no-torch": (["k8s", "--nodes", "2"], "has no torch"),
    "k8s-gpu-for-cpu-image": (
        ["k8s", "--nodes", "2", "--gpu"],
        "is a CPU image but a GPU Kubernetes job was asked for",
    ),
}


@pytest.mark.parametrize("name", sorted(CASES))
def test_hostile_nodes_image(name: str, tiny_image: str, tmp_path: Path) -> None:
    args, expected = CASES[name]
    root = tmp_path / "project"
    shutil.copytree(DATA / "projects" / "tiny", root)
    work = tmp_path / "work"
    work.mkdir()
    snap = Snapshot.take([root, work])
    command, *rest = args
    out = work / "job.yml"
    proc = run_cli(command, str(root), *rest, "--image", tiny_image, "-o", str(out), timeout=120)
    assert_clean_failure(proc, expected, exit_code=1)
    assert not out.exists()
    snap.assert_unchanged()
