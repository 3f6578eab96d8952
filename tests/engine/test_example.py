"""The quickstart's example, for real: images/digits-torch (torch 2.13 CPU, numpy,
scikit-learn) built on the digest-pinned base and trained in a container."""

from __future__ import annotations

import hashlib
import uuid
from collections.abc import Iterator
from typing import TYPE_CHECKING, Any

import pytest

from helpers import REPO, build_json

if TYPE_CHECKING:
    from docker import DockerClient

pytestmark = [pytest.mark.engine, pytest.mark.registry, pytest.mark.heavy]
EXAMPLE = REPO / "images" / "digits-torch"


@pytest.fixture(scope="module")
def example_image(
    base_ref: str, docker_client: DockerClient
) -> Iterator[tuple[str, dict[str, Any]]]:
    tag = f"reprobuild-test/digits-torch:{uuid.uuid4().hex[:12]}"
    result = build_json(str(EXAMPLE), "--base", base_ref, "--tag", tag)
    yield tag, result
    docker_client.images.remove(tag, force=True)


def _train(docker_client: DockerClient, tag: str, **kw: Any) -> str:
    out: bytes = docker_client.containers.run(tag, remove=True, network_disabled=True, **kw)
    return out.decode()


def test_example_manifest_names_the_stack(example_image: tuple[str, dict[str, Any]]) -> None:
    _tag, result = example_image
    manifest = result["manifest"]
    dists = {d["name"]: d["version"] for d in manifest["distributions"]}
    assert dists["torch"] == "2.13.0+cpu"
    assert dists["numpy"] == "2.4.6"
    assert "scikit-learn" in dists
    lock = (EXAMPLE / "requirements.lock").read_bytes()
    assert manifest["lock_sha256"] == hashlib.sha256(lock).hexdigest()
    assert manifest["python_version"].startswith("3.11.")


def test_example_trains_in_the_image(
    example_image: tuple[str, dict[str, Any]], docker_client: DockerClient
) -> None:
    tag, _ = example_image
    lines = _train(docker_client, tag).strip().splitlines()
    assert len(lines) == 16
    assert lines[0].startswith("epoch  1 val_loss ")
    final = float(lines[-1].split()[2])
    assert 0.0 < final < 1.0  # it learned: 10 classes start near ln(10) = 2.3
