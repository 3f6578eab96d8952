"""``reprobuild diff`` on real images: the tiny project built twice with different locks, an image
against itself, and a run record written in a container of one of them."""

from __future__ import annotations

import json
import shutil
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest

from helpers import build_json, run_cli, run_record_paths

if TYPE_CHECKING:
    from docker import DockerClient

pytestmark = [pytest.mark.engine, pytest.mark.registry]

SIX_ONLY_LOCK = """\
six==1.17.0 \\
    --hash=sha256:4721f391ed90541fddacab5acf947aa0d3dc7d27b2e1e8eda2be8970586c3274 \\
    --hash=sha256:ff70335d468e7eb6ec65b95b99d3a2836546063f63acc5171de367e834932a81
"""


def _run_record(docker_client: Any, image: str, records: Path) -> Path:
    """Run the image's default command with a run directory mounted; return its run record."""
    records.mkdir()
    records.chmod(0o777)  # the image runs as uid 10001
    docker_client.containers.run(
        image,
        environment={"REPRO_RUN_DIR": "/reprobuild-run", "REPRO_QUIET": "1"},
        volumes={str(records): {"bind": "/reprobuild-run", "mode": "rw"}},
        network_disabled=True,
        remove=True,
    )
    found = run_record_paths(records)
    assert len(found) == 1, list(records.iterdir())
    return found[0]


def test_diff_two_builds_with_different_locks(
    base_ref: str,
    project: Callable[[str], Path],
    unique_tag: Callable[[str], str],
    docker_client: DockerClient,
    tmp_path: Path,
) -> None:
    both = project("tiny")
    six = tmp_path / "tiny-six"
    shutil.copytree(both, six)
    (six / "requirements.lock").write_text(SIX_ONLY_LOCK)
    (six / "requirements.in").write_text("six==1.17.0\n")
    hello = six / "hello.py"
    hello.write_text(
        "\n".join(
            line.replace(", idna.__version__", "")
            for line in hello.read_text().splitlines()
            if line != "import idna"
        )
        + "\n"
    )
    assert "idna" not in hello.read_text()

    a, b = unique_tag("diff-a"), unique_tag("diff-b")
    built_a = build_json(str(both), "--base", base_ref, "--tag", a, "-q")
    built_b = build_json(str(six), "--base", base_ref, "--tag", b, "-q")
    manifest_a: dict[str, Any] = built_a["manifest"]
    manifest_b: dict[str, Any] = built_b["manifest"]
    assert manifest_a["lock_sha256"] != manifest_b["lock_sha256"]

    # two images: the lock and the idna distribution differ, nothing else
    proc = run_cli("diff", a, b)
    assert proc.returncode == 1, proc.stderr
    assert proc.stderr == ""
    lines = proc.stdout.splitlines()
    assert lines[0].startswith(f"a  image {a} (sha256:")
    assert lines[1].startswith(f"b  image {b} (sha256:")
    assert lines[2:] == [
        "stack",
        f"  lock.sha256  {manifest_a['lock_sha256'][:12]}... -> "
        f"{manifest_b['lock_sha256'][:12]}...",
        "packages",
        "  - idna==3.10",
        "2 differences",
    ]

    proc = run_cli("diff", a, b, "--json")
    assert proc.returncode == 1, proc.stderr
    report = json.loads(proc.stdout)
    assert report["identical"] is False
    assert report["same_image"] is False
    assert report["differences"] == [
        {
            "group": "stack",
            "key": "lock.sha256",
            "a": manifest_a["lock_sha256"],
            "b": manifest_b["lock_sha256"],
        }
    ]
    assert report["packages"] == {
        "scope": "all",
        "added": [],
        "removed": [{"name": "idna", "version": "3.10"}],
        "changed": [],
    }

    # an image against itself, by tag and by ID
    proc = run_cli("diff", a, str(built_a["id"]))
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert proc.stdout.splitlines()[-1] == "identical"

    # the manifest of an image, saved by `inspect --json`, against the image
    saved = tmp_path / "inspect-b.json"
    inspected = run_cli("inspect", b, "--json")
    assert inspected.returncode == 0, inspected.stderr
    saved.write_text(inspected.stdout)
    proc = run_cli("diff", str(saved), b)
    assert proc.returncode == 0, proc.stdout + proc.stderr

    # a run record written in a container of A: same image as A, another one than B
    record = _run_record(docker_client, a, tmp_path / "records")
    proc = run_cli("diff", a, str(record))
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert proc.stdout.splitlines()[-1] == "identical"
    proc = run_cli("diff", str(record), b, "--json")
    assert proc.returncode == 1, proc.stderr
    report = json.loads(proc.stdout)
    assert [(d["group"], d["key"]) for d in report["differences"]] == [
        ("stack", "manifest.sha256"),
        ("stack", "lock.sha256"),
    ]
    assert report["packages"]["scope"] == "common"


def test_diff_an_image_the_engine_does_not_have(docker_client: DockerClient) -> None:
    proc = run_cli("diff", "reprobuild-test/diff-never:built", "reprobuild-test/diff-never:built")
    assert proc.returncode == 2
    assert proc.stdout == ""
    assert proc.stderr.splitlines()[0] == (
        "error: 'reprobuild-test/diff-never:built' is neither a file nor an image on this engine"
    )
