"""The SBOM of real images, built with buildah on the test base: valid CycloneDX 1.6, the same
bytes when the same inputs are built again, a lock change seen as a changed component, and
Debian package versions as dpkg itself reports them in the image."""

from __future__ import annotations

import contextlib
import hashlib
import json
import shutil
import subprocess
import sys
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Any

import docker.errors
import pytest
from cyclonedx.schema import SchemaVersion
from cyclonedx.validation.json import JsonStrictValidator

from helpers import DATA, build_json, run_cli
from reprobuild.backends.engine import Engine
from reprobuild.checks.sbom import read_sbom

if TYPE_CHECKING:
    from docker import DockerClient

pytestmark = [pytest.mark.engine, pytest.mark.registry]
ENV = {"SOURCE_DATE_EPOCH": "1700000000"}
SIX_ONLY_LOCK = """\
six==1.17.0 \\
    --hash=sha256:4721f391ed90541fddacab5acf947aa0d3dc7d27b2e1e8eda2be8970586c3274 \\
    --hash=sha256:ff70335d468e7eb6ec65b95b99d3a2836546063f63acc5171de367e834932a81
"""


@pytest.fixture(scope="module")
def built(
    base_ref: str, tmp_path_factory: pytest.TempPathFactory, docker_client: DockerClient
) -> Iterator[dict[str, Any]]:
    """One buildah build of the tiny project, shared by the read-only checks below."""
    root = tmp_path_factory.mktemp("sbom") / "tiny"
    shutil.copytree(DATA / "projects" / "tiny", root)
    tag = f"reprobuild-test/sbom:{uuid.uuid4().hex[:12]}"
    try:
        args = ("--base", base_ref, "--builder", "buildah", "--tag", tag, "-q")
        result = build_json(str(root), *args, env=ENV)
        sbom = read_sbom(Engine(), tag)
        yield {"root": root, "tag": tag, "result": result, "sbom": sbom, "base": base_ref}
    finally:
        with contextlib.suppress(docker.errors.ImageNotFound):
            docker_client.images.remove(tag, force=True)


def _components(raw: bytes) -> dict[str, dict[str, Any]]:
    return {c["bom-ref"]: c for c in json.loads(raw)["components"]}


def _in_image(docker_client: DockerClient, image: str, *argv: str) -> str:
    out: bytes = docker_client.containers.run(
        image, list(argv[1:]), entrypoint=[argv[0]], remove=True, network_disabled=True
    )
    return out.decode()


def test_the_image_carries_a_valid_sbom_the_manifest_records(
    built: dict[str, Any], docker_client: DockerClient
) -> None:
    raw: bytes = built["sbom"]
    assert JsonStrictValidator(SchemaVersion.V1_6).validate_str(raw.decode()) is None
    manifest = built["result"]["manifest"]
    assert manifest["sbom_sha256"] == hashlib.sha256(raw).hexdigest()
    # the file in the image is these bytes (read by the image's own cat, not the engine's API)
    assert _in_image(docker_client, built["tag"], "cat", "/opt/reprobuild/sbom.cdx.json") == (
        raw.decode()
    )
    data = json.loads(raw)
    assert data["metadata"]["timestamp"] == "2023-11-14T22:13:20+00:00"
    found = _components(raw)
    assert found["base"]["version"] == manifest["base_digest"]
    for dist in manifest["distributions"]:
        ref = f"pkg:pypi/{dist['name']}@{dist['version']}"
        assert found[ref]["hashes"], ref
    assert "reprobuild-runtime" in found


def test_debian_versions_are_what_dpkg_says_in_the_image(
    built: dict[str, Any], docker_client: DockerClient
) -> None:
    debs = {
        c["name"]: c["version"]
        for c in _components(built["sbom"]).values()
        if c.get("purl", "").startswith("pkg:deb/")
    }
    assert len(debs) > 50, sorted(debs)
    for name in ("bash", "libc6", "python3", next(iter(sorted(debs)))):
        status = _in_image(docker_client, built["tag"], "dpkg", "-s", name)
        (version,) = [
            line.split(":", 1)[1].strip()
            for line in status.splitlines()
            if line.startswith("Version:")
        ]
        assert debs[name] == version, name
    listed = _in_image(docker_client, built["tag"], "dpkg-query", "-W", "-f", "${Package}\n")
    assert set(debs) == set(listed.split())


def test_the_same_inputs_rebuilt_give_the_same_sbom(built: dict[str, Any]) -> None:
    """`reprobuild rebuild` builds the recorded inputs again (no cache) and compares the
    SBOMs by the manifests' sha256: equal sha256, equal bytes."""
    proc = run_cli("rebuild", built["tag"], str(built["root"]), "--json", env=ENV)
    assert proc.returncode == 0, proc.stderr[-3000:]
    report = json.loads(proc.stdout)
    assert report["match"] is True
    want = hashlib.sha256(built["sbom"]).hexdigest()
    assert report["sbom_recorded"] == report["sbom_rebuilt"] == want


def test_a_lock_change_is_a_changed_component(
    built: dict[str, Any], base_ref: str, unique_tag: Any, tmp_path: Path
) -> None:
    six = tmp_path / "tiny-six"
    shutil.copytree(built["root"], six)
    (six / "requirements.lock").write_text(SIX_ONLY_LOCK)
    (six / "requirements.in").write_text("six==1.17.0\n")
    tag = unique_tag("sbom-six")
    build_json(str(six), "--base", base_ref, "--builder", "buildah", "--tag", tag, "-q", env=ENV)
    before, after = _components(built["sbom"]), _components(read_sbom(Engine(), tag))
    assert set(before) - set(after) == {"pkg:pypi/idna@3.10"}
    assert set(after) == set(before) - {"pkg:pypi/idna@3.10"}
    assert before["pkg:pypi/six@1.17.0"] == after["pkg:pypi/six@1.17.0"]


def test_sbom_command_prints_and_writes_it(built: dict[str, Any], tmp_path: Path) -> None:
    proc = subprocess.run(
        [sys.executable, "-m", "reprobuild", "sbom", built["tag"]], capture_output=True, check=False
    )
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout == built["sbom"]
    out = tmp_path / "image.cdx.json"
    for _ in range(2):  # the second replaces the SBOM the first wrote
        proc_o = run_cli("sbom", built["tag"], "-o", str(out))
        assert proc_o.returncode == 0, proc_o.stderr
        assert proc_o.stdout == f"{out}\n"
        assert out.read_bytes() == built["sbom"]
    source = tmp_path / "train.py"
    source.write_text("print('mine')\n")
    proc_o = run_cli("sbom", built["tag"], "-o", str(source))
    assert proc_o.returncode == 1
    assert proc_o.stderr.startswith("error: -o ") and "is not a CycloneDX SBOM" in proc_o.stderr
    assert source.read_text() == "print('mine')\n"


def test_sbom_command_bad_images_are_one_error_line(
    built: dict[str, Any], unique_tag: Any, docker_client: DockerClient, tmp_path: Path
) -> None:
    """No such image; an image reprobuild did not build; a reprobuild image from before the
    SBOM (its manifest without sbom_sha256, under a matching label): one error line each."""
    manifest = dict(built["result"]["manifest"])
    del manifest["sbom_sha256"]
    raw = (json.dumps(manifest, sort_keys=True, indent=2) + "\n").encode()
    (tmp_path / "manifest.json").write_bytes(raw)
    (tmp_path / "Dockerfile").write_text(
        f"FROM {built['tag']}\nCOPY manifest.json /opt/reprobuild/manifest.json\n"
        f"LABEL io.reprobuild.manifest.sha256={hashlib.sha256(raw).hexdigest()}\n"
    )
    old = unique_tag("sbom-old")
    docker_client.images.build(path=str(tmp_path), tag=old, rm=True)
    foreign = unique_tag("sbom-foreign")
    (tmp_path / "Dockerfile").write_text(f"FROM {built['base']}\n")
    docker_client.images.build(path=str(tmp_path), tag=foreign, rm=True)
    cases = {
        "reprobuild-test/no-such-image:0": "no image 'reprobuild-test/no-such-image:0'",
        foreign: "was not built by reprobuild",
        old: "carries no SBOM (built by reprobuild 0.1.0, before images had one)",
    }
    for image, said in cases.items():
        out = tmp_path / "out.json"
        proc = run_cli("sbom", image, "-o", str(out))
        assert proc.returncode == 1, (image, proc.stderr)
        assert proc.stderr.startswith("error: ") and said in proc.stderr, proc.stderr
        assert len([line for line in proc.stderr.splitlines() if line.startswith("error")]) == 1
        assert proc.stdout == "" and not out.exists()
