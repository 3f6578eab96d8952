"""Shared fixtures. Engine and registry fixtures FAIL (never skip) when what they need is
missing: a test that quietly skips because no engine is up proves nothing. `scripts/setup`
starts the engine and the loopback registry and publishes the test base image."""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import subprocess
import sys
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

DATA = Path(__file__).parent / "data"
REPO = Path(__file__).parent.parent
REGISTRY_PORT = os.environ.get("REPROBUILD_REGISTRY_PORT", "5000")
STATE_DIR = Path(os.environ.get("REPROBUILD_STATE_DIR", "/var/lib/reprobuild-dev"))


def run_cli(
    *args: str, cwd: Path | None = None, env: dict[str, str] | None = None, timeout: float = 900
) -> subprocess.CompletedProcess[str]:
    """Run the installed ``reprobuild`` exactly as a user would, in a child process."""
    full_env = {**os.environ, "SOURCE_DATE_EPOCH": "0", **(env or {})}
    return subprocess.run(
        [sys.executable, "-m", "reprobuild", *args],
        capture_output=True,
        text=True,
        cwd=cwd,
        env=full_env,
        timeout=timeout,
        check=False,
    )


@pytest.fixture(scope="session")
def docker_client():  # type: ignore[no-untyped-def]
    import docker

    try:
        client = docker.from_env()
        client.ping()
    except Exception as exc:
        pytest.fail(f"no Docker engine answers ({exc}); start one with `scripts/setup`")
    yield client
    client.close()


@pytest.fixture(scope="session")
def base_ref(docker_client) -> str:  # type: ignore[no-untyped-def]
    """The test base, pinned by digest in the loopback registry. The local copy is deleted
    first, so the first build must pull it by digest from the registry for real."""
    ref = os.environ.get("REPROBUILD_TEST_BASE")
    state = STATE_DIR / "base-cpu.ref"
    if not ref:
        if not state.is_file():
            pytest.fail(f"no test base image recorded in {state}; run `scripts/setup`")
        ref = state.read_text().strip()
    import requests

    name, digest = ref.split("@")
    registry, repo = name.split("/", 1)
    try:
        answer = requests.head(
            f"http://{registry}/v2/{repo}/manifests/{digest}",
            headers={
                "Accept": "application/vnd.docker.distribution.manifest.v2+json, "
                "application/vnd.oci.image.manifest.v1+json"
            },
            timeout=10,
        )
    except requests.RequestException as exc:
        pytest.fail(f"loopback registry {registry} is not answering ({exc}); run `scripts/setup`")
    if answer.status_code != 200:
        pytest.fail(
            f"{ref} is not in the loopback registry (HTTP {answer.status_code}); "
            "run `scripts/setup`"
        )
    import docker.errors

    try:
        image = docker_client.images.get(ref)
        docker_client.images.remove(image.id, force=True)
    except docker.errors.ImageNotFound:
        pass
    except docker.errors.APIError:
        pass  # still used by a container; the pull path is then covered by test_base_pull
    return ref


@pytest.fixture
def project(tmp_path: Path) -> Callable[[str], Path]:
    """Copy a project from tests/data/projects into a temp dir and return its path."""

    def copy(name: str) -> Path:
        dest = tmp_path / name
        shutil.copytree(DATA / "projects" / name, dest)
        return dest

    return copy


@pytest.fixture
def unique_tag(docker_client) -> Iterator[Callable[[str], str]]:  # type: ignore[no-untyped-def]
    """Make throwaway image tags; every image tagged with one is removed afterwards."""
    made: list[str] = []

    def make(stem: str = "img") -> str:
        tag = f"reprobuild-test/{stem}:{uuid.uuid4().hex[:12]}"
        made.append(tag)
        return tag

    yield make
    for tag in made:
        with contextlib.suppress(Exception):  # clean-up is best effort
            docker_client.images.remove(tag, force=True)


def image_labels(docker_client, tag: str) -> dict[str, str]:  # type: ignore[no-untyped-def]
    return dict(docker_client.images.get(tag).attrs["Config"]["Labels"] or {})


def build_json(*args: str, **kw: object) -> dict[str, object]:
    proc = run_cli("image", "--json", *args, **kw)  # type: ignore[arg-type]
    assert proc.returncode == 0, proc.stderr[-3000:]
    data: dict[str, object] = json.loads(proc.stdout)
    return data
