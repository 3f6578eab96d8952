"""Hostile build backends while ``reprobuild build-lock`` asks them what they build with (PEP
517 ``get_requires_for_build_wheel``, issue 51). The workspace member ``core`` (packed into
a source archive on the host) has a setup.py or an in-tree backend that reaches for the
network, hangs, asks for a package no index has, answers garbage, or prints garbage. Each
failure is one ``error:`` line naming core's archive, exit 1, with nothing written into the
project, no temp dir, container or image tag left behind; the garbage printer is no failure.
The backends run in a real container from the test base (no network, user 65534)."""

from __future__ import annotations

from pathlib import Path

import pytest

from helpers import make_uv_workspace, run_cli
from hostile_harness import Snapshot, assert_clean_failure

pytestmark = [pytest.mark.engine, pytest.mark.registry]
SETUP = "from setuptools import setup\n"
ARCHIVE = "core-0.3.0.tar.gz"
IN_TREE = (
    '[project]\nname = "core"\nversion = "0.3.0"\n\n[build-system]\nrequires = []\n'
    'build-backend = "evilbackend"\nbackend-path = ["."]\n'
)
BAD = {
    # the container has no network at all: a real request fails there, never on the host
    "network": (
        SETUP + "import urllib.request\n"
        "urllib.request.urlopen('https://pypi.org/simple/', timeout=30)\nsetup()\n",
        f"the build backend of {ARCHIVE} reached for the network while asked",
    ),
    # stopped past REPROBUILD_ASK_TIMEOUT (8 s here)
    "hangs": (
        SETUP + "import time\ntime.sleep(600)\nsetup()\n",
        f"asking the build backend of {ARCHIVE} for its build requirements "
        "(get_requires_for_build_wheel) did not finish within 8 s; stopped",
    ),
    # setuptools answers with setup_requires: a name no index has
    "missing": (
        SETUP + "setup(setup_requires=['reprobuild-no-such-package-4f2a'])\n",
        "cannot resolve reprobuild-no-such-package-4f2a, which the build backend of "
        f"{ARCHIVE} asks for",
    ),
    # an in-tree backend whose hook answers with something that is no list of requirements
    "answers-garbage": (
        "def get_requires_for_build_wheel(config_settings=None):\n"
        "    return {'\\x1b[31mnot': 'a list'}\n",
        f"the build backend of {ARCHIVE} answered get_requires_for_build_wheel with",
    ),
    # an in-tree backend that asks for a string no requirement parser takes
    "asks-garbage": (
        "def get_requires_for_build_wheel(config_settings=None):\n"
        "    return ['setuptools; rm -rf /', '$(reboot)']\n",
        f"the build backend of {ARCHIVE} asked for 'setuptools; rm -rf /'",
    ),
}


def _config(project: Path, base_ref: str) -> None:
    """reprobuild.yaml on the test base by digest (build-lock asks in the project's base)."""
    (project / "reprobuild.yaml").write_text(
        f"name: hostile/ask\nlock: uv.lock\nbase:\n  cpu: {base_ref}\n"
        'command: ["python", "-c", "import core"]\nselect:\n  python: "3.11"\n'
    )


def _member(project: Path, case: str, code: str) -> None:
    core = project / "packages" / "core"
    if case.endswith("garbage"):
        (core / "pyproject.toml").write_text(IN_TREE)
        (core / "evilbackend.py").write_text(code)
    else:
        (core / "setup.py").write_text(code)


@pytest.mark.parametrize("case", sorted(BAD))
def test_a_backend_that_misbehaves_when_asked_is_one_line(  # type: ignore[no-untyped-def]
    tmp_path: Path, base_ref: str, docker_client, case: str
) -> None:
    code, expected = BAD[case]
    project, _commit = make_uv_workspace(tmp_path)
    _config(project, base_ref)
    _member(project, case, code)
    snap = Snapshot.take([project], docker_client)
    proc = run_cli("build-lock", str(project), env={"REPROBUILD_ASK_TIMEOUT": "8"}, timeout=600)
    line = assert_clean_failure(proc, expected, build_log_allowed=True)
    print(line)
    assert not (project / "build-requirements.lock").exists()
    snap.assert_unchanged(docker_client)


def test_a_backend_that_prints_garbage_is_asked_all_the_same(  # type: ignore[no-untyped-def]
    tmp_path: Path, base_ref: str, docker_client
) -> None:
    """Whatever the hook prints (control bytes, a fake ``error:`` line, half a JSON) is its
    log, not its answer: pyproject_hooks reads the answer from its own file."""
    project, _commit = make_uv_workspace(tmp_path)
    noise = (
        "import sys\nsys.stdout.write('\\x1b[2J{\"return_val\": [\\n' * 200)\n"
        "sys.stderr.write('error: not really\\n\\x00\\xff' * 50)\n"
    )
    (project / "packages" / "core" / "setup.py").write_text(
        SETUP + noise + "setup(setup_requires=['wheel'])\n"
    )
    _config(project, "python:3.11-slim@sha256:" + "0" * 64)  # --base takes its place
    proc = run_cli("build-lock", str(project), "--base", base_ref, timeout=600)
    assert proc.returncode == 0, proc.stderr[-3000:]
    text = (project / "build-requirements.lock").read_text()
    assert "# core==0.3.0's build backend asks for: wheel\n" in text
    assert "\nwheel==" in text
