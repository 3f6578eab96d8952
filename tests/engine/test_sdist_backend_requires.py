"""Build requirements a backend asks for at build time (issue 51): seqeval 1.2.2 (an NLP
dependency) is an sdist with no [build-system] whose setup.py names ``setup_requires=
['setuptools_scm']`` and ``use_scm_version``; built with its static requires alone it is a
wheel of version 0.0.0. ``reprobuild build-lock`` asks its backend (PEP 517
``get_requires_for_build_wheel``) in the pinned base, with no network, and pins what it
answers; the image then holds seqeval 1.2.2, and two ``--no-cache`` builds give the same
wheel (sha256) and the same image ID. The sdist is PyPI's, by the sha256 uv.lock records."""

from __future__ import annotations

import json
import subprocess

import pytest

from helpers import MakeProject, MakeTag, build_json, run_cli

pytestmark = [pytest.mark.engine, pytest.mark.registry, pytest.mark.heavy]
ENV = {"SOURCE_DATE_EPOCH": "1700000000"}
SEQEVAL_SDIST = "sha256:f28e97c3ab96d6fcd32b648f6438ff2e09cfba87f05939da9b3970713ec56e6f"


def test_seqeval_builds_as_its_own_version_with_what_its_backend_asks_for(
    project: MakeProject, base_ref: str, unique_tag: MakeTag
) -> None:
    root = project("sdist-scm")
    (root / "build-requirements.lock").unlink()  # written again here, asked in the test base
    made = run_cli("build-lock", str(root), "--base", base_ref)
    assert made.returncode == 0, made.stderr[-3000:]
    text = (root / "build-requirements.lock").read_text()
    assert "# seqeval==1.2.2 builds with: setuptools>=40.8.0, wheel\n" in text
    assert "# seqeval==1.2.2's build backend asks for: setuptools_scm\n" in text
    assert "\nsetuptools-scm==" in text

    tags = [unique_tag("sdist-scm"), unique_tag("sdist-scm")]
    args = ("--base", base_ref, "--builder", "buildah", "--no-cache")
    first = build_json(str(root), *args, "--tag", tags[0], env=ENV)
    second = build_json(str(root), *args, "--tag", tags[1], env=ENV)
    built = first["manifest"]["built_from_source"]
    print("image IDs:", first["id"], second["id"])
    print("built wheels:", [(b["wheel"], b["wheel_sha256"]) for b in built])
    assert [(b["name"], b["version"], b["sdist_sha256"]) for b in built] == [
        ("seqeval", "1.2.2", SEQEVAL_SDIST)
    ]
    assert built[0]["wheel"] == "seqeval-1.2.2-py3-none-any.whl"
    assert second["manifest"]["built_from_source"] == built
    assert first["id"] == second["id"]

    ran = subprocess.run(
        ["docker", "run", "--rm", tags[0], "python", "-c",
         "import importlib.metadata as m, json, seqeval.metrics; "
         "print(json.dumps([m.version('seqeval'), seqeval.metrics.f1_score.__name__]))"],
        capture_output=True, text=True, check=False, timeout=120,
    )  # fmt: skip
    assert ran.returncode == 0, ran.stderr[-2000:]
    assert json.loads(ran.stdout.strip().splitlines()[-1]) == ["1.2.2", "f1_score"]
