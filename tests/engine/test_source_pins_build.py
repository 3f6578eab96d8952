"""Issue 39's git dependencies and workspace members on the real buildah builder.

A uv workspace (locked by uv itself) whose project depends on an editable workspace member
(``packages/core``) and on a git dependency pinned by commit (a ``file://`` repository made
here with real git: GitHub is not reachable from CI). ``reprobuild init`` packs both into
deterministic source archives, pins their build requirements and says so in reprobuild.yaml's
comment; ``reprobuild image``
builds them into wheels on the base in the wheel-build stage; both import inside the image,
and the manifest names each archive (sha256) beside the wheel built from it.
"""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import pytest

from helpers import MakeTag, build_json, make_uv_workspace, run_cli

pytestmark = [pytest.mark.engine, pytest.mark.registry]
ENV = {"SOURCE_DATE_EPOCH": "1700000000"}


def test_git_commit_and_editable_member_build_and_import(
    tmp_path: Path, base_ref: str, unique_tag: MakeTag
) -> None:
    project, commit = make_uv_workspace(tmp_path)
    (project / "train.py").write_text("import core, gitdep\nprint(core.NAME, gitdep.VALUE)\n")
    init = run_cli(
        "init", str(project), "--command", "python train.py", "--python", "3.11",
        "--base", base_ref,
    )  # fmt: skip
    assert init.returncode == 0, init.stderr[-3000:]
    config = (project / "reprobuild.yaml").read_text()
    assert "build_lock: build-requirements.lock" in config
    comments = config[config.index("# Installed from source:") :].splitlines()
    assert comments[1].endswith("its source is copied into the image with `include`")
    assert "core is built into a wheel in the image from the project's folder" in comments[2]
    assert f"gitdep is built into a wheel in the image from git file://{tmp_path}" in comments[3]
    build_lock = (project / "build-requirements.lock").read_text()
    assert "core==0.3.0 builds with: setuptools>=61" in build_lock
    assert "gitdep==1.2.0 builds with: setuptools>=61" in build_lock

    tag = unique_tag("sourcepins")
    result = build_json(
        str(project), "--base", base_ref, "--builder", "buildah", "--tag", tag, env=ENV
    )
    built = {b["name"]: b for b in result["manifest"]["built_from_source"]}
    print("built from source:", json.dumps(built, indent=1))
    assert set(built) == {"core", "gitdep"}
    assert built["gitdep"]["wheel"] == "gitdep-1.2.0-py3-none-any.whl"
    assert all(b["sdist_sha256"].startswith("sha256:") for b in built.values())
    assert built["gitdep"]["origin"] == f"git file://{tmp_path}/gitdep@{commit}"
    assert built["core"]["origin"] == "path packages/core (editable)"

    ran = subprocess.run(
        ["docker", "run", "--rm", tag],
        capture_output=True, text=True, check=False, timeout=120,
    )  # fmt: skip
    assert ran.returncode == 0, ran.stderr[-2000:]
    assert ran.stdout.strip().splitlines()[-1] == "core 42"

    sbom = run_cli("sbom", tag)
    assert sbom.returncode == 0, sbom.stderr
    components = {c["name"]: c for c in json.loads(sbom.stdout)["components"]}
    props = {p["name"]: p["value"] for p in components["gitdep"]["properties"]}
    assert props["reprobuild:source_origin"].endswith(f"@{commit}")
    assert props["reprobuild:built_from_sdist"].endswith(built["gitdep"]["sdist_sha256"])

    # The member's code edited: the build lock still holds (it is keyed by the member's build
    # requirements, not its archive's bytes) and the stage builds the new code.
    init_py = project / "packages" / "core" / "src" / "core" / "__init__.py"
    init_py.write_text('NAME = "core-edited"\n')
    edited = build_json(
        str(project), "--base", base_ref, "--builder", "buildah", "--tag", tag, env=ENV
    )
    rebuilt = {b["name"]: b for b in edited["manifest"]["built_from_source"]}
    assert rebuilt["core"]["sdist_sha256"] != built["core"]["sdist_sha256"]
    assert rebuilt["gitdep"] == built["gitdep"]
    ran = subprocess.run(
        ["docker", "run", "--rm", tag], capture_output=True, text=True, check=False, timeout=120
    )
    assert ran.stdout.strip().splitlines()[-1] == "core-edited 42", ran.stderr[-2000:]


BAD_BUILDS = {
    # a hermetic build has no network: a real request fails
    "network": (
        "import urllib.request\nurllib.request.urlopen('https://pypi.org/simple/', timeout=30)\n",
        "failed: urllib.error.URLError: <urlopen error",
    ),
    # past build_timeout (5 s here) it is stopped, with what it started
    "hangs": (
        "import subprocess\nsubprocess.run(['sleep', '600'])\n",
        "did not finish within 5 s; stopped",
    ),
    # the build runs as an unprivileged user: the base's Python is not its to change
    "writes-outside": (
        "open('/usr/local/lib/reprobuild-was-here.pth', 'w').write('import os')\n",
        "failed: PermissionError: [Errno 13] Permission denied: "
        "'/usr/local/lib/reprobuild-was-here.pth'",
    ),
}


@pytest.mark.parametrize("case", sorted(BAD_BUILDS))
def test_a_member_whose_build_misbehaves_is_one_line(  # type: ignore[no-untyped-def]
    tmp_path: Path, base_ref: str, unique_tag: MakeTag, docker_client, case: str
) -> None:
    """A member whose setup.py reaches for the network, hangs, or writes outside its tree
    fails the image build in one error line (after the build's log) naming the package and
    the build's own last error, with nothing tagged or left in the project or /tmp."""
    from hostile_harness import Snapshot

    setup, expected = BAD_BUILDS[case]
    project, _commit = make_uv_workspace(tmp_path)
    init = run_cli(
        "init", str(project), "--command", "python -c 'import core'", "--python", "3.11",
        "--base", base_ref,
    )  # fmt: skip
    assert init.returncode == 0, init.stderr[-3000:]
    with (project / "reprobuild.yaml").open("a") as config:
        config.write("build_timeout: 5\n")
    (project / "packages" / "core" / "setup.py").write_text(
        f"{setup}from setuptools import setup\nsetup()\n"
    )
    snap = Snapshot.take([project], docker_client)
    proc = run_cli(
        "image", str(project), "--base", base_ref, "--builder", "buildah", "-q",
        "--tag", unique_tag("badbuild"), env=ENV, timeout=600,
    )  # fmt: skip
    # the build's own log (pip's "error: ..." lines and the setup.py traceback among it),
    # then the command's one error line, last
    assert proc.returncode == 1 and proc.stdout == "", proc.stderr[-3000:]
    last = proc.stderr.strip().splitlines()[-1]
    assert last.startswith("error: buildah build failed: building core 0.3.0 "), last
    assert expected in last, last
    snap.assert_unchanged(docker_client)
