"""A base with its own ENTRYPOINT (as NGC images have): reprobuild's entrypoint replaces it
and chains it, so what the base's script sets up still happens before the program runs."""

from __future__ import annotations

import io
import tarfile
import uuid

import pytest

from conftest import REGISTRY_PORT, build_json

pytestmark = [pytest.mark.engine, pytest.mark.registry]
BASE_SCRIPT = b"""#!/bin/sh
# stand-in for a base image's entrypoint (e.g. /opt/nvidia/nvidia_entrypoint.sh)
export BASE_ENTRY_RAN=yes
exec "$@"
"""


@pytest.fixture(scope="module")
def base_with_entrypoint(base_ref, docker_client):  # type: ignore[no-untyped-def]
    dockerfile = (
        f"FROM {base_ref}\n"
        "COPY base-entry.sh /usr/local/bin/base-entry.sh\n"
        'ENTRYPOINT ["/usr/local/bin/base-entry.sh"]\n'
    ).encode()
    context = io.BytesIO()
    with tarfile.open(fileobj=context, mode="w") as tar:
        for name, data, mode in (
            ("Dockerfile", dockerfile, 0o644),
            ("base-entry.sh", BASE_SCRIPT, 0o755),
        ):
            info = tarfile.TarInfo(name)
            info.size, info.mode = len(data), mode
            tar.addfile(info, io.BytesIO(data))
    repo = f"127.0.0.1:{REGISTRY_PORT}/reprobuild-test/base-with-entrypoint"
    tag = uuid.uuid4().hex[:12]
    context.seek(0)
    docker_client.images.build(fileobj=context, custom_context=True, tag=f"{repo}:{tag}", rm=True)
    docker_client.images.push(repo, tag=tag)
    digest_ref = docker_client.images.get(f"{repo}:{tag}").attrs["RepoDigests"][0]
    yield digest_ref
    # Untag only: images built on it keep it as a parent (build cache), so it cannot go by ID.
    for ref in (f"{repo}:{tag}", digest_ref):
        docker_client.images.remove(ref)


def test_base_entrypoint_is_chained(
    base_with_entrypoint,
    project,
    unique_tag,  # type: ignore[no-untyped-def]
    docker_client,
) -> None:
    tag = unique_tag("chained")
    build_json(str(project("tiny")), "--base", base_with_entrypoint, "--tag", tag)
    env = docker_client.images.get(tag).attrs["Config"]["Env"]
    assert 'REPROBUILD_BASE_ENTRYPOINT=["/usr/local/bin/base-entry.sh"]' in env
    out = docker_client.containers.run(
        tag,
        [
            "python",
            "-c",
            "import os, sys; print(os.environ.get('BASE_ENTRY_RAN'), sys.argv[1:])",
            "x y",
        ],
        remove=True,
        network_disabled=True,
        environment={"REPRO_QUIET": "1"},
    ).decode()
    assert out.strip() == "yes ['x y']"


def test_catalog_free_base_without_entrypoint_chains_nothing(tiny_image_env) -> None:  # type: ignore[no-untyped-def]
    assert not any(e.startswith("REPROBUILD_BASE_ENTRYPOINT=") for e in tiny_image_env)


@pytest.fixture
def tiny_image_env(base_ref, project, unique_tag, docker_client):  # type: ignore[no-untyped-def]
    tag = unique_tag("nochain")
    build_json(str(project("tiny")), "--base", base_ref, "--tag", tag)
    return docker_client.images.get(tag).attrs["Config"]["Env"]
