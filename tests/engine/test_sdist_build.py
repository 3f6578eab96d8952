"""Issue 39's wheel-build stage on the real buildah builder: a uv.lock whose packages are
locked as sdists only (antlr4-python3-runtime 4.9.3, as every omegaconf/hydra user has, and
docopt 0.6.2) is built into an image. Two ``--no-cache`` builds, the second under a clock 40
days ahead (Debian's faketime), give the same built wheels (sha256) and the same image ID;
the packages import inside; the manifest names each wheel beside its sdist and the build
lock; a code-only change rebuilds on the cached wheels.

julius 0.2.7 (pyannote-audio's sdist-only dependency) has its own test beside torch
(test_sdist_torch_build.py: one cold build, the filter run inside); the checks above stay on
these small sdists, where each of the four builds costs seconds, not torch's install."""

from __future__ import annotations

import hashlib
import json
import os
import subprocess
import sys

import pytest

from helpers import MakeProject, MakeTag, build_json, run_cli
from reprobuild.imaging.buildahbuild import LAYERS_REUSED

pytestmark = [pytest.mark.engine, pytest.mark.registry]
ENV = {"SOURCE_DATE_EPOCH": "1700000000"}
ANTLR_SDIST = "sha256:f224469b4168294902bb1efa80a8bf7855f24c99aef99cbefc1bcd3cce77881b"


def test_sdists_are_built_into_the_same_wheels_and_image_on_any_day(
    project: MakeProject, base_ref: str, unique_tag: MakeTag
) -> None:
    root = project("sdist")
    tags = [unique_tag("sdist"), unique_tag("sdist"), unique_tag("sdist")]
    args = ("--base", base_ref, "--builder", "buildah")
    first = build_json(str(root), *args, "--no-cache", "--tag", tags[0], env=ENV)
    later = subprocess.run(
        ["faketime", "-f", "+40d", sys.executable, "-m", "reprobuild", "image", "--json",
         str(root), *args, "--no-cache", "--tag", tags[1]],
        capture_output=True, text=True, env={**os.environ, **ENV}, check=False, timeout=900,
    )  # fmt: skip
    assert later.returncode == 0, later.stderr[-3000:]
    second = json.loads(later.stdout)

    built = first["manifest"]["built_from_source"]
    print("image IDs:", first["id"], second["id"])
    print("built wheels:", [(b["wheel"], b["wheel_sha256"]) for b in built])
    assert [b["name"] for b in built] == ["antlr4-python3-runtime", "docopt"]
    assert built[0]["sdist_sha256"] == ANTLR_SDIST
    assert built[0]["wheel"] == "antlr4_python3_runtime-4.9.3-py3-none-any.whl"
    assert all(b["wheel_sha256"].startswith("sha256:") for b in built)
    assert second["manifest"]["built_from_source"] == built
    assert first["id"] == second["id"]
    lock_file = root / "build-requirements.lock"
    assert first["manifest"]["build_lock"] == {
        "file": "build-requirements.lock",
        "sha256": hashlib.sha256(lock_file.read_bytes()).hexdigest(),
    }

    ran = subprocess.run(
        ["docker", "run", "--rm", tags[0], "python", "-c",
         "import antlr4, docopt; print(antlr4.CommonTokenStream.__name__, docopt.__version__)"],
        capture_output=True, text=True, check=False, timeout=120,
    )  # fmt: skip
    assert ran.returncode == 0, ran.stderr[-2000:]
    assert ran.stdout.strip().splitlines()[-1] == "CommonTokenStream 0.6.2"

    sbom = run_cli("sbom", tags[0])
    assert sbom.returncode == 0, sbom.stderr
    components = {c["name"]: c for c in json.loads(sbom.stdout)["components"]}
    antlr = components["antlr4-python3-runtime"]
    assert antlr["hashes"] == [{"alg": "SHA-256", "content": built[0]["wheel_sha256"][7:]}]
    props = {p["name"]: p["value"] for p in antlr["properties"]}
    assert props["reprobuild:built_from_sdist"].endswith(ANTLR_SDIST)

    # `reprobuild rebuild` builds the image again from its manifest and the project, the
    # sdists built again in the stage: the same image
    again = run_cli("rebuild", tags[0], str(root), "--json", env=ENV)
    assert again.returncode == 0, again.stderr[-3000:]
    report = json.loads(again.stdout)
    assert report["match"] is True and report["recorded_id"] == report["rebuilt_id"]

    # A code-only change: the wheel-build stage comes from the cache (its inputs and epoch
    # are its own), and the built wheels are the same.
    (root / "hello.py").write_text((root / "hello.py").read_text() + "# a code-only change\n")
    proc = run_cli("image", str(root), *args, "--tag", tags[2], env=ENV)
    assert proc.returncode == 0, proc.stderr[-3000:]
    inspected = run_cli("inspect", "--json", tags[2])
    assert inspected.returncode == 0, inspected.stderr[-2000:]
    assert json.loads(inspected.stdout)["manifest"]["built_from_source"] == built
    # Nothing under the code's step is looked at again: the layers under it are kept by their
    # inputs (the stage's among them), so the stage does not even run from buildah's cache.
    assert LAYERS_REUSED in proc.stderr, proc.stderr[-3000:]
    assert "build_sdists.py" not in proc.stderr, proc.stderr[-3000:]
