"""A base with its own ENTRYPOINT (as NGC images have): reprobuild's entrypoint replaces it
and chains it, so what the base's script sets up still happens before the program runs."""

from __future__ import annotations

from collections.abc import Iterator
from typing import TYPE_CHECKING

import pytest

from helpers import MakeProject, MakeTag, build_json, published_image, tar_context

if TYPE_CHECKING:
    from docker import DockerClient

pytestmark = [pytest.mark.engine, pytest.mark.registry]
BASE_SCRIPT = b"""#!/bin/sh
# stand-in for a base image's entrypoint (e.g. /opt/nvidia/nvidia_entrypoint.sh)
export BASE_ENTRY_RAN=yes
exec "$@"
"""


@pytest.fixture(scope="module")
def base_with_entrypoint(base_ref: str, docker_client: DockerClient) -> Iterator[str]:
    dockerfile = (
        f"FROM {base_ref}\n"
        "COPY base-entry.sh /usr/local/bin/base-entry.sh\n"
        'ENTRYPOINT ["/usr/local/bin/base-entry.sh"]\n'
    ).encode()
    context = tar_context(
        {"Dockerfile": (dockerfile, 0o644), "base-entry.sh": (BASE_SCRIPT, 0o755)}
    )
    with published_image(docker_client, context, "base-with-entrypoint") as digest_ref:
        yield digest_ref


def test_base_entrypoint_is_chained(
    base_with_entrypoint: str,
    project: MakeProject,
    unique_tag: MakeTag,
    docker_client: DockerClient,
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


def test_catalog_free_base_without_entrypoint_chains_nothing(tiny_image_env: list[str]) -> None:
    assert not any(e.startswith("REPROBUILD_BASE_ENTRYPOINT=") for e in tiny_image_env)


@pytest.fixture
def tiny_image_env(
    base_ref: str, project: MakeProject, unique_tag: MakeTag, docker_client: DockerClient
) -> list[str]:
    tag = unique_tag("nochain")
    build_json(str(project("tiny")), "--base", base_ref, "--tag", tag)
    env: list[str] = docker_client.images.get(tag).attrs["Config"]["Env"]
    return env
