"""The GitHub workflows: each validates against GitHub's workflow schema (check-jsonschema's
vendored copy, no network), a broken one is rejected, and the image workflow takes its
variant list from `reprobuild matrix` instead of repeating it."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import yaml

REPO = Path(__file__).resolve().parents[2]
WORKFLOWS = sorted((REPO / ".github" / "workflows").glob("*.y*ml"))
BUILD = REPO / ".github" / "workflows" / "build-images.yml"


def check_jsonschema(*paths: Path) -> subprocess.CompletedProcess[str]:
    tool = Path(sys.executable).parent / "check-jsonschema"
    if not tool.is_file():
        pytest.fail(f"{tool} is missing: install the test extra (check-jsonschema)")
    return subprocess.run(
        [str(tool), "--builtin-schema", "vendor.github-workflows", *map(str, paths)],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )


def load(path: Path) -> dict[Any, Any]:
    data = yaml.safe_load(path.read_text())
    assert isinstance(data, dict)
    return data


def test_the_expected_workflows_exist() -> None:
    assert {p.name for p in WORKFLOWS} >= {"ci.yml", "build-images.yml"}


@pytest.mark.parametrize("workflow", WORKFLOWS, ids=lambda p: p.name)
def test_workflow_matches_githubs_schema(workflow: Path) -> None:
    result = check_jsonschema(workflow)
    assert result.returncode == 0, result.stdout + result.stderr


def test_a_broken_workflow_is_rejected(tmp_path: Path) -> None:
    broken = tmp_path / "broken.yml"
    broken.write_text(
        "name: broken\n"
        "on: push\n"
        "jobs:\n"
        "  build:\n"
        "    steps:\n"  # no runs-on
        "      - run: echo hi\n"
        "        timeout-minutes: soon\n"  # not a number
    )
    result = check_jsonschema(broken)
    assert result.returncode == 1
    assert "Schema validation errors" in result.stdout + result.stderr


def test_ci_runs_the_suite_through_ci_run() -> None:
    steps = load(REPO / ".github" / "workflows" / "ci.yml")["jobs"]["test"]["steps"]
    assert any(".ci/run" in str(step.get("run", "")) for step in steps)


def test_build_workflow_takes_its_matrix_from_reprobuild_matrix() -> None:
    flow = load(BUILD)
    on = flow[True] if True in flow else flow["on"]  # YAML 1.1 reads `on:` as true
    assert {"workflow_call", "workflow_dispatch"} <= set(on)
    assert {"project", "registry", "push"} <= set(on["workflow_call"]["inputs"])

    jobs = flow["jobs"]
    matrix_job, build = jobs["matrix"], jobs["build"]
    producing = [s for s in matrix_job["steps"] if "reprobuild matrix" in str(s.get("run", ""))]
    assert len(producing) == 1 and producing[0]["id"] == "matrix"
    assert "--format github" in producing[0]["run"]
    assert '"$GITHUB_OUTPUT"' in producing[0]["run"]
    assert matrix_job["outputs"]["matrix"] == "${{ steps.matrix.outputs.matrix }}"

    assert build["needs"] == "matrix"
    assert build["strategy"]["matrix"] == "${{ fromJSON(needs.matrix.outputs.matrix) }}"
    assert build["runs-on"] == "${{ matrix.runs-on }}"  # GPU variants land on GPU runners
    text = BUILD.read_text()
    # the variant list is never written into the workflow itself
    for listed in ("include:", "variant: cpu", "- cpu\n"):
        assert listed not in text


def test_build_workflow_builds_pushes_by_digest_smokes_and_uploads() -> None:
    build = load(BUILD)["jobs"]["build"]
    steps = build["steps"]
    runs = "\n".join(str(s.get("run", "")) for s in steps)
    assert re.search(r'reprobuild image "\$PROJECT" --variant "\$VARIANT" .*--json', runs)
    # issue 11: built twice with buildah from a clean state; the job fails when the IDs differ
    assert "--builder buildah --no-cache" in runs and "for n in 1 2" in runs
    assert '[ "$first" != "$second" ]' in runs and "exit 1" in runs
    assert build["env"]["VARIANT"] == "${{ matrix.variant }}"
    assert 'docker push "$REF"' in runs and "RepoDigests" in runs
    assert "--gpus all" in runs and '"$GPU" = true' in runs
    assert 'reprobuild inspect "$IMAGE" --json > out/manifest.json' in runs
    upload = [s for s in steps if str(s.get("uses", "")).startswith("actions/upload-artifact@")]
    assert len(upload) == 1
    assert upload[0]["with"]["name"] == "manifest-${{ matrix.variant }}"


def test_actions_are_pinned_to_full_commit_shas() -> None:
    used = [
        str(step["uses"])
        for workflow in WORKFLOWS
        for job in load(workflow)["jobs"].values()
        for step in job.get("steps", [])
        if "uses" in step
    ]
    assert used
    for action in used:
        assert re.fullmatch(r"[\w.-]+/[\w./-]+@[0-9a-f]{40}", action), action


def test_inputs_reach_shell_lines_only_through_env() -> None:
    """`${{ inputs.x }}` inside a run: line is shell injection; they go through env: instead."""
    for workflow in WORKFLOWS:
        for job in load(workflow)["jobs"].values():
            for step in job.get("steps", []):
                assert "${{" not in str(step.get("run", "")), (workflow.name, step)
