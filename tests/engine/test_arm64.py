"""arm64 images on an x86-64 machine (issue 53), built and run for real under qemu-user
(binfmt_misc, registered by scripts/setup-binfmt). One hashed lock for both machines
(tests/data/arm64-torch: torch 2.13.0+cpu on x86_64, PyPI's CPU torch 2.9.1 on aarch64, by
``platform_machine``) and a small unseeded torch program; the base is scripts/make-base's OCI
index of its amd64 and arm64 Debian bases, pinned by the index digest.
- ``image --platform linux/arm64``: the lock's markers read for aarch64, its wheels fetched for
  manylinux aarch64, the index's arm64 image used; the image's config says arm64, its manifest
  aarch64, the default tag ends in -arm64;
- the program sees aarch64 under emulation, ``verify`` finds two runs identical, and
  ``--mode off`` diverges (the script is unseeded);
- a single-platform base of another platform, a lock with no wheel for the platform: one
  ``error:`` line each, nothing tagged.
Heavy: torch's install and import under qemu take minutes on 2 cores (the first build fetches
torch's aarch64 wheel, about 100 MB, from PyPI; the arm64 base takes about 4 min once)."""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import subprocess
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import docker
import pytest
import requests
import yaml

from helpers import DATA, REGISTRY, run_cli

pytestmark = [pytest.mark.engine, pytest.mark.registry, pytest.mark.heavy, pytest.mark.emulated]

MAKE_BASE = Path(__file__).resolve().parents[2] / "scripts" / "make-base"
PROJECT = DATA / "arm64-torch"
PROGRAM = ("python", "train.py")
EMULATED_TIMEOUT_S = 1500


def make_base(arch: str) -> str:
    """scripts/make-base's bookworm base for ``arch`` (amd64, arm64, or multi: the index of
    both), pinned by digest (made once, then reused while the registry serves it)."""
    env = {**os.environ, "REPROBUILD_BASE_ARCH": arch}
    proc = subprocess.run(
        [str(MAKE_BASE)], env=env, capture_output=True, text=True, timeout=1500, check=False
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    return proc.stdout.strip().splitlines()[-1]


@pytest.fixture(scope="module")
def index_base() -> str:
    if not Path("/proc/sys/fs/binfmt_misc/qemu-aarch64").exists():
        pytest.fail("qemu-aarch64 is not registered with binfmt_misc: run scripts/setup")
    return make_base("multi")


@pytest.fixture(scope="module")
def arm_image(index_base: str, docker_client, tmp_path_factory) -> Iterator[dict[str, Any]]:  # type: ignore[no-untyped-def]
    project = tmp_path_factory.mktemp("arm64") / "arm64-torch"
    shutil.copytree(PROJECT, project)
    tag = f"reprobuild-test/arm64:{uuid.uuid4().hex[:12]}"
    started = time.monotonic()
    proc = run_cli(
        "image", "--json", str(project), "--base", index_base, "--platform", "linux/arm64",
        "--builder", "buildah", "--tag", tag, timeout=EMULATED_TIMEOUT_S,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr[-3000:]
    result: dict[str, Any] = json.loads(proc.stdout)
    result["seconds"] = time.monotonic() - started
    yield result
    docker_client.images.remove(tag, force=True)


def test_the_arm64_image_is_arm64(  # type: ignore[no-untyped-def]
    arm_image: dict[str, Any], index_base: str, docker_client
) -> None:
    attrs = docker_client.images.get(arm_image["image"]).attrs
    assert attrs["Architecture"] == "arm64" and attrs["Os"] == "linux"
    manifest = arm_image["manifest"]
    assert manifest["machine"] == "aarch64"
    held = {(d["name"], d["version"]) for d in manifest["distributions"]}
    assert ("torch", "2.9.1") in held  # the lock's aarch64 pin, not the x86_64 one
    assert not any(name == "setuptools" for name, _ in held)  # x86_64 only in the lock
    # the index's arm64 entry, by its own digest, not the index's
    assert manifest["base_digest"] != index_base.rsplit("@", 1)[1]
    assert manifest["base_ref"].endswith("@" + manifest["base_digest"])
    assert arm_image["image"].startswith("reprobuild-test/arm64:")


def verify(tmp_path: Path, *args: str) -> tuple[int, str, str, dict[str, Any]]:
    report = tmp_path / f"report-{uuid.uuid4().hex[:8]}.json"
    proc = run_cli(
        "verify", *args, "--report", str(report), "--", *PROGRAM,
        cwd=tmp_path, timeout=EMULATED_TIMEOUT_S,
    )  # fmt: skip
    data: dict[str, Any] = json.loads(report.read_text()) if report.exists() else {}
    return proc.returncode, proc.stdout, proc.stderr, data


def test_the_program_sees_aarch64_and_two_runs_are_identical(
    arm_image: dict[str, Any], tmp_path: Path
) -> None:
    code, out, err, report = verify(tmp_path, arm_image["image"])
    assert code == 0, out + err
    assert report["result"] == "identical"
    for run in report["runs"]:
        assert run["run_record"]["host"]["machine"] == "aarch64"
    assert out.startswith("identical: 2 runs of `python train.py`"), out
    assert ", linux/arm64 (emulated): " in out.splitlines()[0], out
    assert "[1] machine aarch64\n" in err  # the runs' own lines, as they come


def test_with_the_runtime_off_the_unseeded_program_diverges(
    arm_image: dict[str, Any], tmp_path: Path
) -> None:
    code, out, err, report = verify(tmp_path, arm_image["image"], "--mode", "off")
    assert code == 1, out + err
    assert report["result"] == "diverged"
    assert report["divergence"]["a"].startswith("step 0 loss ")


def tagged(docker_client, tag: str) -> bool:  # type: ignore[no-untyped-def]
    return any(tag in image.tags for image in docker_client.images.list())


def test_a_single_platform_base_of_another_platform_is_one_error(  # type: ignore[no-untyped-def]
    index_base: str, base_ref: str, docker_client, tmp_path: Path
) -> None:
    project = tmp_path / "arm64-torch"
    shutil.copytree(PROJECT, project)
    tag = f"reprobuild-test/arm64-bad:{uuid.uuid4().hex[:12]}"
    proc = run_cli(
        "image", str(project), "--base", base_ref, "--platform", "linux/arm64", "--tag", tag
    )
    assert proc.returncode == 1
    errors = [ln for ln in proc.stderr.splitlines() if ln.startswith("error:")]
    assert len(errors) == 1, proc.stderr
    assert "single-platform image for linux/amd64, not linux/arm64" in errors[0]
    assert base_ref in errors[0]
    assert not tagged(docker_client, tag)


def test_a_lock_with_no_wheel_for_the_platform_is_one_error_naming_it(  # type: ignore[no-untyped-def]
    index_base: str, docker_client, tmp_path: Path
) -> None:
    project = tmp_path / "x86-only"
    shutil.copytree(PROJECT, project)
    lock = (project / "requirements.lock").read_text()
    # torch's x86_64 pin for aarch64 too (the other pin's marker moved to s390x): no aarch64
    # wheel of torch 2.13.0+cpu exists
    (project / "requirements.lock").write_text(
        lock.replace(
            '+cpu ; platform_machine == "x86_64"', '+cpu ; platform_machine != "s390x"'
        ).replace('2.9.1 ; platform_machine == "aarch64"', '2.9.1 ; platform_machine == "s390x"')
    )
    tag = f"reprobuild-test/arm64-bad:{uuid.uuid4().hex[:12]}"
    proc = run_cli(
        "image", str(project), "--base", index_base, "--platform", "linux/arm64",
        "--builder", "buildah", "--tag", tag, timeout=EMULATED_TIMEOUT_S,
    )  # fmt: skip
    assert proc.returncode == 1
    errors = [ln for ln in proc.stderr.splitlines() if ln.startswith("error:")]
    assert len(errors) == 1, proc.stderr
    assert "requirements.lock:" in errors[0] and "torch==2.13.0+cpu has no wheel" in errors[0]
    assert "linux aarch64" in errors[0]
    assert not tagged(docker_client, tag)


def test_the_index_gives_each_platform_its_own_image(index_base: str, base_ref: str) -> None:
    from reprobuild.bases.refs import parse_pinned
    from reprobuild.errors import RegistryError
    from reprobuild.imaging.platforms import parse_platforms, platform_base

    amd, arm = parse_platforms("linux/amd64,linux/arm64")
    index = parse_pinned(index_base, what="--base")
    assert platform_base(index, arm).digest == make_base("arm64").rsplit("@", 1)[1]
    assert platform_base(index, amd).digest == base_ref.rsplit("@", 1)[1]
    with pytest.raises(RegistryError, match="single-platform image for linux/amd64"):
        platform_base(parse_pinned(base_ref, what="--base"), arm)


def test_both_platforms_under_one_index_digest(  # type: ignore[no-untyped-def]
    arm_image: dict[str, Any], index_base: str, docker_client, tmp_path: Path
) -> None:
    """``--platform linux/amd64,linux/arm64 --push``: each platform's image built as
    ``--platform P`` alone builds it (the arm64 one is arm_image's very image) and pushed as
    TAG-ARCH, then one OCI index of both at TAG. Again: the same index digest, and nothing
    sent. A node pulls its own platform's image through the index's digest."""
    project = tmp_path / "arm64-torch"
    shutil.copytree(PROJECT, project)
    stem = uuid.uuid4().hex[:12]
    name = f"{REGISTRY}/reprobuild-test/arm64-index"
    tag = f"reprobuild-test/arm64-index:{stem}"
    made = [tag, f"{tag}-arm64", f"{name}:{stem}-amd64", f"{name}:{stem}-arm64"]

    def build() -> dict[str, Any]:
        proc = run_cli(
            "image", "--json", str(project), "--base", index_base,
            "--platform", "linux/amd64,linux/arm64", "--push", f"{name}:{stem}", "--tag", tag,
            timeout=EMULATED_TIMEOUT_S,
        )  # fmt: skip
        assert proc.returncode == 0, proc.stderr[-3000:]
        result: dict[str, Any] = json.loads(proc.stdout)
        return result

    try:
        first = build()
        assert first["image"] == f"{name}@{first['digest']}"
        amd, arm = first["platforms"]
        assert (amd["platform"], arm["platform"]) == ("linux/amd64", "linux/arm64")
        assert arm["id"] == arm_image["id"]  # the image --platform linux/arm64 builds
        assert (amd["image"], arm["image"]) == (tag, f"{tag}-arm64")
        answer = requests.get(
            f"http://{REGISTRY}/v2/reprobuild-test/arm64-index/manifests/{stem}",
            headers={"Accept": "application/vnd.oci.image.index.v1+json"},
            timeout=30,
        )
        assert answer.status_code == 200, answer.text[:300]
        assert answer.headers["Docker-Content-Digest"] == first["digest"]
        entries = answer.json()["manifests"]
        assert [e["digest"] for e in entries] == [amd["digest"], arm["digest"]]
        assert [e["platform"]["architecture"] for e in entries] == ["amd64", "arm64"]

        second = build()
        assert second["digest"] == first["digest"]
        assert [p["push"]["sent_layers"] for p in second["platforms"]] == [0, 0]

        # a Kubernetes job of the index: named by its digest, no node selector (each node
        # pulls its own machine's image)
        proc = run_cli("k8s", str(project), "--nodes", "2", "--image", first["image"])
        assert proc.returncode == 0, proc.stderr[-2000:]
        job = next(d for d in yaml.safe_load_all(proc.stdout) if d and d["kind"] == "Job")
        pod = job["spec"]["template"]["spec"]
        assert {c["image"] for c in pod["containers"]} == {first["image"]}
        assert "nodeSelector" not in pod

        # verify takes the printed index reference: the image of it the engine holds, this
        # machine's (amd64 here)
        code, out, err, report = verify(tmp_path, first["image"])
        assert code == 0 and report["result"] == "identical", out + err
        assert "is an image index of linux/amd64, linux/arm64: verifying" in err
        assert {r["run_record"]["host"]["machine"] for r in report["runs"]} == {"x86_64"}

        for platform, arch in (("linux/arm64", "arm64"), ("linux/amd64", "amd64")):
            pulled = docker_client.images.pull(first["image"], platform=platform)
            assert pulled.attrs["Architecture"] == arch
            docker_client.images.remove(first["image"], force=True)
    finally:
        for ref in made:
            with contextlib.suppress(docker.errors.ImageNotFound):
                docker_client.images.remove(ref, force=True)


def test_both_platforms_on_a_base_without_arm64_is_one_error_before_any_build(  # type: ignore[no-untyped-def]
    base_ref: str, docker_client, tmp_path: Path
) -> None:
    project = tmp_path / "arm64-torch"
    shutil.copytree(PROJECT, project)
    stem = uuid.uuid4().hex[:12]
    tag = f"reprobuild-test/arm64-index-bad:{stem}"
    repository = f"reprobuild-test/arm64-index-bad-{stem}"  # this run's own: nothing in it yet
    push = f"{REGISTRY}/{repository}:v1"
    started = time.monotonic()
    proc = run_cli(
        "image", str(project), "--base", base_ref, "--platform", "linux/amd64,linux/arm64",
        "--push", push, "--tag", tag, timeout=EMULATED_TIMEOUT_S,
    )  # fmt: skip
    assert proc.returncode == 1
    errors = [ln for ln in proc.stderr.splitlines() if ln.startswith("error:")]
    assert len(errors) == 1, proc.stderr
    assert (
        "--platform linux/arm64" in errors[0]
        and "single-platform image for linux/amd64" in errors[0]
    )
    assert time.monotonic() - started < 120  # refused before the amd64 image was built
    assert not tagged(docker_client, tag) and not tagged(docker_client, f"{push}-amd64")
    answer = requests.get(f"http://{REGISTRY}/v2/{repository}/tags/list", timeout=30)
    assert answer.status_code == 404  # nothing pushed: the repository does not exist


def test_an_arm64_base_without_platform_builds_the_arm64_image(  # type: ignore[no-untyped-def]
    arm_image: dict[str, Any], docker_client, tmp_path: Path
) -> None:
    """No --platform, and the base is a single-platform arm64 image (what `init --base` of
    one writes): the build is for arm64, as --platform linux/arm64 builds it (the same image
    as from the index's arm64 entry), and it says so in one note."""
    project = tmp_path / "arm64-torch"
    shutil.copytree(PROJECT, project)
    tag = f"reprobuild-test/arm64-inferred:{uuid.uuid4().hex[:12]}"
    proc = run_cli(
        "image", "--json", str(project), "--base", make_base("arm64"), "--tag", tag,
        timeout=EMULATED_TIMEOUT_S,
    )  # fmt: skip
    try:
        assert proc.returncode == 0, proc.stderr[-3000:]
        assert "note: the base is a linux/arm64 image: building for linux/arm64" in proc.stderr
        result = json.loads(proc.stdout)
        assert result["manifest"]["machine"] == "aarch64"
        assert result["id"] == arm_image["id"]
        assert docker_client.images.get(tag).attrs["Architecture"] == "arm64"
    finally:
        with contextlib.suppress(docker.errors.ImageNotFound):
            docker_client.images.remove(tag, force=True)
