"""Hostile inputs to `reprobuild rebuild` (issue 11): an image that is not reprobuild's, one
altered after its build, and manifests whose recorded inputs are missing or hostile (a lock
name with a newline and shell text, a base that is no reference, a created that is no time,
another buildah, a revision label that is no commit id).

Every case: exit 2, one ``error:`` line naming the bad value (control characters escaped),
nothing built, tagged or left behind on the engine, in the project or the temp dir.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import shutil
import subprocess
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from helpers import DATA, run_cli, tar_context
from hostile_harness import Snapshot, assert_clean_failure

pytestmark = [pytest.mark.engine, pytest.mark.registry]
Change = Callable[[dict[str, Any], str], None]  # (manifest dict, base_ref) -> None, in place


def _buildah_version() -> str:
    out = subprocess.run(["buildah", "version", "--json"], capture_output=True, check=True)
    return str(json.loads(out.stdout)["version"])


def _manifest(base_ref: str) -> dict[str, Any]:
    """A manifest that passes every check up to the lock's sha256."""
    from reprobuild import __version__

    return {
        "schema_version": 1,
        "builder_version": __version__,
        "name": "reprobuild-test/tiny",
        "variant": "cpu",
        "base_ref": base_ref,
        "base_digest": base_ref.split("@", 1)[1],
        "lock_file": "requirements.lock",
        "lock_sha256": "0" * 64,
        "seed": 7,
        "determinism": "warn",
        "created": "2023-11-14T22:13:20Z",
        "python_version": "3.11.2",
        "machine": "x86_64",
        "distributions": [],
        "build": {
            "builder": "buildah",
            "builder_version": _buildah_version(),
            "reproducible": True,
        },
    }


def _set(key: str, value: Any) -> Change:
    def change(data: dict[str, Any], _base: str) -> None:
        data[key] = value

    return change


def _build_version(value: str) -> Change:
    def change(data: dict[str, Any], _base: str) -> None:
        data["build"]["builder_version"] = value

    return change


def _other_uv(data: dict[str, Any], _base: str) -> None:
    data["build"].update(installer="uv", installer_sha256="$(touch /tmp/pwned)\n")


@contextlib.contextmanager
def fake_image(
    docker_client: Any,
    base_ref: str,
    manifest: bytes,
    *,
    label_sha: str | None = None,
    labels: dict[str, str] | None = None,
) -> Iterator[str]:
    """An image on the base holding ``manifest`` at reprobuild's path, labelled with its
    sha256 (or ``label_sha``), built with the classic builder under a unique tag."""
    want = label_sha or hashlib.sha256(manifest).hexdigest()
    all_labels = {"io.reprobuild.manifest.sha256": want, **(labels or {})}
    label_line = " ".join(f"{k}={json.dumps(v)}" for k, v in all_labels.items())
    dockerfile = (
        f"FROM {base_ref}\nCOPY manifest.json /opt/reprobuild/manifest.json\nLABEL {label_line}\n"
    )
    context = tar_context(
        {"Dockerfile": (dockerfile.encode(), 0o644), "manifest.json": (manifest, 0o644)}
    )
    tag = f"reprobuild-hostile/rebuild:{uuid.uuid4().hex[:12]}"
    docker_client.images.build(fileobj=context, custom_context=True, tag=tag, rm=True)
    try:
        yield tag
    finally:
        docker_client.images.remove(tag)


CASES: dict[str, tuple[Change, str]] = {
    "lock-name-with-newline-and-shell": (
        _set("lock_file", "x\n$(touch /tmp/pwned)"),
        r"'x\n$(touch /tmp/pwned)'",
    ),
    "base-not-a-reference": (
        _set("base_ref", "evil; rm -rf /"),
        "'evil; rm -rf /' is not an image",
    ),
    "base-not-its-digest": (
        _set("base_digest", "sha256:" + "1" * 64),
        "is not pinned to its recorded",
    ),
    "created-not-a-time": (_set("created", "$(date)\n"), r"created '$(date)\n' is not a time"),
    "other-buildah": (_build_version("0.0.1"), "builder buildah '0.0.1' is not at hand"),
    "other-engine-buildkit": (
        _set(
            "build",
            {"builder": "buildkit", "builder_version": "$(touch /tmp/pwned)", "reproducible": True},
        ),
        "builder buildkit of Engine '$(touch /tmp/pwned)' is not at hand",
    ),
    "other-uv": (_other_uv, r"installer uv '$(touch /tmp/pwned)\n' (sha256) installed the wheels"),
    "other-reprobuild": (_set("builder_version", "0.0.0"), "reprobuild '0.0.0' built"),
    "not-reproducible": (
        _set("build", {"builder": "buildx", "builder_version": "1", "reproducible": False}),
        "was built with 'buildx' and is marked not reproducible",
    ),
    "no-build-recorded": (_set("build", {}), "records no builder"),
}


@pytest.fixture
def tiny(tmp_path: Path) -> Path:
    root = tmp_path / "project"
    shutil.copytree(DATA / "projects" / "tiny", root)
    return root


@pytest.mark.parametrize("name", sorted(CASES))
def test_hostile_manifest(name: str, tiny: Path, base_ref: str, docker_client: Any) -> None:
    change, expected = CASES[name]
    data = _manifest(base_ref)
    change(data, base_ref)
    raw = (json.dumps(data, sort_keys=True, indent=2) + "\n").encode()
    with fake_image(docker_client, base_ref, raw) as image:
        snap = Snapshot.take([tiny], docker_client)
        proc = run_cli("rebuild", image, str(tiny), "-q", timeout=300)
        assert_clean_failure(proc, expected, exit_code=2)
        snap.assert_unchanged(docker_client)
    assert not Path("/tmp/pwned").exists()


def test_lock_other_than_recorded_names_the_lock(
    tiny: Path, base_ref: str, docker_client: Any
) -> None:
    """A valid manifest whose lock sha256 is not the project's lock: the missing input."""
    raw = (json.dumps(_manifest(base_ref), sort_keys=True, indent=2) + "\n").encode()
    with fake_image(docker_client, base_ref, raw) as image:
        snap = Snapshot.take([tiny], docker_client)
        proc = run_cli("rebuild", image, str(tiny), "-q", timeout=300)
        line = assert_clean_failure(proc, "requirements.lock", exit_code=2)
        assert "the image records 'requirements.lock' with sha256 000000000000..." in line
        snap.assert_unchanged(docker_client)


def test_revision_label_not_a_commit(tiny: Path, base_ref: str, docker_client: Any) -> None:
    raw = (json.dumps(_manifest(base_ref), sort_keys=True, indent=2) + "\n").encode()
    revision = {"org.opencontainers.image.revision": "HEAD; rm -rf /"}
    with fake_image(docker_client, base_ref, raw, labels=revision) as image:
        proc = run_cli("rebuild", image, str(tiny), "-q", timeout=300)
        assert_clean_failure(proc, "label 'HEAD; rm -rf /' is not a git commit id", exit_code=2)


def test_image_without_manifest(tiny: Path, base_ref: str, docker_client: Any) -> None:
    snap = Snapshot.take([tiny], docker_client)
    proc = run_cli("rebuild", base_ref, str(tiny), timeout=300)
    assert_clean_failure(proc, "was not built by reprobuild", exit_code=2)
    snap.assert_unchanged(docker_client)


def test_image_altered_after_its_build(tiny: Path, base_ref: str, docker_client: Any) -> None:
    raw = (json.dumps(_manifest(base_ref), sort_keys=True, indent=2) + "\n").encode()
    with fake_image(docker_client, base_ref, raw, label_sha="f" * 64) as image:
        proc = run_cli("rebuild", image, str(tiny), timeout=300)
        assert_clean_failure(proc, "the image was altered after it was built", exit_code=2)


def test_rebuild_of_no_such_image(tiny: Path) -> None:
    proc = run_cli("rebuild", "reprobuild-hostile/none:" + uuid.uuid4().hex[:8], str(tiny))
    assert_clean_failure(proc, "no image 'reprobuild-hostile/none:", exit_code=2)
