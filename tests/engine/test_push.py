"""``reprobuild push IMAGE REF`` for real: the tiny project's image pushed to the loopback
registry through the engine. The first push sends the project's layers (the base's are
mounted from the repository the base was pulled from), a second push of the same image sends
nothing, and after a code-only change only the app's layer and the stamp's move; the bytes
named are the pushed manifest's own sizes. Then `compose` pins the image by the pushed digest.
A registry nobody answers on is one error line, and the tag the push made is gone again."""

from __future__ import annotations

import json
import shutil
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest
import yaml

from helpers import DATA, REGISTRY, build_json, registry_manifest, run_cli

if TYPE_CHECKING:
    from docker import DockerClient

pytestmark = [pytest.mark.engine, pytest.mark.registry]


def _push(image: str, ref: str) -> dict[str, Any]:
    proc = run_cli("push", image, ref, "--json")
    assert proc.returncode == 0, proc.stderr[-3000:]
    report: dict[str, Any] = json.loads(proc.stdout)
    return report


@pytest.fixture(scope="module")
def tiny(
    base_ref: str, docker_client: DockerClient, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[tuple[Path, str, str]]:
    """The tiny project, built once: its folder, tag and image ID (removed at the end)."""
    project = tmp_path_factory.mktemp("push") / "tiny"
    shutil.copytree(DATA / "projects" / "tiny", project)
    tag = f"reprobuild-test/push:{uuid.uuid4().hex[:12]}"
    built = build_json(str(project), "--base", base_ref, "--tag", tag, "-q")
    yield project, tag, str(built["id"])
    docker_client.images.remove(tag, force=True)


def test_push_sends_only_what_the_registry_lacks_and_compose_pins_the_digest(
    tiny: tuple[Path, str, str], base_ref: str, docker_client: DockerClient, tmp_path: Path,
    unique_tag: Any,
) -> None:  # fmt: skip
    built_from, first_tag, first_id = tiny
    project = tmp_path / "tiny"  # a copy: its code changes below
    shutil.copytree(built_from, project)
    second_tag = unique_tag("push")
    repository = f"reprobuild-test/push-{uuid.uuid4().hex[:10]}"
    target = f"{REGISTRY}/{repository}"
    digest = ""
    try:
        proc = run_cli("push", first_tag, f"{target}:v1")
        assert proc.returncode == 0, proc.stderr[-3000:]
        digest = proc.stdout.strip().rpartition("@")[2]
        assert proc.stdout == f"{target}@{digest}\n"
        summary = proc.stderr.strip().splitlines()[-1]
        assert summary.startswith(f"pushed {target}@{digest}: "), proc.stderr
        manifest = registry_manifest(repository, digest)
        sizes = [layer["size"] for layer in manifest["layers"]]
        layers = docker_client.images.get(first_id).attrs["RootFS"]["Layers"]
        assert len(sizes) == len(layers)

        again = _push(first_tag, f"{target}:v1")
        assert again["digest"] == digest and again["reference"] == f"{target}@{digest}"
        assert (again["sent_layers"], again["sent_bytes"]) == (0, 0), again
        assert again["present_bytes"] == sum(sizes)

        # the engine now knows the image by the pushed digest: compose pins it by that
        out = tmp_path / "compose.yml"
        proc = run_cli("compose", str(project), "--image", first_tag, "-o", str(out))
        assert proc.returncode == 0, proc.stderr
        images = {s["image"] for s in yaml.safe_load(out.read_text())["services"].values()}
        # by the pushed digest: this push's repository, or one an earlier run pushed the very
        # same image to (the engine keeps that repository digest while the image lives)
        pinned = {i for i in images if i.endswith(f"@{digest}")}
        assert len(pinned) == 1 and pinned <= set(_repo_digests(docker_client, first_id)), images

        # a code-only change: only the app's layer and the stamp's are new to the registry
        # a change of this run's own: an earlier run's layer may be in the registry already
        change = f"\n# changed {uuid.uuid4().hex}\n"
        (project / "hello.py").write_text((project / "hello.py").read_text() + change)
        # built and pushed in one: `image --push` pushes as `push` does, to the same tag (the
        # engine's tag of it moves to this build, as `docker build -t` and `docker push` would)
        second = build_json(
            str(project), "--base", base_ref, "--tag", second_tag, "--push", f"{target}:v1"
        )
        report = second["push"]
        assert second["digest"] == report["digest"] and second["pushed"] == f"{target}:v1"
        assert docker_client.images.get(f"{target}:v1").id == second["id"]
        pushed = registry_manifest(repository, report["digest"])
        new_sizes = [layer["size"] for layer in pushed["layers"]]
        old = set(layers)
        new = docker_client.images.get(second["id"]).attrs["RootFS"]["Layers"]
        changed = [i for i, layer in enumerate(new) if layer not in old]
        assert 1 <= len(changed) <= 2, changed
        assert report["sent_layers"] == len(changed), report
        assert report["sent_bytes"] == sum(new_sizes[i] for i in changed), report
        assert report["sent_bytes"] < sum(new_sizes) / 10, report
    finally:
        # the tag, and the digest reference the moved tag left on the first image
        for ref in (f"{target}:v1", f"{target}@{digest}" if digest else ""):
            if ref and _has(docker_client, ref):
                docker_client.images.remove(ref)


def _repo_digests(docker_client: DockerClient, image_id: str) -> list[str]:
    return list(docker_client.images.get(image_id).attrs.get("RepoDigests") or [])


def _has(docker_client: DockerClient, ref: str) -> bool:
    import docker.errors

    try:
        docker_client.images.get(ref)
    except docker.errors.ImageNotFound:
        return False
    return True


def test_a_registry_that_does_not_answer_is_one_line_and_leaves_no_tag(
    tiny: tuple[Path, str, str], docker_client: DockerClient
) -> None:
    _, tag, _ = tiny
    dead = f"127.0.0.1:9/reprobuild-test/push-{uuid.uuid4().hex[:10]}:v1"
    proc = run_cli("push", tag, dead)
    assert proc.returncode == 1, proc.stderr
    lines = proc.stderr.strip().splitlines()
    errors = [line for line in lines if line.startswith("error: ")]
    assert len(errors) == 1 and "127.0.0.1:9" in errors[0], proc.stderr
    assert proc.stdout == ""
    assert not _has(docker_client, dead)


def test_image_push_to_a_registry_that_does_not_answer_leaves_no_tag(
    tiny: tuple[Path, str, str], base_ref: str, docker_client: DockerClient, unique_tag: Any
) -> None:
    """`image --push`: the tag appears only once the push worked. A failed push is one error
    line, and neither the image's tag nor the push target's is left on the engine; the
    layers stay in buildah's cache for the next try."""
    project, _, built_id = tiny
    tag = unique_tag("push-dead")
    dead = f"127.0.0.1:9/reprobuild-test/push-{uuid.uuid4().hex[:10]}:v1"
    proc = run_cli("image", str(project), "--base", base_ref, "--tag", tag, "--push", dead)
    assert proc.returncode == 1, proc.stderr
    errors = [line for line in proc.stderr.splitlines() if line.startswith("error: ")]
    assert len(errors) == 1 and "127.0.0.1:9" in errors[0], proc.stderr
    assert proc.stdout == ""
    assert not _has(docker_client, tag) and not _has(docker_client, dead)
    # the next try builds nothing: the same image as the module's
    again = build_json(str(project), "--base", base_ref, "--tag", tag, "-q")
    assert again["id"] == built_id
