"""`reprobuild matrix` against the config it reads, and `--variant` through main(argv) with
`render` (no engine: DOCKER_HOST points at a socket that does not exist)."""

from __future__ import annotations

import gc
import json
import warnings
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import yaml

from reprobuild.bases.baselock import load_base_lock
from reprobuild.bases.catalog import load_catalog
from reprobuild.cli import main
from reprobuild.errors import ConfigError, LockfileError
from reprobuild.imaging.matrix import matrix
from reprobuild.imaging.plan import default_tag
from reprobuild.locks.lockfile import load_lock
from reprobuild.project.config import DEFAULT_RUNNER_CPU, DEFAULT_RUNNER_GPU, load_config

REPO = Path(__file__).resolve().parents[2]


@pytest.fixture
def proj(project: Callable[[str], Path], monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.setenv("DOCKER_HOST", "unix:///nonexistent.sock")
    monkeypatch.setenv("SOURCE_DATE_EPOCH", "1700000000")
    return project("matrix")


def cli(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    # `render` of a base outside the catalog asks the (absent) engine for its ENTRYPOINT, and
    # docker-py leaks the socket of that failed connect: collect it here, as test_cli does.
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", ResourceWarning)
        try:
            code = main(list(argv))
        finally:
            gc.collect()
    captured = capsys.readouterr()
    return code, captured.out, captured.err


def matrix_of(capsys: pytest.CaptureFixture[str], *argv: str) -> dict[str, Any]:
    code, out, err = cli(capsys, "matrix", *argv)
    assert (code, err) == (0, ""), err
    data: dict[str, Any] = json.loads(out)
    return data


# --------------------------------------------------------------------------- the matrix


def test_matrix_lists_every_variant_of_the_config_with_its_fields(
    proj: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    config = load_config(proj)
    document = matrix_of(capsys, str(proj), "--format", "github")
    assert list(document) == ["include"]
    entries = document["include"]
    assert [e["variant"] for e in entries] == [v.name for v in config.variants]
    assert [e["variant"] for e in entries] == ["cpu", "cpu-six", "gpu-25.01", "gpu-25.10"]
    for entry, variant in zip(entries, config.variants, strict=True):
        assert set(entry) == {"variant", "gpu", "runs-on", "lock", "base", "tag"}
        assert entry["gpu"] is variant.gpu
        assert entry["runs-on"] == list(variant.runner)
        assert proj / entry["lock"] == variant.lock
        assert entry["base"] == variant.base
        sha = load_lock(variant.lock).sha256
        assert entry["tag"] == f"reprobuild-test/matrix:{variant.name}-{sha[:12]}"
        assert entry["tag"] == default_tag(config.name, variant.name, sha)
        if variant.gpu:  # GPU variants go to runners labelled for GPUs, CPU ones never do
            assert {"self-hosted", "gpu"} <= set(entry["runs-on"])
        else:
            assert entry["runs-on"] == list(DEFAULT_RUNNER_CPU)
    by_name = {e["variant"]: e for e in entries}
    assert by_name["cpu"]["lock"] == "requirements.lock"
    assert by_name["cpu-six"]["lock"] == "requirements-six.lock"
    assert by_name["gpu-25.01"]["runs-on"] == list(DEFAULT_RUNNER_GPU)
    assert by_name["gpu-25.10"]["runs-on"] == ["self-hosted", "linux", "x64", "gpu", "h100"]
    # two variants on one lock still get distinct tags
    assert len({e["tag"] for e in entries}) == len(entries)


def test_github_format_is_one_line_and_json_is_the_same_document(
    proj: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    code, github, _ = cli(capsys, "matrix", str(proj), "--format", "github")
    assert code == 0
    assert github.count("\n") == 1 and github.endswith("}\n") and " " not in github.strip()
    code, pretty, _ = cli(capsys, "matrix", str(proj))  # json is the default
    assert code == 0
    assert pretty.count("\n") > 10
    assert json.loads(github) == json.loads(pretty) == matrix(load_config(proj))


def test_implicit_variants_of_a_project_without_matrix(
    project: Callable[[str], Path], capsys: pytest.CaptureFixture[str]
) -> None:
    root = project("tiny-gpu")
    data = yaml.safe_load((root / "reprobuild.yaml").read_text())
    data["base"]["gpu"] = "registry.example.com/nvidia/pytorch@sha256:" + "cd" * 32
    (root / "reprobuild.yaml").write_text(yaml.safe_dump(data))
    entries = matrix_of(capsys, str(root), "--format", "github")["include"]
    assert [(e["variant"], e["gpu"], e["lock"]) for e in entries] == [
        ("cpu", False, "requirements.lock"),
        ("gpu", True, "requirements-gpu.lock"),
    ]
    assert entries[1]["runs-on"] == list(DEFAULT_RUNNER_GPU)


def test_matrix_reads_every_lock_so_a_bad_one_fails_the_matrix_job(proj: Path) -> None:
    (proj / "requirements-six.lock").write_text("six==1.17.0\n")
    with pytest.raises(LockfileError) as info:
        matrix(load_config(proj))
    assert "requirements-six.lock:1" in info.value.message


def test_no_variants_is_an_error(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    root = tmp_path / "p"
    root.mkdir()
    (root / "requirements.lock").write_text("six==1.17.0 --hash=sha256:" + "0" * 64 + "\n")
    (root / "reprobuild.yaml").write_text(
        "name: p\nlock: requirements.lock\nbase:\n  gpu: x@sha256:" + "0" * 64 + "\n"
    )
    with pytest.raises(ConfigError):
        matrix(load_config(root))
    code, out, err = cli(capsys, "matrix", str(root))
    assert (code, out) == (1, "")
    assert err == (
        f"error: {root.resolve() / 'reprobuild.yaml'}: no variants to build: set base.cpu, "
        "or gpu_lock and base.gpu, or a matrix:\n"
    )


def test_bad_format_is_a_usage_error(proj: Path, capsys: pytest.CaptureFixture[str]) -> None:
    code, _, err = cli(capsys, "matrix", str(proj), "--format", "yaml")
    assert code == 2
    assert "invalid choice: 'yaml'" in err


# --------------------------------------------------------------------------- --variant


def dockerfile(out: Path) -> str:
    return (out / "Dockerfile").read_text()


def test_render_variant_uses_its_lock_and_default_output_dir(
    proj: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    code, out, err = cli(capsys, "render", str(proj), "--variant", "cpu-six")
    assert (code, err) == (0, "")
    ctx = proj.resolve() / ".reprobuild" / "context-cpu-six"
    assert out == f"{ctx}\n"
    assert (ctx / "requirements.lock").read_text().count("six==1.17.0") == 1
    assert "idna" not in (ctx / "requirements.lock").read_text()
    sha = load_lock(proj / "requirements-six.lock").sha256
    assert f"(sha256 {sha})" in dockerfile(ctx)
    assert "REPROBUILD_VARIANT=cpu" in dockerfile(ctx)


def test_render_gpu_variant_uses_its_base(
    proj: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    code, _, err = cli(
        capsys, "render", str(proj), "--variant", "gpu-25.10", "-o", str(tmp_path / "g")
    )
    assert code == 0
    assert err == ""  # the catalog entry names its entrypoint; the lock pins its digest
    locked = load_base_lock(proj).bases["ngc-pytorch-25.10"]
    assert locked.ref == load_catalog().get("ngc-pytorch-25.10").ref
    text = dockerfile(tmp_path / "g")
    assert f"FROM {locked.ref.by_digest()} AS deps" in text
    assert 'REPROBUILD_BASE_ENTRYPOINT="[\\"/opt/nvidia/nvidia_entrypoint.sh\\"]"' in text
    assert "--system-site-packages" in text
    assert "REPROBUILD_VARIANT=gpu" in text
    assert f"(sha256 {load_lock(proj / 'requirements-gpu.lock').sha256})" in text


def test_implicit_cpu_variant_renders_exactly_like_no_variant(
    project: Callable[[str], Path],
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("SOURCE_DATE_EPOCH", "1700000000")
    root = project("tiny")
    assert cli(capsys, "render", str(root), "-o", str(tmp_path / "a"))[0] == 0
    assert cli(capsys, "render", str(root), "--variant", "cpu", "-o", str(tmp_path / "b"))[0] == 0
    assert dockerfile(tmp_path / "a") == dockerfile(tmp_path / "b")


def test_base_overrides_the_variants_base(
    proj: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    other = "127.0.0.1:5000/reprobuild/debian-python@sha256:" + "12" * 32
    code, _, _ = cli(
        capsys,
        "render",
        str(proj),
        "--variant",
        "cpu-six",
        "--base",
        other,
        "-o",
        str(tmp_path / "o"),
    )
    assert code == 0
    assert f"FROM 127.0.0.1:5000/reprobuild/debian-python@sha256:{'12' * 32} AS deps" in dockerfile(
        tmp_path / "o"
    )


def test_unknown_variant_is_one_error_line_listing_the_known_ones(
    proj: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    code, out, err = cli(capsys, "render", str(proj), "--variant", "gpu-24.12")
    assert (code, out) == (1, "")
    lines = err.splitlines()
    assert lines[0] == (
        f"error: {proj.resolve() / 'reprobuild.yaml'}: no variant 'gpu-24.12'; "
        "known variants: cpu, cpu-six, gpu-25.01, gpu-25.10"
    )
    assert lines[1:] == ["hint: list them with `reprobuild matrix`; add one under `matrix:`"]
    assert not (proj / ".reprobuild").exists()


def test_image_with_unknown_variant_fails_before_any_engine(
    proj: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    code, _, err = cli(capsys, "image", str(proj), "--variant", "nope")
    assert code == 1
    assert "no variant 'nope'; known variants: cpu, cpu-six, gpu-25.01, gpu-25.10" in err


def test_gpu_flag_conflicting_with_a_cpu_variant(
    proj: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    code, _, err = cli(capsys, "render", str(proj), "--variant", "cpu-six", "--gpu")
    assert code == 1
    assert err.splitlines() == [
        "error: --gpu conflicts with --variant cpu-six, a CPU variant",
        "hint: drop --gpu: the variant says whether it is a GPU build",
    ]
    # --gpu that agrees with the variant is redundant, not an error
    code, _, _ = cli(
        capsys, "render", str(proj), "--variant", "gpu-25.01", "--gpu", "-o", str(tmp_path / "g")
    )
    assert code == 0


def test_example_project_declares_a_matrix(capsys: pytest.CaptureFixture[str]) -> None:
    """images/digits-torch shows matrix: on a real project; its entries are buildable
    (catalog bases, existing locks)."""
    example = REPO / "images" / "digits-torch"
    config = load_config(example)
    assert config.matrix, "images/digits-torch should declare a matrix:"
    entries = matrix_of(capsys, str(example), "--format", "github")["include"]
    assert [e["variant"] for e in entries] == [v.name for v in config.matrix]


# ------------------------------------------------------------------------- trial matrix


def test_trials_make_a_run_matrix_with_the_seed_the_runtime_derives(
    proj: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    from reprobuild_entrypoint.settings import from_environ

    builds = matrix_of(capsys, str(proj))["include"]
    runs = matrix_of(capsys, str(proj), "--trials", "3", "--seed", "11")["include"]
    assert len(runs) == 3 * len(builds)
    assert [(e["variant"], e["trial"]) for e in runs[:3]] == [("cpu", 0), ("cpu", 1), ("cpu", 2)]
    for run in runs:
        assert run["env"] == {"REPRO_SEED": "11", "REPRO_TRIAL": str(run["trial"])}
        settings = from_environ(run["env"])  # what the runtime in the image derives
        assert run["seed"] == settings.seed and run["experiment_seed"] == 11
    assert len({r["seed"] for r in runs[:3]}) == 3  # trials differ
    project_seed = load_config(proj).seed
    default = matrix_of(capsys, str(proj), "--trials", "1")["include"][0]
    assert default["experiment_seed"] == project_seed


@pytest.mark.parametrize(
    ("argv", "expected"),
    [
        (["--trials", "0"], "--trials 0: use a whole number from 1 to 1000"),
        (["--trials", "1001"], "--trials 1001: use a whole number from 1 to 1000"),
        (["--seed", "3"], "--seed applies to trials: give --trials N too"),
        (["--trials", "2", "--seed", "-1"], "--seed -1: use a whole number from 0 to"),
    ],
)
def test_bad_trial_options_are_one_line(
    proj: Path, capsys: pytest.CaptureFixture[str], argv: list[str], expected: str
) -> None:
    code, out, err = cli(capsys, "matrix", str(proj), *argv)
    assert code == 2 and out == ""
    assert err.startswith(f"error: {expected}"), err


def test_default_tag_tells_two_selections_of_one_lock_apart() -> None:
    """One uv.lock read for other extras or groups installs other packages: the default tag
    must not be the same, or the second build would take the first one's tag. Main only keeps
    the plain ``NAME:VARIANT-<lock sha>`` tag."""
    from reprobuild.locks.lockfile import LockChoice

    sha = "ab" * 32
    plain = default_tag("team/demo", "cpu", sha)
    assert plain == "team/demo:cpu-" + sha[:12]
    assert default_tag("team/demo", "cpu", sha, LockChoice()) == plain
    tags = {
        default_tag("team/demo", "cpu", sha, choice)
        for choice in (
            LockChoice(extras=("cuda",)),
            LockChoice(extras=("cpu",)),
            LockChoice(groups=("dev",)),
            LockChoice(default_groups=True),
        )
    }
    assert len(tags) == 4
    assert all(t.startswith(plain + "-") and len(t) == len(plain) + 9 for t in tags)


def test_platforms_give_an_entry_per_variant_and_platform(
    project: Callable[[str], Path], capsys: pytest.CaptureFixture[str]
) -> None:
    proj = project("matrix")
    plain = matrix_of(capsys, str(proj))["include"]
    both = matrix_of(capsys, str(proj), "--platform", "linux/amd64,linux/arm64")["include"]
    assert len(both) == 2 * len(plain)
    for i, entry in enumerate(plain):
        amd, arm = both[2 * i], both[2 * i + 1]
        assert (amd["platform"], arm["platform"]) == ("linux/amd64", "linux/arm64")
        assert amd["tag"] == entry["tag"] and arm["tag"] == entry["tag"] + "-arm64"
        assert {k: v for k, v in amd.items() if k != "platform"} == entry
    trials = matrix_of(capsys, str(proj), "--platform", "linux/arm64", "--trials", "2")
    assert [(e["platform"], e["trial"]) for e in trials["include"][:2]] == [
        ("linux/arm64", 0),
        ("linux/arm64", 1),
    ]


def test_a_lock_that_does_not_cover_a_platform_fails_the_matrix_naming_the_package(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    wild = REPO / "tests" / "data" / "lockfiles" / "wild" / "pyannote-audio-4.0.7"
    (tmp_path / "uv.lock").write_bytes((wild / "uv.lock").read_bytes())
    (tmp_path / "pyproject.toml").write_bytes((wild / "pyproject.toml").read_bytes())
    (tmp_path / "reprobuild.yaml").write_text(
        "name: team/audio\nlock: uv.lock\nbase:\n  cpu: python-3.11-slim-bookworm\n"
    )
    assert matrix_of(capsys, str(tmp_path), "--platform", "linux/amd64")["include"]
    code, out, err = cli(capsys, "matrix", str(tmp_path), "--platform", "linux/amd64,linux/arm64")
    assert (code, out) == (1, "")
    [line] = [ln for ln in err.splitlines() if ln.startswith("error:")]
    assert "torchcodec 0.10.0 has no wheel for CPython 3.11 on linux aarch64" in line
    code, out, err = cli(capsys, "matrix", str(tmp_path), "--platform", "linux/sparc")
    assert code != 0 and "not a platform reprobuild builds for" in err
