"""A project whose lock does not install the project itself (uv's and Poetry's editable root, a
PDM lock, a requirements lock beside a pyproject.toml): the image puts its own package on the
import path, as `uv run` finds the editable install: /app/src for a src/ layout (issue 51:
rejax's and rl-replicas' own scripts failed with `ModuleNotFoundError` in their images), /app
for a flat one (flax's `python examples/nnx_toy_examples/01_functional_api.py`, whose own
folder is first on sys.path, failed the same way)."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from reprobuild.imaging.plan import plan_build, record_new_base
from reprobuild.imaging.render import render_context

TINY = Path(__file__).resolve().parent.parent / "data" / "projects" / "tiny"  # src/tinyapp


def _project(tmp_path: Path, pyproject: str | None) -> Path:
    project = tmp_path / "tiny"
    shutil.copytree(TINY, project)
    if pyproject is not None:
        (project / "pyproject.toml").write_text(pyproject)
    return project


def _dockerfile(project: Path) -> str:
    planned = plan_build(project)
    record_new_base(planned, lambda _line: None)
    return render_context(planned.spec)["Dockerfile"].data.decode()


@pytest.mark.parametrize(
    "pyproject",
    [
        '[project]\nname = "tinyapp"\nversion = "0.1"\n',
        '[project]\nname = "TinyApp"\n',  # PEP 503 names compared
        '[tool.poetry]\nname = "tinyapp"\nversion = "0.1"\n',
    ],
)
def test_the_projects_own_src_package_is_importable(tmp_path: Path, pyproject: str) -> None:
    text = _dockerfile(_project(tmp_path, pyproject))
    assert "\nENV PYTHONPATH=/app/src\n" in text
    assert text.index("ENV PYTHONPATH=/app/src") < text.index("COPY app/ /app/")


@pytest.mark.parametrize(
    "pyproject",
    [
        None,  # no project named: the files are the user's to import as they like
        '[project]\nname = "other"\n',  # src/ holds another package than the project
        "not toml [",
        '[project]\nname = "six"\n',  # the lock installs it (tiny's lock pins six)
    ],
)
def test_nothing_is_added_otherwise(tmp_path: Path, pyproject: str | None) -> None:
    assert "ENV PYTHONPATH" not in _dockerfile(_project(tmp_path, pyproject))


def _flat(project: Path) -> Path:
    """tiny laid out flat: its package at the top, as flax's is, and include naming it."""
    (project / "src" / "tinyapp").rename(project / "tinyapp")
    shutil.rmtree(project / "src")
    config = project / "reprobuild.yaml"
    config.write_text(config.read_text().replace("  - src\n", "  - tinyapp\n"))
    return project


def test_a_flat_layouts_own_package_is_importable(tmp_path: Path) -> None:
    project = _flat(_project(tmp_path, '[project]\nname = "tinyapp"\nversion = "0.1"\n'))
    text = _dockerfile(project)
    assert "\nENV PYTHONPATH=/app\n" in text
    assert text.index("ENV PYTHONPATH=/app") < text.index("COPY app/ /app/")


@pytest.mark.parametrize("name", ["other", "six"])  # another package; one the lock installs
def test_a_flat_layout_gets_nothing_otherwise(tmp_path: Path, name: str) -> None:
    project = _flat(_project(tmp_path, f'[project]\nname = "{name}"\n'))
    assert "ENV PYTHONPATH" not in _dockerfile(project)
