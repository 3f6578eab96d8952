"""From a project with only a uv.lock to a verified image: `init`, `image`, `verify`, on the
real engine (issue 27)."""

from __future__ import annotations

import contextlib
import json
import shutil
from pathlib import Path
from typing import TYPE_CHECKING

import docker.errors
import pytest

from helpers import DATA, MakeTag, build_json, run_cli

if TYPE_CHECKING:
    from docker import DockerClient

pytestmark = [pytest.mark.engine, pytest.mark.registry]

TRAIN = """\
import numpy as np

rng = np.random.default_rng(0)
w = rng.standard_normal((64, 64))
for step in range(5):
    w = np.tanh(w @ w.T / 64.0)
    print(f"step {step} checksum {float(w.sum()):.17g}")
"""


def test_init_image_verify_from_a_uv_lock(
    base_ref: str, tmp_path: Path, unique_tag: MakeTag, docker_client: DockerClient
) -> None:
    project = tmp_path / "uvproject"
    shutil.copytree(DATA / "lockfiles" / "native" / "uv-extras", project)
    (project / "train.py").write_text(TRAIN)
    proc = run_cli("init", str(project), "--base", base_ref, "--extra", "symbolic")
    assert proc.returncode == 0, proc.stderr
    config = (project / "reprobuild.yaml").read_text()
    assert "lock: uv.lock" in config and "command: [python, train.py]" in config
    assert "  extras: [symbolic]" in config
    tag = unique_tag("init-uv")
    try:
        build_json(str(project), "--tag", tag)
        # The manifest names the lock's format and the extras chosen; the extra is installed.
        inspected = run_cli("inspect", tag)
        assert inspected.returncode == 0, inspected.stderr
        assert "lock format  uv.lock (extras symbolic)\n" in inspected.stdout
        assert "  sympy==" in inspected.stdout
        manifest = json.loads(run_cli("inspect", tag, "--json").stdout)["manifest"]
        assert manifest["lock_format"] == "uv.lock"
        assert manifest["lock_selection"] == {
            "extras": ["symbolic"],
            "groups": [],
            "default_groups": False,
        }
        verify = run_cli("verify", tag, "--", "python", "train.py", cwd=tmp_path, timeout=900)
        assert verify.returncode == 0, verify.stderr
        assert verify.stdout.startswith("identical: 2 runs of `python train.py`")
    finally:
        with contextlib.suppress(docker.errors.ImageNotFound):
            docker_client.images.remove(tag, force=True)
