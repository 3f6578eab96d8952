"""Issue 39, the hash-only locks: a hashed requirements file locking docopt 0.6.2 by its
sdist's sha256 alone (no file name, as pip-compile writes it) goes through `init` (the
sdist found on PyPI by that hash, its build requirements locked, the build lock recording
it) and `image` on the real buildah builder; docopt imports inside. docopt only: one small
pure-Python sdist keeps it well under a minute."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

from helpers import MakeTag, build_json, run_cli

pytestmark = [pytest.mark.engine, pytest.mark.registry]
DOCOPT_SDIST = "sha256:49b3a825280bd66b3aa83585ef59c4a8c82f2c8a522dbe754a8bc8d08c85c491"
ENV = {"SOURCE_DATE_EPOCH": "1700000000", "REPROBUILD_SDIST_LOOKUP": "1"}


def test_a_requirements_sdist_is_found_by_hash_and_built(
    tmp_path: Path, base_ref: str, unique_tag: MakeTag
) -> None:
    root = tmp_path / "reqsdist"
    root.mkdir()
    (root / "requirements.txt").write_text(f"docopt==0.6.2 --hash={DOCOPT_SDIST}\n")
    (root / "hello.py").write_text("import docopt\nprint('docopt', docopt.__version__)\n")
    init = run_cli("init", "--command", "python hello.py", "--base", base_ref, str(root), env=ENV)
    assert init.returncode == 0, init.stderr[-3000:]
    build_lock = (root / "build-requirements.lock").read_text()
    assert f"# reprobuild sdist: docopt==0.6.2 docopt-0.6.2.tar.gz {DOCOPT_SDIST}" in build_lock

    tag = unique_tag("reqsdist")
    built = build_json(str(root), "--base", base_ref, "--builder", "buildah", "--tag", tag, env=ENV)
    (docopt,) = built["manifest"]["built_from_source"]
    assert (docopt["name"], docopt["sdist_sha256"]) == ("docopt", DOCOPT_SDIST)
    ran = subprocess.run(
        ["docker", "run", "--rm", tag, "python", "-c", "import docopt; print(docopt.__version__)"],
        capture_output=True, text=True, check=False, timeout=120,
    )  # fmt: skip
    assert ran.returncode == 0, ran.stderr[-2000:]
    assert ran.stdout.strip().splitlines()[-1] == "0.6.2"
