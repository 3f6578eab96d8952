"""Issue 39's proof for pyannote-audio's sdist-only dependency: julius 0.2.7, locked in a uv.lock
as an sdist only, is built into a wheel by the wheel-build stage on the real buildah builder,
beside torch 2.13 CPU installed from its wheel; julius imports inside the image and low-pass
filters a signal (the image's own command, through the entrypoint); the manifest names the
built wheel beside the sdist's sha256. One cold build: torch (about 190 MB of wheel, this
machine's own, as the determinism project pins it) makes it the costly one of the sdist tests,
so the reproducibility checks stay in test_sdist_build.py on small sdists."""

from __future__ import annotations

import subprocess
import time

import pytest

from helpers import MakeProject, MakeTag, build_json

pytestmark = [pytest.mark.engine, pytest.mark.registry, pytest.mark.heavy]
ENV = {"SOURCE_DATE_EPOCH": "1700000000"}
JULIUS_SDIST = "sha256:3c0f5f5306d7d6016fcc95196b274cae6f07e2c9596eed314e4e7641554fbb08"


def test_julius_is_built_from_its_sdist_and_filters_beside_torch(
    project: MakeProject, base_ref: str, unique_tag: MakeTag
) -> None:
    root = project("sdist-torch")
    tag = unique_tag("sdist-torch")
    start = time.monotonic()
    # --no-cache: julius is built from its sdist in this run, whatever an earlier one left
    args = ("--base", base_ref, "--builder", "buildah", "--no-cache", "--tag", tag)
    built = build_json(str(root), *args, env=ENV)
    print(f"image built in {time.monotonic() - start:.1f} s")

    (julius,) = built["manifest"]["built_from_source"]
    assert julius["name"] == "julius" and julius["version"] == "0.2.7"
    assert julius["sdist"] == "julius-0.2.7.tar.gz"
    assert julius["sdist_sha256"] == JULIUS_SDIST
    assert julius["wheel"] == "julius-0.2.7-py3-none-any.whl"
    assert julius["wheel_sha256"].startswith("sha256:") and len(julius["wheel_sha256"]) == 71
    installed = {d["name"]: d["version"] for d in built["manifest"]["distributions"]}
    assert installed["julius"] == "0.2.7" and installed["torch"] == "2.13.0+cpu"

    # the image's own command: julius.lowpass_filter keeps the 5 Hz tone, drops the 200 Hz one
    ran = subprocess.run(
        ["docker", "run", "--rm", tag], capture_output=True, text=True, check=False, timeout=300
    )
    assert ran.returncode == 0, ran.stderr[-2000:]
    lines = ran.stdout.strip().splitlines()
    assert lines[-2] == "julius 0.2.7 torch 2.13.0+cpu", ran.stdout[-2000:]
    assert lines[-1].startswith("lowpass max error ") and lines[-1].endswith(" ok"), lines[-1]
