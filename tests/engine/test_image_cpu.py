"""Real images on a real engine: built from hashed locks on a base pulled by digest from the
loopback registry, then run and taken apart."""

from __future__ import annotations

import contextlib
import hashlib
import io
import json
import shutil
import tarfile
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Any

import docker.errors
import pytest

from helpers import (
    DATA,
    MakeProject,
    MakeTag,
    build_json,
    image_labels,
    published_image,
    run_cli,
    tar_context,
)
from reprobuild.imaging.buildahbuild import LAYERS_REUSED

if TYPE_CHECKING:
    from docker import DockerClient

pytestmark = [pytest.mark.engine, pytest.mark.registry]
CA_BUNDLE = Path("/etc/ssl/certs/ca-certificates.crt")


@pytest.fixture(scope="module")
def tiny_image(
    base_ref: str, tmp_path_factory: pytest.TempPathFactory, docker_client: DockerClient
) -> Iterator[dict[str, Any]]:
    """One build of the tiny project, shared by the read-only checks below."""
    root = tmp_path_factory.mktemp("tiny") / "tiny"
    shutil.copytree(DATA / "projects" / "tiny", root)
    tag = f"reprobuild-test/tiny-shared:{uuid.uuid4().hex[:12]}"
    try:
        result = build_json(str(root), "--base", base_ref, "--tag", tag)
        yield {"root": root, "tag": tag, "result": result}
    finally:
        with contextlib.suppress(docker.errors.ImageNotFound):
            docker_client.images.remove(tag, force=True)


def _layer_files(saved: bytes) -> Iterator[tuple[str, bytes]]:
    """Every regular file in every layer of a `docker save` archive."""
    with tarfile.open(fileobj=io.BytesIO(saved)) as outer:
        for member in outer.getmembers():
            data = outer.extractfile(member) if member.isfile() else None
            if data is None:
                continue
            payload = data.read()
            if not tarfile.is_tarfile(io.BytesIO(payload)):
                continue  # config or manifest blob, not a layer
            with tarfile.open(fileobj=io.BytesIO(payload)) as layer:
                for entry in layer.getmembers():
                    fh = layer.extractfile(entry) if entry.isfile() else None
                    if fh is not None:
                        yield entry.name, fh.read()


def _run(
    docker_client: DockerClient,
    image: str,
    *cmd: str,
    entrypoint: list[str] | None = None,
    stderr: bool = False,
    **kw: Any,
) -> tuple[int, str]:
    """Run a container; return its exit code and stdout (stdout and stderr with stderr=True).
    The entrypoint's one summary line goes to stderr, so stdout is what the program printed."""
    container = docker_client.containers.run(
        image, list(cmd) or None, entrypoint=entrypoint, detach=True, network_disabled=True, **kw
    )
    try:
        code = container.wait()["StatusCode"]
        return code, container.logs(stdout=True, stderr=stderr).decode()
    finally:
        container.remove(force=True)


def test_base_is_pulled_by_digest_from_the_registry(
    base_ref: str,
    project: MakeProject,
    unique_tag: MakeTag,
    docker_client: DockerClient,
) -> None:
    """A base the engine does not hold is pulled by digest from the registry; a label unique
    to this run makes sure no earlier run (or test) can have left it behind."""
    marker = uuid.uuid4().hex
    context = tar_context(
        {"Dockerfile": (f"FROM {base_ref}\nLABEL test.marker={marker}\n".encode(), 0o644)}
    )
    with published_image(docker_client, context, "pull-base", keep_local=False) as ref:
        with pytest.raises(docker.errors.ImageNotFound):
            docker_client.images.get(ref)
        tag = unique_tag("pulled")
        build_json(str(project("tiny")), "--base", ref, "--tag", tag)
        pulled = docker_client.images.get(ref)
        assert ref in pulled.attrs["RepoDigests"]
        assert pulled.labels["test.marker"] == marker
        assert (
            image_labels(docker_client, tag)["org.opencontainers.image.base.digest"]
            == (ref.split("@")[1])
        )


def test_image_json_and_default_command(
    tiny_image: dict[str, Any], docker_client: DockerClient
) -> None:
    result = tiny_image["result"]
    assert result["image"] == tiny_image["tag"]
    assert result["id"] == docker_client.images.get(tiny_image["tag"]).id
    code, out = _run(docker_client, tiny_image["tag"])
    assert code == 0
    assert out.strip() == "hello from tiny 1.17.0 3.10"


def test_labels(tiny_image: dict[str, Any], base_ref: str, docker_client: DockerClient) -> None:
    labels = image_labels(docker_client, tiny_image["tag"])
    lock_sha = hashlib.sha256((tiny_image["root"] / "requirements.lock").read_bytes()).hexdigest()
    assert labels["org.opencontainers.image.created"] == "1970-01-01T00:00:00Z"
    assert labels["org.opencontainers.image.base.digest"] == base_ref.split("@")[1]
    assert labels["org.opencontainers.image.base.name"] == base_ref.split("@")[0]
    assert labels["org.opencontainers.image.title"] == "reprobuild-test/tiny"
    assert labels["io.reprobuild.lock.sha256"] == lock_sha
    assert labels["io.reprobuild.seed"] == "7"
    assert labels["io.reprobuild.determinism"] == "warn"
    assert labels["io.reprobuild.variant"] == "cpu"
    assert labels["io.reprobuild.python"].startswith("3.11.")
    from reprobuild import __version__

    assert labels["io.reprobuild.builder.version"] == __version__


def test_manifest_file_matches_label_and_lock(
    tiny_image: dict[str, Any], docker_client: DockerClient
) -> None:
    code, raw = _run(docker_client, tiny_image["tag"], "cat", "/opt/reprobuild/manifest.json")
    assert code == 0
    labels = image_labels(docker_client, tiny_image["tag"])
    assert hashlib.sha256(raw.encode()).hexdigest() == labels["io.reprobuild.manifest.sha256"]
    manifest = json.loads(raw)
    assert manifest["schema_version"] == 1
    assert manifest["distributions"] == [
        {"name": "idna", "version": "3.10", "origin": "lock"},
        {"name": "six", "version": "1.17.0", "origin": "lock"},
    ]
    assert manifest == tiny_image["result"]["manifest"]
    inspected = run_cli("inspect", tiny_image["tag"], "--json")
    assert inspected.returncode == 0, inspected.stderr
    assert json.loads(inspected.stdout)["manifest"] == manifest
    text = run_cli("inspect", tiny_image["tag"])
    assert "six==1.17.0" in text.stdout and "seed / mode  7 / warn" in text.stdout


def test_runs_as_non_root(tiny_image: dict[str, Any], docker_client: DockerClient) -> None:
    code, out = _run(docker_client, tiny_image["tag"], "id")
    assert code == 0
    assert out.startswith("uid=10001(repro) gid=10001(repro)")


def test_no_wheels_caches_or_pip_left(
    tiny_image: dict[str, Any], docker_client: DockerClient
) -> None:
    script = (
        "find / -xdev \\( -name '*.whl' -o -name 'requirements.lock' -o -name 'ca.pem' \\) "
        "-not -path '/usr/share/python-wheels/*' -not -path '/proc/*' 2>/dev/null; "
        # this run's own record (the entrypoint's, for trackers) is the only thing in /tmp
        "find /tmp /root/.cache /home/repro/.cache -mindepth 1 "
        "-not -path '/tmp/reprobuild-run' -not -path '/tmp/reprobuild-run/run-*.json' 2>/dev/null; "
        "ls /opt/venv/bin | grep -x pip; "
        "/opt/venv/bin/python -c 'import pip' 2>/dev/null && echo pip-importable; true"
    )
    code, out = _run(docker_client, tiny_image["tag"], "sh", "-c", script, user="root")
    assert code == 0
    assert out.strip() == ""


def test_entrypoint_passes_command_and_exit_code(
    tiny_image: dict[str, Any], docker_client: DockerClient
) -> None:
    code, out = _run(
        docker_client,
        tiny_image["tag"],
        "python",
        "-c",
        "import sys; print('args', sys.argv[1:]); sys.exit(7)",
        "a b",
        "$(x)",
    )
    assert code == 7
    assert "args ['a b', '$(x)']" in out
    code, out = _run(docker_client, tiny_image["tag"], "no-such-program", stderr=True)
    assert code == 127
    assert "command not found: 'no-such-program'" in out


def test_code_only_change_reuses_dependency_layers(
    base_ref: str, project: MakeProject, unique_tag: MakeTag, docker_client: DockerClient
) -> None:
    root = project("tiny")
    first, second = unique_tag("reuse"), unique_tag("reuse")
    build_json(str(root), "--base", base_ref, "--tag", first)
    (root / "hello.py").write_text((root / "hello.py").read_text() + "print('changed')\n")
    proc = run_cli("image", str(root), "--base", base_ref, "--tag", second)
    assert proc.returncode == 0, proc.stderr[-2000:]
    # buildah: the layers under the code kept by their inputs; another builder: its cache
    assert LAYERS_REUSED in proc.stderr or "Using cache" in proc.stderr, proc.stderr[-2000:]
    layers_a = docker_client.images.get(first).attrs["RootFS"]["Layers"]
    layers_b = docker_client.images.get(second).attrs["RootFS"]["Layers"]
    assert len(layers_a) == len(layers_b)
    differing = [i for i, (a, b) in enumerate(zip(layers_a, layers_b, strict=True)) if a != b]
    # Only the app layer changes, and the manifest layer (the last) with it where the builder
    # writes the build's time into it (the classic one; buildah writes SOURCE_DATE_EPOCH, so
    # the same manifest gives the same layer); base, user, venv and runtime layers are reused
    # byte for byte.
    assert differing in ([len(layers_a) - 2], [len(layers_a) - 2, len(layers_a) - 1]), differing
    code, out = _run(docker_client, second)
    assert (code, out.strip().splitlines()[-1]) == (0, "changed")


def test_buildkit_builder_builds_the_same_image(
    base_ref: str, project: MakeProject, unique_tag: MakeTag, docker_client: DockerClient
) -> None:
    tag = unique_tag("buildkit")
    result = build_json(
        str(project("tiny")), "--base", base_ref, "--tag", tag, "--builder", "buildkit"
    )
    code, out = _run(docker_client, tag)
    assert (code, out.strip()) == (0, "hello from tiny 1.17.0 3.10")
    assert result["manifest"]["distributions"] == [
        {"name": "idna", "version": "3.10", "origin": "lock"},
        {"name": "six", "version": "1.17.0", "origin": "lock"},
    ]


def test_default_tag_is_name_variant_and_lock_hash(
    base_ref: str, project: MakeProject, docker_client: DockerClient
) -> None:
    root = project("tiny")
    lock_sha = hashlib.sha256((root / "requirements.lock").read_bytes()).hexdigest()
    expected = f"reprobuild-test/tiny:cpu-{lock_sha[:12]}"
    proc = run_cli("image", str(root), "--base", base_ref, "-q")
    try:
        assert proc.returncode == 0, proc.stderr[-2000:]
        assert proc.stdout.strip() == expected
        assert docker_client.images.get(expected)
    finally:
        docker_client.images.remove(expected, force=True)


def test_online_build_with_ca_leaves_no_trace(
    base_ref: str, project: MakeProject, unique_tag: MakeTag, docker_client: DockerClient
) -> None:
    """--online installs from PyPI inside the build; the CA goes in through the build stage
    only. Every layer of the final image is searched for the CA bytes."""
    tag = unique_tag("online")
    build_json(
        str(project("tiny")),
        "--base",
        base_ref,
        "--tag",
        tag,
        "--online",
        "--ca-cert",
        str(CA_BUNDLE),
    )
    code, out = _run(docker_client, tag)
    assert (code, out.strip()) == (0, "hello from tiny 1.17.0 3.10")
    ca_sha = hashlib.sha256(CA_BUNDLE.read_bytes()).hexdigest()
    checked = 0
    for name, data in _layer_files(b"".join(docker_client.images.get(tag).save())):
        assert hashlib.sha256(data).hexdigest() != ca_sha, name
        checked += 1
    assert checked > 100


def test_image_was_tampered_is_detected(
    tiny_image: dict[str, Any], unique_tag: MakeTag, docker_client: DockerClient, tmp_path: Path
) -> None:
    tampered = unique_tag("tampered")
    (tmp_path / "Dockerfile").write_text(
        f"FROM {tiny_image['tag']}\nUSER root\nRUN echo '{{}}' > /opt/reprobuild/manifest.json\n"
    )
    docker_client.images.build(path=str(tmp_path), tag=tampered, rm=True)
    proc = run_cli("inspect", tampered)
    assert proc.returncode == 1
    assert "the image was altered after it was built" in proc.stderr


def test_the_projects_own_src_package_imports_in_the_image(
    base_ref: str, project: MakeProject, unique_tag: MakeTag, docker_client: DockerClient
) -> None:
    """issue 51: a src-layout project whose lock leaves the project itself to `include` (an
    editable root) imports its package in the image with no flag, as under `uv run`; from the
    image's own working directory and from another one."""
    root = project("tiny")
    (root / "pyproject.toml").write_text('[project]\nname = "tinyapp"\nversion = "0.1"\n')
    tag = unique_tag("tiny-src")
    build_json(str(root), "--base", base_ref, "--tag", tag)
    code = "import tinyapp, tinyapp.greet; print(tinyapp.__file__)"
    for workdir in ("/app", "/tmp"):
        out = docker_client.containers.run(
            tag, ["python", "-c", code], working_dir=workdir, remove=True
        )
        assert out.decode().strip().splitlines()[-1] == "/app/src/tinyapp/__init__.py"
