"""``reprobuild init`` selects the extra or group of a native lock that brings a package the
command imports (reprobuild.project.imports, reprobuild.locks.selectors).

GPJax's regression example (github.com/JaxGaussianProcesses/GPJax at 9ba68a4, poetry.lock)
imports matplotlib, which its lock has in the ``docs`` group only: init read the lock for the
main group, the image built, and the first run died on ``ModuleNotFoundError: No module named
'matplotlib'``, with nothing at init saying a group was missing. ``uv run``/``poetry run`` find
such a package in the developer's environment; the image must carry it.
"""

from __future__ import annotations

import json
import os
import shutil
import threading
from pathlib import Path

from reprobuild.imaging.initservices import init_services
from reprobuild.locks.selectors import lock_selectors
from reprobuild.project.config import LockSelection, load_config
from reprobuild.project.imports import command_imports, distributions_for
from reprobuild.project.init import InitOptions, init_project

NATIVE = Path(__file__).resolve().parent.parent / "data" / "lockfiles" / "native"


def _uv_project(tmp_path: Path, train: str) -> Path:
    project = tmp_path / "demo"
    shutil.copytree(NATIVE / "uv-extras", project)
    (project / "train.py").write_text(train)
    return project


def test_command_imports_reads_the_script_and_the_project_modules_it_imports(
    tmp_path: Path,
) -> None:
    (tmp_path / "examples").mkdir()
    (tmp_path / "examples" / "fit.py").write_text(
        "import os, json\n"
        "from jax import config\n"
        "import matplotlib.pyplot as plt\n"
        "from examples.utils import style\n"
        "import mypkg\n"
        "from sklearn.datasets import load_digits\n"
        "try:\n"
        "    import wandb\n"
        "except ImportError:\n"
        "    wandb = None\n"
        "def main():\n"
        "    import yaml\n"
    )
    (tmp_path / "examples" / "utils.py").write_text("import seaborn\nfrom . import helpers\n")
    (tmp_path / "examples" / "helpers.py").write_text("import cv2\n")
    (tmp_path / "mypkg").mkdir()
    (tmp_path / "mypkg" / "__init__.py").write_text("import never_read\n")
    found = command_imports(tmp_path, ("python", "-u", "examples/fit.py", "--steps", "3"))
    assert found == {
        "jax": "examples/fit.py",
        "matplotlib": "examples/fit.py",
        "sklearn": "examples/fit.py",
        "yaml": "examples/fit.py",
        "seaborn": "examples/utils.py",
        "cv2": "examples/helpers.py",
    }
    assert distributions_for("sklearn") == ("scikit-learn",)
    assert distributions_for("PIL") == ("pillow",)
    assert distributions_for("tensorflow_probability") == ("tensorflow-probability",)


def test_command_imports_of_a_module_a_console_script_and_a_test_path(tmp_path: Path) -> None:
    (tmp_path / "tests").mkdir()
    (tmp_path / "tests" / "test_ppo.py").write_text("import gymnasium\n")
    command = ("python", "-m", "pytest", "-s", "tests/test_ppo.py::TestPPO::test_cartpole")
    assert command_imports(tmp_path, command) == {
        "pytest": "`python -m pytest -s tests/test_ppo.py::TestPPO::test_cartpole`",
        "gymnasium": "tests/test_ppo.py",
    }
    assert command_imports(tmp_path, ("pytest", "tests/test_ppo.py")) == {
        "pytest": "`pytest tests/test_ppo.py`",
        "gymnasium": "tests/test_ppo.py",
    }
    assert command_imports(tmp_path, ("python", "-c", "import torch")) == {}
    assert command_imports(tmp_path, ("python", "missing.py")) == {}


def test_init_selects_the_extra_that_brings_what_the_script_imports(tmp_path: Path) -> None:
    project = _uv_project(tmp_path, "import numpy\nimport sympy\n")
    result = init_project(project, InitOptions(), init_services())
    assert load_config(project).select == LockSelection(python="3.11", extras=("symbolic",))
    assert (
        "train.py imports sympy, which uv.lock installs only with its extra symbolic: selected "
        "it, as `--extra symbolic` would (select: in reprobuild.yaml)"
    ) in result.notes


def test_init_selects_the_group_that_brings_what_the_script_imports(tmp_path: Path) -> None:
    project = _uv_project(tmp_path, "import filelock\nimport jinja2\n")
    result = init_project(project, InitOptions(), init_services())
    assert load_config(project).select == LockSelection(python="3.11", groups=("dev",))
    assert any(
        "imports filelock, which uv.lock installs only with its group dev" in n
        for n in result.notes
    )


def test_init_selects_the_group_of_the_console_script_the_command_runs(tmp_path: Path) -> None:
    """rl-replicas' own integration test runs under `python -m pytest`, which its uv.lock
    has in the dev group only."""
    project = _uv_project(tmp_path, "")
    options = InitOptions(command=("python", "-m", "filelock"))
    result = init_project(project, options, init_services())
    assert load_config(project).select == LockSelection(python="3.11", groups=("dev",))
    assert (
        "`python -m filelock` runs filelock, which uv.lock installs only with its group dev: "
        "selected it, as `--group dev` would (select: in reprobuild.yaml)"
    ) in result.notes


def test_init_adds_nothing_the_main_dependencies_or_the_flags_already_bring(
    tmp_path: Path,
) -> None:
    project = _uv_project(tmp_path, "import numpy\nimport sympy\nimport not_locked_anywhere\n")
    result = init_project(project, InitOptions(extras=("symbolic",)), init_services())
    assert load_config(project).select == LockSelection(python="3.11", extras=("symbolic",))
    assert not any("selected it" in n for n in result.notes)


def test_lock_selectors_of_each_native_format(tmp_path: Path) -> None:
    assert lock_selectors(NATIVE / "uv-extras" / "uv.lock") == (("symbolic", "windows"), ("dev",))
    (tmp_path / "poetry.lock").write_text(
        "# This file is automatically @generated by Poetry 1.8.3 and should not be changed by "
        'hand.\n\n[metadata]\nlock-version = "2.0"\n'
    )
    (tmp_path / "pyproject.toml").write_text(
        "[tool.poetry.dependencies]\npython = '^3.11'\n"
        "[tool.poetry.extras]\nplot = ['matplotlib']\n"
        "[tool.poetry.group.docs.dependencies]\nmkdocs = '*'\n"
        "[tool.poetry.dev-dependencies]\npytest = '*'\n"
    )
    assert lock_selectors(tmp_path / "poetry.lock") == (("plot",), ("dev", "docs"))
    (tmp_path / "Pipfile.lock").write_text(
        json.dumps({"_meta": {}, "default": {}, "develop": {}, "train": {}})
    )
    assert lock_selectors(tmp_path / "Pipfile.lock") == ((), ("dev", "train"))
    (tmp_path / "pdm.lock").write_text(
        '[metadata]\ngroups = ["default", "docs", "test"]\nlock_version = "4.5.0"\n'
    )
    assert lock_selectors(tmp_path / "pdm.lock") == ((), ("docs", "test"))
    (tmp_path / "requirements.txt").write_text("numpy==1.0 --hash=sha256:" + "0" * 64 + "\n")
    assert lock_selectors(tmp_path / "requirements.txt") == ((), ())
    (tmp_path / "uv.lock").write_text("not [ toml")
    assert lock_selectors(tmp_path / "uv.lock") == ((), ())


def test_lock_selectors_refuse_a_fifo_without_waiting_on_it(tmp_path: Path) -> None:
    """A poetry.lock whose pyproject.toml is a FIFO: no selectors, at once (a plain read of a
    FIFO waits for a writer that never comes)."""
    (tmp_path / "poetry.lock").write_text(
        "# This file is automatically @generated by Poetry 1.8.3 and should not be changed by "
        'hand.\n\n[metadata]\nlock-version = "2.0"\n'
    )
    os.mkfifo(tmp_path / "pyproject.toml")
    got: list[object] = []
    reader = threading.Thread(
        target=lambda: got.append(lock_selectors(tmp_path / "poetry.lock")), daemon=True
    )
    reader.start()
    reader.join(10)
    assert got == [((), ())]


def test_command_imports_skips_files_it_cannot_read(tmp_path: Path) -> None:
    """A file of newer syntax, or nested past the parser's depth, is left unread, not fatal."""
    (tmp_path / "deep.py").write_text("import numpy\nx = " + "(" * 5000 + ")" * 5000 + "\n")
    (tmp_path / "train.py").write_text("import deep\nimport scipy\nmatch = 1\ndef f(:\n")
    assert command_imports(tmp_path, ("python", "train.py")) == {}
    (tmp_path / "train.py").write_text("import deep\nimport scipy\n")
    assert command_imports(tmp_path, ("python", "train.py")) == {"scipy": "train.py"}
