"""One variant of a matrix built for real, the way .github/workflows/build-images.yml builds
it: `reprobuild matrix` names it and its tag, `reprobuild image --variant` builds exactly that
variant under that tag, and the image pushed to the (loopback) registry runs by digest and
carries the manifest `reprobuild inspect --json` uploads."""

from __future__ import annotations

import contextlib
import json
import re
import shutil
import subprocess
import uuid
from pathlib import Path
from typing import TYPE_CHECKING

import pytest
import yaml

from helpers import DATA, REGISTRY_PORT, image_labels, run_cli

if TYPE_CHECKING:
    from docker import DockerClient

pytestmark = [pytest.mark.engine, pytest.mark.registry]


def matrix_project(root: Path, base_ref: str) -> Path:
    """tiny, with two CPU variants: `py3.11-edge` on the loopback test base, and `six-only`
    on the catalog's python base, which cannot be pulled here: building the wrong variant
    fails, so the build proves --variant picked the right one."""
    shutil.copytree(DATA / "projects" / "matrix", root)
    data = yaml.safe_load((root / "reprobuild.yaml").read_text())
    data["name"] = f"reprobuild-test/matrix-{uuid.uuid4().hex[:8]}"
    data["matrix"] = [
        {"name": "six-only", "lock": "requirements-six.lock"},
        {"name": "py3.11-edge", "base": base_ref},
    ]
    (root / "reprobuild.yaml").write_text(yaml.safe_dump(data, sort_keys=False))
    return root


def test_variant_builds_under_the_matrix_tag_and_ships_by_digest(
    base_ref: str, tmp_path: Path, docker_client: DockerClient
) -> None:
    root = matrix_project(tmp_path / "proj", base_ref)
    listed = run_cli("matrix", str(root), "--format", "github")
    assert listed.returncode == 0, listed.stderr
    entries = {e["variant"]: e for e in json.loads(listed.stdout)["include"]}
    entry = entries["py3.11-edge"]
    name = yaml.safe_load((root / "reprobuild.yaml").read_text())["name"]
    assert re.fullmatch(re.escape(name) + r":py3\.11-edge-[0-9a-f]{12}", entry["tag"])

    pushed_ref = f"127.0.0.1:{REGISTRY_PORT}/{entry['tag']}"
    made = [entry["tag"], pushed_ref]
    try:
        # the default tag is the one the matrix printed
        built = run_cli("image", str(root), "--variant", "py3.11-edge", "--json", "-q")
        assert built.returncode == 0, built.stderr[-3000:]
        result = json.loads(built.stdout)
        assert result["image"] == entry["tag"]
        manifest = result["manifest"]
        assert manifest["variant"] == "cpu"
        assert manifest["lock_file"] == entry["lock"] == "requirements.lock"
        assert manifest["base_ref"] == base_ref
        labels = image_labels(docker_client, entry["tag"])
        assert labels["io.reprobuild.lock.sha256"] == manifest["lock_sha256"]
        assert entry["tag"].endswith("-" + manifest["lock_sha256"][:12])

        # the workflow's job: build with --tag REGISTRY/TAG, push, record the digest,
        # run from the digest, inspect it
        again = run_cli(
            "image", str(root), "--variant", "py3.11-edge", "--tag", pushed_ref, "--json", "-q"
        )
        assert again.returncode == 0, again.stderr[-3000:]
        assert json.loads(again.stdout)["manifest"] == manifest  # same inputs, same manifest
        push = subprocess.run(
            ["docker", "push", pushed_ref], capture_output=True, text=True, check=False
        )
        assert push.returncode == 0, push.stderr
        digests = docker_client.images.get(pushed_ref).attrs["RepoDigests"]
        by_digest = [d for d in digests if d.startswith(pushed_ref.rsplit(":", 1)[0] + "@sha256:")]
        assert len(by_digest) == 1, digests
        ran = docker_client.containers.run(
            by_digest[0], ["python", "-c", "import six; print(six.__version__)"], remove=True
        )
        assert ran.decode().strip() == "1.17.0"
        inspected = run_cli("inspect", by_digest[0], "--json")
        assert inspected.returncode == 0, inspected.stderr
        assert json.loads(inspected.stdout)["manifest"] == manifest
    finally:
        for tag in made:
            with contextlib.suppress(Exception):
                docker_client.images.remove(tag, force=True)
