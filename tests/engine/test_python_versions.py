"""Images for the CPython a lock was made for, 3.9 and 3.13 (issue 38), built and run for real.

One uv.lock (tests/data/projects/pythons: requires-python >= 3.9, MarkupSafe, a C extension
with a wheel per CPython) on two offline Debian bases made by scripts/make-base: bullseye's
CPython 3.9 and trixie's 3.13, served by digest from the loopback registry. init reads the
lock for the Python asked for (3.9) or the newest it allows (3.13); the image installs that
CPython's wheel; the runtime (the entrypoint and start-up hook) runs on both interpreters, and
an unseeded program repeats its output."""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import subprocess
from pathlib import Path
from typing import TYPE_CHECKING

import docker.errors
import pytest

from helpers import DATA, MakeTag, build_json, run_cli

if TYPE_CHECKING:
    from docker import DockerClient

pytestmark = [pytest.mark.engine, pytest.mark.registry]

MAKE_BASE = Path(__file__).resolve().parents[2] / "scripts" / "make-base"
TRAIN = """\
import random
import sys

import markupsafe

total = 0.0
for step in range(4):
    total += random.random()  # unseeded: the runtime seeds it
    print(f"step {step} loss {total!r}")
print("python", "%d.%d" % sys.version_info[:2], "markupsafe", markupsafe.__version__)
"""


def debian_base(suite: str) -> str:
    """scripts/make-base's Debian base of ``suite``, pinned by digest (made once, then reused
    while the registry serves it)."""
    env = {**os.environ, "REPROBUILD_BASE_SUITE": suite}
    proc = subprocess.run(
        [str(MAKE_BASE)], env=env, capture_output=True, text=True, timeout=1200, check=False
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    return proc.stdout.strip().splitlines()[-1]


@pytest.mark.parametrize(
    ("suite", "python", "flags"),
    [("bullseye", "3.9", ("--python", "3.9")), ("trixie", "3.13", ())],
)
def test_an_image_for_the_python_the_lock_needs(
    suite: str,
    python: str,
    flags: tuple[str, ...],
    tmp_path: Path,
    unique_tag: MakeTag,
    docker_client: DockerClient,
) -> None:
    base = debian_base(suite)
    project = tmp_path / "pythons"
    shutil.copytree(DATA / "projects" / "pythons", project)
    (project / "train.py").write_text(TRAIN)
    proc = run_cli("init", str(project), "--base", base, *flags)
    assert proc.returncode == 0, proc.stderr
    assert f"uv.lock read for CPython {python} (" in proc.stderr
    assert f'  python: "{python}"' in (project / "reprobuild.yaml").read_text()
    tag = unique_tag(f"py{python.replace('.', '')}")
    try:
        build_json(str(project), "--tag", tag)
        manifest = json.loads(run_cli("inspect", tag, "--json").stdout)["manifest"]
        assert manifest["python_version"].startswith(f"{python}.")
        assert {d["name"]: d["version"] for d in manifest["distributions"]}["markupsafe"] == "3.0.2"
        verify = run_cli("verify", tag, "--", "python", "train.py", cwd=tmp_path, timeout=900)
        assert verify.returncode == 0, verify.stderr
        assert verify.stdout.startswith("identical: 2 runs of `python train.py`"), verify.stdout
        out = docker_client.containers.run(tag, ["python", "train.py"], remove=True)
        assert f"python {python} markupsafe 3.0.2" in out.decode()
    finally:
        with contextlib.suppress(docker.errors.ImageNotFound):
            docker_client.images.remove(tag, force=True)
