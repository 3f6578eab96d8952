"""``reprobuild compose`` against a real image and docker-compose (1.29 on Debian 12, Compose
v2 on Debian 13): the tiny project is built, its compose file written by the command, and the
CPU `train` service and the two `verify` runs go for real; each writes its run record into the
host run directory, through the `prepare` service that makes those directories writable for uid
10001. Then the image is pushed to the loopback registry and the file pins it by repository
digest instead of ID."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest
import yaml

from helpers import DATA, REGISTRY_PORT, build_json, run_cli

if TYPE_CHECKING:
    from docker import DockerClient

pytestmark = [pytest.mark.engine, pytest.mark.registry]


@pytest.fixture(scope="module")
def tiny(
    base_ref: str, docker_client: DockerClient, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[tuple[Path, str, str]]:
    """The tiny project, built under its default tag (what `reprobuild compose` looks for)."""
    root = tmp_path_factory.mktemp("compose")
    project = root / "tiny"
    shutil.copytree(DATA / "projects" / "tiny", project)
    # a name of our own, so the default tag is unique to this run
    config = project / "reprobuild.yaml"
    stem = f"reprobuild-test/compose-{uuid.uuid4().hex[:8]}"
    config.write_text(config.read_text().replace("name: reprobuild-test/tiny", f"name: {stem}"))
    result = build_json(str(project), "--base", base_ref)
    tag, image_id = str(result["image"]), str(result["id"])
    assert tag.startswith(f"{stem}:cpu-")
    yield project, tag, image_id
    docker_client.images.remove(image_id, force=True)


def compose(
    file: Path, project: str, *args: str, env: dict[str, str] | None = None
) -> subprocess.CompletedProcess[str]:
    clean = {k: v for k, v in os.environ.items() if not k.startswith("REPRO_")}
    return subprocess.run(
        ["docker-compose", "-p", project, "-f", str(file), *args],
        capture_output=True,
        text=True,
        cwd=file.parent,
        env={**clean, **(env or {})},
        timeout=300,
        check=False,
    )


@pytest.fixture
def compose_project(tmp_path: Path) -> Iterator[str]:
    """A unique compose project name; its containers and network are removed afterwards."""
    name = f"rbtest{uuid.uuid4().hex[:10]}"
    yield name
    for file in tmp_path.rglob("compose.yml"):
        compose(file, name, "--profile", "verify", "down", "--remove-orphans")


def records(folder: Path) -> list[dict[str, Any]]:
    out = []
    for path in sorted(folder.glob("run-*.json")):
        data = json.loads(path.read_text())
        if data.get("kind") == "reprobuild.run":
            out.append(data | {"_path": str(path)})
    return out


def test_train_runs_from_the_generated_file(
    tiny: tuple[Path, str, str], compose_project: str, tmp_path: Path, docker_client: DockerClient
) -> None:
    project, tag, image_id = tiny
    file = tmp_path / "job" / "compose.yml"
    proc = run_cli("compose", str(project), "-o", str(file))
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout == f"{file}\n"
    data = yaml.safe_load(file.read_text())
    # built here: no repo digest, its ID; the containerd store lists a digest reference for
    # every tag (NAME@<image ID>, the manifest's digest), which pins the same image
    assert data["services"]["train"]["image"] in (image_id, f"{tag.rsplit(':', 1)[0]}@{image_id}")
    assert f"({tag})" in file.read_text()
    (tmp_path / "job" / "data").mkdir()
    (tmp_path / "job" / "data" / "x.txt").write_text("data\n")

    run = compose(file, compose_project, "run", "--rm", "train")
    assert run.returncode == 0, run.stderr
    # hello.py: greeting, six and idna versions
    assert run.stdout.strip().splitlines()[-1].endswith("1.17.0 3.10")
    found = records(tmp_path / "job" / "runs" / "train")
    assert len(found) == 1, list((tmp_path / "job" / "runs").rglob("*"))
    record = found[0]
    labels = docker_client.images.get(image_id).attrs["Config"]["Labels"]
    assert record["determinism"]["seed"] == 7  # the project's seed, through ${REPRO_SEED:-7}
    assert record["image"]["sha256"] == labels["io.reprobuild.manifest.sha256"]
    assert (tmp_path / "job" / "out" / "train").is_dir()

    # the shell overrides the seed; the two verify runs write apart and compare identical
    for name in ("verify-a", "verify-b"):
        run = compose(file, compose_project, "run", "--rm", name, env={"REPRO_SEED": "11"})
        assert run.returncode == 0, run.stderr
    a = records(tmp_path / "job" / "runs" / "verify-a")
    b = records(tmp_path / "job" / "runs" / "verify-b")
    assert len(a) == len(b) == 1
    assert a[0]["determinism"]["seed"] == b[0]["determinism"]["seed"] == 11
    diff = run_cli("diff", a[0]["_path"], b[0]["_path"])
    assert diff.returncode == 0, diff.stdout + diff.stderr
    assert diff.stdout.strip().splitlines()[-1] == "identical"


def test_data_mount_is_read_only(
    tiny: tuple[Path, str, str], compose_project: str, tmp_path: Path
) -> None:
    project, _, _ = tiny
    file = tmp_path / "compose.yml"
    assert run_cli("compose", str(project), "-o", str(file)).returncode == 0
    (tmp_path / "data").mkdir()
    (tmp_path / "data" / "x.txt").write_text("data\n")
    script = (
        "import os, pathlib; print(pathlib.Path('/data/x.txt').read_text().strip());"
        "print(os.access('/data', os.W_OK), os.environ['REPRO_OUTPUT_DIR']);"
        "pathlib.Path(os.environ['REPRO_OUTPUT_DIR'], 'm.txt').write_text('ok')"
    )
    run = compose(file, compose_project, "run", "--rm", "train", "python", "-c", script)
    assert run.returncode == 0, run.stderr
    assert run.stdout.strip().splitlines()[-2:] == ["data", "False /out"]
    assert (tmp_path / "out" / "train" / "m.txt").read_text() == "ok"


def test_unbuilt_image_is_one_line_and_no_file(tiny: tuple[Path, str, str], tmp_path: Path) -> None:
    project, _, _ = tiny
    file = tmp_path / "compose.yml"
    (project / "requirements.lock").write_text(
        (project / "requirements.lock").read_text() + "\n# another lock, another tag\n"
    )
    proc = run_cli("compose", str(project), "-o", str(file))
    assert proc.returncode == 1
    lines = proc.stderr.splitlines()
    assert len(lines) == 1, proc.stderr
    assert lines[0].startswith("error: no image ") and ":cpu-" in lines[0]
    assert lines[0].endswith(f"on this engine; build it with `reprobuild image {project}`")
    assert not file.exists()


def test_pushed_image_is_pinned_by_repo_digest(
    tiny: tuple[Path, str, str], compose_project: str, tmp_path: Path, docker_client: DockerClient
) -> None:
    project, _, image_id = tiny
    repo = f"127.0.0.1:{REGISTRY_PORT}/reprobuild-test/compose-pin"
    tag = f"{repo}:{uuid.uuid4().hex[:12]}"
    docker_client.images.get(image_id).tag(tag)
    try:
        for line in docker_client.images.push(tag, stream=True, decode=True):
            assert "error" not in line, line
        file = tmp_path / "compose.yml"
        proc = run_cli("compose", str(project), "--image", tag, "-o", str(file))
        assert proc.returncode == 0, proc.stderr
        image = yaml.safe_load(file.read_text())["services"]["train"]["image"]
        digests = docker_client.images.get(image_id).attrs["RepoDigests"]
        assert image.startswith(f"{repo}@sha256:") and image in digests
        run = compose(file, compose_project, "run", "--rm", "train")
        assert run.returncode == 0, run.stderr
        assert len(records(tmp_path / "runs" / "train")) == 1
    finally:
        docker_client.images.remove(tag)
