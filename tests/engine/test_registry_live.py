"""RegistryClient against the real loopback registry, with images pushed by a real engine.

Needs the registry at 127.0.0.1:${REPROBUILD_REGISTRY_PORT:-5000} and a Docker engine;
`scripts/setup` starts both. These tests fail, never skip, when either is missing.
"""

from __future__ import annotations

import gc
import hashlib
import io
import json
import os
import tarfile
import uuid
import warnings
from collections.abc import Iterator
from dataclasses import dataclass

import docker
import pytest
import requests
from docker.errors import DockerException

from reprobuild.bases.registry import (
    ACCEPT_MANIFESTS,
    DOCKER_MANIFEST,
    OCI_INDEX,
    OCI_MANIFEST,
    RegistryClient,
)
from reprobuild.errors import RegistryError

pytestmark = pytest.mark.registry

PORT = int(os.environ.get("REPROBUILD_REGISTRY_PORT", "5000"))
REGISTRY = f"127.0.0.1:{PORT}"
BASE_URL = f"http://{REGISTRY}"
REPO = "reprobuild-test/tiny"
START = "start the registry and the Docker engine with `scripts/setup`"


@pytest.fixture(scope="module")
def registry_up() -> str:
    """The loopback registry's host:port; fails the test when nothing answers there."""
    problem: str | None = None
    try:
        with requests.Session() as session, session.get(f"{BASE_URL}/v2/", timeout=5) as resp:
            if resp.status_code not in (200, 401):
                problem = f"{BASE_URL}/v2/ answered HTTP {resp.status_code}, not a registry"
    except requests.RequestException as exc:
        problem = f"no registry answers at {BASE_URL}/v2/ ({type(exc).__name__})"
    if problem is not None:  # outside the except: no chained traceback in the report
        pytest.fail(f"{problem}: {START}")
    return REGISTRY


@pytest.fixture(scope="module")
def engine() -> Iterator[docker.DockerClient]:
    problem: str | None = None
    try:
        client = docker.from_env()
        client.ping()
    except DockerException as exc:
        problem = f"no Docker engine answers ({type(exc).__name__})"
    if problem is not None:
        with warnings.catch_warnings():  # the SDK leaks the socket of its failed version probe
            warnings.simplefilter("ignore", ResourceWarning)
            gc.collect()
        pytest.fail(f"{problem}: {START}")
    try:
        yield client
    finally:
        client.close()


def _tiny_rootfs() -> bytes:
    """A tar holding one small file: the smallest image `docker import` accepts."""
    data = f"reprobuild registry test {uuid.uuid4()}\n".encode()
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w", format=tarfile.PAX_FORMAT) as tar:
        info = tarfile.TarInfo("hello.txt")
        info.size = len(data)
        info.mode = 0o644
        info.mtime = 0
        tar.addfile(info, io.BytesIO(data))
    return buf.getvalue()


@dataclass(frozen=True)
class Pushed:
    name: str  # host:port/repo:tag
    tag: str
    digest: str  # the manifest digest docker reports in RepoDigests


@pytest.fixture(scope="module")
def pushed(registry_up: str, engine: docker.DockerClient) -> Iterator[Pushed]:
    """A throwaway one-file image, imported locally, pushed, and removed locally after."""
    repository = f"{registry_up}/{REPO}"
    tag = uuid.uuid4().hex[:12]
    name = f"{repository}:{tag}"
    engine.api.import_image_from_data(_tiny_rootfs(), repository=repository, tag=tag)
    try:
        for line in engine.api.push(repository, tag=tag, stream=True, decode=True):
            if "error" in line:
                pytest.fail(f"docker push {name} failed: {line['error']}")
        image = engine.images.get(name)
        digests = [d for d in image.attrs.get("RepoDigests") or [] if d.startswith(repository)]
        assert len(digests) == 1, image.attrs.get("RepoDigests")
        yield Pushed(name, tag, digests[0].split("@", 1)[1])
    finally:
        engine.images.remove(name, force=True)


@pytest.fixture
def client() -> Iterator[RegistryClient]:
    with RegistryClient(timeout=10.0) as c:
        yield c


def test_resolve_pushed_image_matches_repo_digest(pushed: Pushed, client: RegistryClient) -> None:
    resolved = client.resolve(pushed.name)

    assert resolved.ref.digest == pushed.digest
    assert resolved.platform_digest == pushed.digest
    # Docker schema 2 from the graph-driver store; the containerd store pushes OCI manifests
    assert resolved.media_type in (DOCKER_MANIFEST, OCI_MANIFEST)
    assert resolved.platform == "linux/amd64"
    assert resolved.ref.by_digest() == f"{REGISTRY}/{REPO}@{pushed.digest}"
    config = client.image_config(resolved.ref)
    assert config["os"] == "linux"
    assert (
        resolved.config_digest
        == "sha256:"
        + hashlib.sha256(client.get_blob(resolved.ref, str(resolved.config_digest))).hexdigest()
    )


def test_resolve_by_digest_checks_it_exists(pushed: Pushed, client: RegistryClient) -> None:
    resolved = client.resolve(f"{REGISTRY}/{REPO}@{pushed.digest}")
    assert resolved.ref.digest == pushed.digest

    missing = "sha256:" + "0" * 64
    with pytest.raises(RegistryError, match="no such image/tag"):
        client.resolve(f"{REGISTRY}/{REPO}@{missing}")


def test_missing_tag_is_no_such_image(registry_up: str, client: RegistryClient) -> None:
    with pytest.raises(RegistryError) as err:
        client.resolve(f"{registry_up}/{REPO}:absent-{uuid.uuid4().hex[:8]}")
    assert "no such image/tag" in err.value.message
    assert "HTTP 404" in err.value.message


def test_resolve_multiarch_index_built_on_the_registry(
    pushed: Pushed, client: RegistryClient
) -> None:
    with requests.Session() as session:
        head = session.head(
            f"{BASE_URL}/v2/{REPO}/manifests/{pushed.digest}",
            headers={"Accept": ACCEPT_MANIFESTS},
            timeout=10,
        )
        head.close()
        assert head.status_code == 200
        entry = {
            "mediaType": head.headers["Content-Type"],
            "digest": pushed.digest,
            "size": int(head.headers["Content-Length"]),
            "platform": {"os": "linux", "architecture": "amd64"},
        }
        index = json.dumps(
            {"schemaVersion": 2, "mediaType": OCI_INDEX, "manifests": [entry]}
        ).encode()
        index_digest = "sha256:" + hashlib.sha256(index).hexdigest()
        index_tag = f"{pushed.tag}-index"
        put = session.put(
            f"{BASE_URL}/v2/{REPO}/manifests/{index_tag}",
            data=index,
            headers={"Content-Type": OCI_INDEX},
            timeout=10,
        )
        put.close()
        assert put.status_code == 201, put.text
        assert put.headers["Docker-Content-Digest"] == index_digest

    resolved = client.resolve(f"{REGISTRY}/{REPO}:{index_tag}")

    assert resolved.ref.digest == index_digest
    assert resolved.media_type == OCI_INDEX
    assert resolved.platform == "linux/amd64"
    assert resolved.platform_digest == pushed.digest

    with pytest.raises(RegistryError, match="available: linux/amd64"):
        client.resolve(f"{REGISTRY}/{REPO}:{index_tag}", platform="linux/arm64")


def test_an_index_put_by_the_client_is_pulled_by_its_digest(
    pushed: Pushed, client: RegistryClient, engine: docker.DockerClient
) -> None:
    """``image --platform A,B --push``'s last step for real: the OCI index of a pushed image
    (a Docker schema 2 manifest from the graph-driver store) put by ``put_manifest``. The
    registry takes it under the same digest, and the engine pulls the image through it."""
    from reprobuild.bases.refs import parse_ref
    from reprobuild.imaging.platformindex import index_document

    ref = parse_ref(f"{REGISTRY}/{REPO}")
    body, media_type, _ = client.get_manifest(ref, pushed.digest)
    platform = {"architecture": "amd64", "os": "linux"}
    index = index_document([(media_type, pushed.digest, len(body), platform)])
    tag = f"{pushed.tag}-put"
    digest = client.put_manifest(ref, tag, index, OCI_INDEX)
    assert digest == "sha256:" + hashlib.sha256(index).hexdigest()
    assert client.get_manifest(ref, tag) == (index, OCI_INDEX, digest)
    assert client.put_manifest(ref, tag, index, OCI_INDEX) == digest  # again: the same
    pulled = engine.images.pull(f"{REGISTRY}/{REPO}@{digest}")
    try:
        # the same image: its layers (the containerd store names an image by the digest it was
        # pulled by, the graph-driver store by its config)
        layers = engine.images.get(pushed.name).attrs["RootFS"]["Layers"]
        assert pulled.attrs["RootFS"]["Layers"] == layers
        assert f"{REGISTRY}/{REPO}@{digest}" in pulled.attrs["RepoDigests"]
    finally:
        engine.images.remove(f"{REGISTRY}/{REPO}@{digest}", force=True)


def test_a_manifest_the_registry_refuses_is_one_error(
    registry_up: str, client: RegistryClient
) -> None:
    from reprobuild.bases.refs import parse_ref

    missing = "sha256:" + "0" * 64
    index = json.dumps(
        {
            "schemaVersion": 2,
            "mediaType": OCI_INDEX,
            "manifests": [{"mediaType": OCI_MANIFEST, "digest": missing, "size": 10}],
        }
    ).encode()
    with pytest.raises(RegistryError) as err:
        client.put_manifest(parse_ref(f"{registry_up}/{REPO}"), "refused", index, OCI_INDEX)
    assert "HTTP 400" in err.value.message and "\n" not in err.value.message
