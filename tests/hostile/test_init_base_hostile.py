"""`init --base REF` runs the base once for its Python (issue 51), with no network and a
timeout: a real base gives its CPython, and a base whose python3 is missing, hangs or prints
something else is one `error:` line naming the base, exit 1, and nothing written. Each bad
base is the test base with its python3 replaced, built and served by digest from the loopback
registry."""

from __future__ import annotations

import shutil
import time
from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING

import pytest

from helpers import DATA, published_image, run_cli, tar_context
from reprobuild.project.config import load_config

if TYPE_CHECKING:
    from docker import DockerClient

pytestmark = [pytest.mark.engine, pytest.mark.registry]

# What replaces the base's python3 (a shell script: the base keeps /bin/sh).
BAD_PYTHONS = {
    "missing": None,
    "hangs": "#!/bin/sh\nsleep 600\n",
    "garbage": "#!/bin/sh\nprintf '\\033[31mnot json at all {{{\\n'\n",
    "fails": "#!/bin/sh\necho 'Fatal Python error: init_fs_encoding' >&2\nexit 1\n",
    "wrong-json": "#!/bin/sh\necho '[1, 2, 3]'\n",
}
PROBE_TIMEOUT = "8"  # seconds: REPROBUILD_PROBE_TIMEOUT, so the hanging base fails quickly


def _project(tmp_path: Path) -> Path:
    project = tmp_path / "proj"
    shutil.copytree(DATA / "projects" / "pythons", project)  # allows CPython 3.9 to 3.13
    (project / "train.py").write_text("print('train')\n")
    return project


def test_init_reads_a_real_bases_python(base_ref: str, tmp_path: Path) -> None:
    project = _project(tmp_path)
    proc = run_cli("init", str(project), "--base", base_ref)
    assert proc.returncode == 0, proc.stderr
    assert f"uv.lock read for CPython 3.11 (the CPython of base {base_ref})" in proc.stderr
    assert load_config(project).select.python == "3.11"  # not 3.13, the newest it allows


@pytest.fixture(scope="module", params=sorted(BAD_PYTHONS))
def bad_base(
    request: pytest.FixtureRequest, base_ref: str, docker_client: DockerClient
) -> Iterator[tuple[str, str]]:
    script = BAD_PYTHONS[request.param]
    files = {}
    run = "RUN rm -f /usr/bin/python3 /usr/bin/python3.*[0-9]\n"
    if script is not None:
        files["python3"] = (script.encode(), 0o755)
        run += "COPY python3 /usr/bin/python3\n"
    files["Dockerfile"] = (f"FROM {base_ref}\n{run}".encode(), 0o644)
    with published_image(docker_client, tar_context(files), f"bad-python-{request.param}") as ref:
        yield request.param, ref


def test_a_base_without_a_working_python3_is_one_error_line(
    bad_base: tuple[str, str], tmp_path: Path
) -> None:
    kind, ref = bad_base
    project = _project(tmp_path)
    before = sorted(p.name for p in project.iterdir())
    started = time.monotonic()
    proc = run_cli(
        "init", str(project), "--base", ref, env={"REPROBUILD_PROBE_TIMEOUT": PROBE_TIMEOUT}
    )
    took = time.monotonic() - started
    assert proc.returncode == 1, proc.stderr
    errors = [ln for ln in proc.stderr.splitlines() if ln.startswith("error:")]
    assert len(errors) == 1, proc.stderr
    assert f"base {ref}" in errors[0], errors[0]
    assert "Traceback" not in proc.stderr
    assert sorted(p.name for p in project.iterdir()) == before
    if kind == "hangs":
        assert "did not exit within 8s" in errors[0]
        assert took < 120, took
