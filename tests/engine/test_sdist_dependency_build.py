"""A locked wheel that depends on a package the lock has as an sdist only: omegaconf 2.3.0 (a
wheel; hydra's config library) needs antlr4-python3-runtime 4.9.*, locked as its sdist. The
wheel built from that sdist goes into the same hash-checked install as the locked wheels
(``NAME @ file:///opt/reprobuild/built/...whl --hash=...``), so omegaconf's dependency is
found; an install of the lock's wheels first, the built ones after, failed here in pip and
in uv alike (``antlr4-python3-runtime was not found``). Built by both installers: uv
(buildah, a CPU image) and pip (the classic builder's stage)."""

from __future__ import annotations

import subprocess

import pytest

from helpers import MakeProject, MakeTag, build_json

pytestmark = [pytest.mark.engine, pytest.mark.registry]
ENV = {"SOURCE_DATE_EPOCH": "1700000000"}


@pytest.mark.parametrize(("builder", "installer"), [("buildah", "uv"), ("classic", "pip")])
def test_a_wheel_that_needs_a_package_built_from_its_sdist(
    builder: str, installer: str, project: MakeProject, base_ref: str, unique_tag: MakeTag
) -> None:
    root = project("sdist-omegaconf")
    tag = unique_tag("sdist-omegaconf")
    built = build_json(str(root), "--base", base_ref, "--builder", builder, "--tag", tag, env=ENV)
    manifest = built["manifest"]
    assert manifest["build"]["installer"] == installer
    (antlr,) = manifest["built_from_source"]
    assert (antlr["name"], antlr["version"]) == ("antlr4-python3-runtime", "4.9.3")
    installed = {d["name"]: d["version"] for d in manifest["distributions"]}
    assert installed["omegaconf"] == "2.3.0" and installed["antlr4-python3-runtime"] == "4.9.3"

    ran = subprocess.run(
        ["docker", "run", "--rm", "--network", "none", tag],
        capture_output=True, text=True, check=False, timeout=300,
    )  # fmt: skip
    assert ran.returncode == 0, ran.stderr[-2000:]
    assert ran.stdout.splitlines()[:4] == ["model:", "  lr: 0.001", "  layers:", "  - 64"]
    assert ran.stdout.strip().endswith("omegaconf omegaconf ok"), ran.stdout
