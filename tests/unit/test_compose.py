"""``reprobuild compose`` without an engine: the document for CPU and GPU, pinning, bad inputs,
the atomic write, and the generated YAML compared whole against golden files (the files in
``compose/`` are such golden files too: what the library renders for a placeholder image).

Refresh after an intended change, then review the diff like code:
    REPROBUILD_UPDATE_GOLDEN=1 python -m pytest tests/unit/test_compose.py
"""

from __future__ import annotations

import gc
import os
import shutil
import warnings
from pathlib import Path
from typing import Any

import pytest
import yaml

from reprobuild.checks import verify
from reprobuild.cli import main
from reprobuild.cluster.compose import (
    IMAGE_PLACEHOLDER,
    ComposeSpec,
    compose_project,
    document,
    render,
)
from reprobuild.cluster.output import write_output
from reprobuild.cluster.pinning import pin_image, pinned_reference
from reprobuild.errors import (
    ConfigError,
    ImageNotBuiltError,
    ImageRefError,
    OutputError,
    ReprobuildError,
)
from reprobuild.imaging.plan import plan_build, project_tag

TESTS = Path(__file__).parent.parent
REPO = TESTS.parent
GOLDEN = TESTS / "golden"
TINY = TESTS / "data" / "projects" / "tiny"
ID = "sha256:" + "ab" * 32
DIGEST = "sha256:" + "cd" * 32


def load(text: str) -> dict[str, Any]:
    data: dict[str, Any] = yaml.safe_load(text)
    return data


class FakeEngine:
    """Stands in for reprobuild.backends.engine.Engine: images by reference, as inspected."""

    def __init__(self, images: dict[str, dict[str, Any]]) -> None:
        self.images = images
        self.asked: list[str] = []

    def image_id(self, ref: str) -> str | None:
        self.asked.append(ref)
        return str(self.images[ref]["Id"]) if ref in self.images else None

    def inspect(self, ref: str) -> dict[str, Any]:
        return self.images[ref]


def attrs(
    image_id: str = ID, repo_digests: tuple[str, ...] = (), variant: str | None = "cpu"
) -> dict[str, Any]:
    labels = {"io.reprobuild.variant": variant} if variant else {}
    return {"Id": image_id, "RepoDigests": list(repo_digests), "Config": {"Labels": labels}}


def tiny_tag(gpu: bool = False) -> str:
    from reprobuild.project.config import load_config

    return project_tag(load_config(TINY), gpu=gpu)


# ---- the document ---------------------------------------------------------------------------


def test_cpu_document_has_train_and_two_verify_runs() -> None:
    data = load(render(document(ComposeSpec(ID, seed=7, determinism="warn", command=("x",)))))
    assert list(data) == ["services"]
    assert list(data["services"]) == ["prepare", "train", "verify-a", "verify-b"]
    train = data["services"]["train"]
    assert train["image"] == ID
    assert train["command"] == ["x"]
    assert train["environment"] == {
        "REPRO_SEED": "${REPRO_SEED:-7}",
        "REPRO_DETERMINISM": "${REPRO_DETERMINISM:-warn}",
        "REPRO_TRIAL": "${REPRO_TRIAL:-}",
        "REPRO_RUN_DIR": "/reprobuild-run",
        "REPRO_OUTPUT_DIR": "/out",
        "REPRO_IMAGE": ID,  # the MLflow tags name the image: a container cannot see it
    }
    assert train["volumes"] == [
        "${REPRO_DATA:-./data}:/data:ro",
        "./runs/train:/reprobuild-run",
        "./out/train:/out",
    ]
    assert train["network_mode"] == "none"
    assert train["depends_on"] == {"prepare": {"condition": "service_completed_successfully"}}
    assert "deploy" not in train and "ulimits" not in train and "profiles" not in train
    for name in ("verify-a", "verify-b"):
        run = data["services"][name]
        assert run["profiles"] == ["verify"]
        assert run["volumes"][1:] == [f"./runs/{name}:/reprobuild-run", f"./out/{name}:/out"]
        # the same run as train but for where it writes
        strip = {k: v for k, v in run.items() if k not in ("profiles", "volumes")}
        assert strip == {k: v for k, v in train.items() if k != "volumes"}
    prepare = data["services"]["prepare"]
    assert prepare["user"] == "0:0" and prepare["network_mode"] == "none"
    assert prepare["entrypoint"][:4] == ["install", "-d", "-m", "0777"]
    made = set(prepare["entrypoint"][4:])
    for name in ("train", "verify-a", "verify-b"):
        assert {f"/reprobuild-prepare/runs/{name}", f"/reprobuild-prepare/out/{name}"} <= made


def test_gpu_document_reserves_gpus_for_every_run() -> None:
    data = load(render(document(ComposeSpec(ID, gpu=True))))
    for name in ("train", "verify-a", "verify-b"):
        run = data["services"][name]
        assert run["deploy"] == {
            "resources": {
                "reservations": {
                    "devices": [{"driver": "nvidia", "count": "all", "capabilities": ["gpu"]}]
                }
            }
        }
        assert run["ulimits"] == {"memlock": -1, "stack": 67108864}
        assert run["shm_size"] == "1gb"
    assert "deploy" not in data["services"]["prepare"]


def test_no_seed_or_command_leaves_the_image_its_own() -> None:
    data = load(render(document(ComposeSpec(ID))))
    train = data["services"]["train"]
    assert "command" not in train  # the image's CMD
    assert train["environment"]["REPRO_SEED"] == "${REPRO_SEED:-}"  # empty: the image's seed
    assert train["environment"]["REPRO_DETERMINISM"] == "${REPRO_DETERMINISM:-}"


def test_command_words_are_data_not_interpolation() -> None:
    words = ("python", "-c", 'print("$HOME ${X:?boom}")', "it's: {a: b}", "- not a list")
    text = render(document(ComposeSpec(ID, command=words)))
    train = load(text)["services"]["train"]
    assert train["command"] == ["python", "-c", 'print("$$HOME $${X:?boom}")', *words[3:]]


def test_mount_points_are_verify_s() -> None:
    """compose mounts the run's directories where verify does: both take them from the
    runtime's contract."""
    from reprobuild_entrypoint import contract

    assert verify.DEFAULT_DATA_DIR == contract.DATA_DIR
    assert (verify.OUT_DIR, verify.RECORD_DIR) == (contract.OUT_DIR, contract.RECORD_DIR)
    volumes = load(render(document(ComposeSpec(ID, command=("a",)))))["services"]["train"]
    targets = {
        v.rpartition(":")[2] if isinstance(v, str) else v["target"] for v in volumes["volumes"]
    }
    assert {contract.OUT_DIR, contract.RECORD_DIR} <= targets


def test_render_is_stable_and_has_no_anchors() -> None:
    spec = ComposeSpec(ID, gpu=True, seed=1, command=("a",))
    assert render(document(spec)) == render(document(spec))
    text = render(document(spec))
    assert "&id" not in text and "*id" not in text
    assert "version:" not in text  # the Compose Specification: no version key


@pytest.mark.parametrize(
    "bad",
    [
        "reprobuild-test/tiny:cpu-0123",  # a tag can move
        "reprobuild-test/tiny",
        "sha256:abc",  # not a full ID
        "Bad Name@" + DIGEST,
        "x@sha256:zz",
        "x\n@" + DIGEST,
        "",
    ],
)
def test_spec_refuses_an_unpinned_or_malformed_image(bad: str) -> None:
    with pytest.raises(ImageRefError):
        ComposeSpec(bad)


def test_spec_refuses_bad_values() -> None:
    with pytest.raises(ReprobuildError, match="seed"):
        ComposeSpec(ID, seed=2**32)
    with pytest.raises(ReprobuildError, match="determinism"):
        ComposeSpec(ID, determinism="sloppy")
    with pytest.raises(ReprobuildError, match="control character"):
        ComposeSpec(ID, command=("python", "a\nb"))


# ---- pinning --------------------------------------------------------------------------------


def test_pin_prefers_the_repo_digest_of_the_same_name() -> None:
    digests = [f"other/name@{DIGEST}", f"127.0.0.1:5000/team/x@sha256:{'ef' * 32}"]
    assert pinned_reference("127.0.0.1:5000/team/x", ID, digests) == (
        f"127.0.0.1:5000/team/x@sha256:{'ef' * 32}"
    )
    # no digest for that name: another repository's digest still names this very image
    assert pinned_reference("team/x", ID, digests) == (f"127.0.0.1:5000/team/x@sha256:{'ef' * 32}")
    # the same repository written another way is the same name
    hub = [f"docker.io/library/python@{DIGEST}", f"a/b@sha256:{'ef' * 32}"]
    assert pinned_reference("python", ID, hub) == f"docker.io/library/python@{DIGEST}"
    # Engine 26's containerd store gives a digest for every tag, a local one too: the one in a
    # registry named outright is the one a node can pull
    local = [f"team/x@{DIGEST}", f"127.0.0.1:5000/team/x-pushed@{DIGEST}"]
    assert pinned_reference("team/x", ID, local) == f"127.0.0.1:5000/team/x-pushed@{DIGEST}"


def test_pin_without_repo_digest_is_the_image_id() -> None:
    assert pinned_reference("team/x", ID, []) == ID
    assert pinned_reference(None, ID, ["garbage"]) == ID
    with pytest.raises(ReprobuildError):
        pinned_reference("team/x", "not-an-id", [])


def test_pin_image_looks_the_tag_up() -> None:
    engine = FakeEngine({"team/x:cpu-1": attrs(repo_digests=(f"team/x@{DIGEST}",))})
    pinned = pin_image(engine, "team/x:cpu-1")
    assert pinned.reference == f"team/x@{DIGEST}"
    assert pinned.id == ID and pinned.requested == "team/x:cpu-1"
    assert pin_image(FakeEngine({ID: attrs()}), ID).reference == ID
    assert pin_image(FakeEngine({"abababababab": attrs()}), "abababababab").reference == ID


def test_unbuilt_image_names_the_tag_and_the_build_command() -> None:
    engine = FakeEngine({})
    with pytest.raises(ImageNotBuiltError) as info:
        compose_project(TINY, engine=engine)
    tag = tiny_tag()
    assert engine.asked == [tag]
    assert str(info.value) == (
        f"no image {tag} on this engine; build it with `reprobuild image {TINY}`"
    )


def test_default_tag_is_the_one_reprobuild_image_gives() -> None:
    from reprobuild.imaging.plan import spec_tag

    spec = plan_build(TINY).spec
    assert tiny_tag() == spec_tag(spec)
    assert tiny_tag().startswith("reprobuild-test/tiny:cpu-")


def test_gpu_without_gpu_lock_is_a_config_error() -> None:
    with pytest.raises(ConfigError, match="gpu_lock"):
        compose_project(TINY, gpu=True, engine=FakeEngine({}))


def test_variant_must_match() -> None:
    tag = tiny_tag()
    with pytest.raises(ReprobuildError, match=r"GPU image .* add --gpu"):
        compose_project(TINY, image=tag, engine=FakeEngine({tag: attrs(variant="gpu")}))
    with pytest.raises(ReprobuildError, match="not built by reprobuild"):
        compose_project(TINY, image=tag, engine=FakeEngine({tag: attrs(variant=None)}))


def test_project_settings_reach_the_document() -> None:
    tag = tiny_tag()
    result = compose_project(TINY, engine=FakeEngine({tag: attrs()}))
    train = load(result.text)["services"]["train"]
    assert train["image"] == ID
    assert train["command"] == ["python", "hello.py"]
    assert train["environment"]["REPRO_SEED"] == "${REPRO_SEED:-7}"
    assert train["environment"]["REPRO_DETERMINISM"] == "${REPRO_DETERMINISM:-warn}"
    assert f"# Image: {ID} ({tag})\n" in result.text


def test_a_digest_reference_is_used_as_written_without_an_engine() -> None:
    ref = f"registry.example.com/team/x@{DIGEST}"
    result = compose_project(TINY, image=ref, engine=FakeEngine({}))
    assert result.image is None
    assert load(result.text)["services"]["train"]["image"] == ref


def test_a_bad_image_option_is_refused() -> None:
    with pytest.raises(ImageRefError):
        compose_project(TINY, image="Not A Ref", engine=FakeEngine({}))


# ---- the output -----------------------------------------------------------------------------


def test_write_output_is_atomic(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    out = tmp_path / "compose.yml"
    old = "# Generated by reprobuild 0.0.1: old\n"
    out.write_text(old)

    def broken(src: str, dst: str) -> None:
        raise OSError(28, "No space left on device")

    monkeypatch.setattr("reprobuild._util.fsutil.os.replace", broken)
    with pytest.raises(OutputError, match=r"cannot write .*No space left"):
        write_output("new\n", out)
    assert out.read_text() == old
    assert sorted(p.name for p in tmp_path.iterdir()) == ["compose.yml"]  # no temp file left
    monkeypatch.undo()
    write_output("new\n", out)
    assert out.read_text() == "new\n"


@pytest.mark.parametrize(
    "content",
    [
        b"services:\n  train:\n    image: mine\n",  # a hand-written compose file
        b"root:x:0:0:root:/root:/bin/bash\n",  # /etc/passwd, as root
        b"# Generated by reprobuil",  # the mark cut short
        b"\x00" * 64,
    ],
    ids=["hand-written", "passwd", "mark-cut-short", "nul-bytes"],
)
def test_write_output_never_replaces_a_file_it_did_not_write(
    tmp_path: Path, content: bytes
) -> None:
    out = tmp_path / "compose.yml"
    out.write_bytes(content)
    out.chmod(0o600)
    with pytest.raises(OutputError, match="reprobuild did not write it") as info:
        write_output("# Generated by reprobuild 9: new\n", out)
    assert str(out) in info.value.message and "\n" not in info.value.message
    assert out.read_bytes() == content
    assert out.stat().st_mode & 0o777 == 0o600
    assert [p.name for p in tmp_path.iterdir()] == ["compose.yml"]


def test_write_output_replaces_its_own_file_and_an_empty_one(tmp_path: Path) -> None:
    out = tmp_path / "compose.yml"
    out.touch()
    write_output("# Generated by reprobuild 9: first\n", out)
    write_output("# Generated by reprobuild 9: second\n", out)
    assert out.read_text() == "# Generated by reprobuild 9: second\n"


def test_write_output_never_replaces_a_symlink(tmp_path: Path) -> None:
    target = tmp_path / "generated.yml"
    target.write_text("# Generated by reprobuild 9: kept\n")
    out = tmp_path / "compose.yml"
    out.symlink_to(target)
    with pytest.raises(OutputError, match="is a symlink"):
        write_output("# Generated by reprobuild 9: new\n", out)
    assert out.is_symlink()
    assert target.read_text() == "# Generated by reprobuild 9: kept\n"


def test_write_output_refuses_a_directory(tmp_path: Path) -> None:
    with pytest.raises(OutputError, match="is a directory"):
        write_output("x\n", tmp_path)


def test_write_output_dash_is_stdout(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    write_output("services: {}\n", Path("-"))
    write_output("services: {}\n", None)
    assert capsys.readouterr().out == "services: {}\n" * 2


def test_cli_without_engine_fails_in_one_line_and_writes_nothing(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setenv("DOCKER_HOST", "unix:///nonexistent.sock")
    for var in ("DOCKER_CONTEXT", "DOCKER_TLS_VERIFY", "DOCKER_CERT_PATH"):
        monkeypatch.delenv(var, raising=False)
    out = tmp_path / "compose.yml"
    # docker-py leaks the socket of its failed connect: collect it here (as test_cli does)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", ResourceWarning)
        try:
            code = main(["compose", str(TINY), "-o", str(out)])
        finally:
            gc.collect()
    assert code == 1
    err = capsys.readouterr().err.splitlines()
    assert err[0].startswith("error: no Docker engine answers at unix:///nonexistent.sock")
    assert not out.exists()
    assert list(tmp_path.iterdir()) == []


def test_cli_digest_image_writes_the_file(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    project = tmp_path / "tiny"
    shutil.copytree(TINY, project)
    out = tmp_path / "sub" / "compose.yml"
    ref = f"team/x@{DIGEST}"
    assert main(["compose", str(project), "--image", ref, "-o", str(out)]) == 0
    assert capsys.readouterr().out == f"{out}\n"
    assert load(out.read_text())["services"]["train"]["image"] == ref
    assert main(["compose", str(project), "--image", ref]) == 0
    assert capsys.readouterr().out == out.read_text()
    assert main(["compose", str(project), "--image", ref, "--env", "A=1", "-o", str(out)]) == 0
    assert "A: '1'" in out.read_text()  # a second -o replaces the file the first one wrote


def test_cli_bad_image_is_one_error_line(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["compose", str(TINY), "--image", "x@sha256:12"]) == 1
    err = capsys.readouterr().err
    assert err.startswith("error: invalid digest 'sha256:12'")
    assert err.count("\n") == 1


# ---- golden files ---------------------------------------------------------------------------

GOLDEN_CASES = {
    GOLDEN / "compose-tiny-cpu.yml": ComposeSpec(
        ID,
        seed=7,
        determinism="warn",
        command=("python", "hello.py"),
        project="reprobuild-test/tiny",
        source="reprobuild-test/tiny:cpu-0123456789ab",
    ),
    GOLDEN / "compose-tiny-gpu.yml": ComposeSpec(
        f"127.0.0.1:5000/reprobuild-test/tiny@{DIGEST}",
        gpu=True,
        seed=7,
        determinism="strict",
        command=("python", "hello.py"),
        project="reprobuild-test/tiny",
        source="reprobuild-test/tiny:gpu-0123456789ab",
    ),
    # the files shipped in compose/ are what the library writes for a placeholder image
    REPO / "compose" / "train.yml": ComposeSpec(IMAGE_PLACEHOLDER),
    REPO / "compose" / "train-gpu.yml": ComposeSpec(IMAGE_PLACEHOLDER, gpu=True),
}


@pytest.mark.parametrize("path", sorted(GOLDEN_CASES), ids=lambda p: p.name)
def test_compose_file_matches_golden(path: Path) -> None:
    text = render(document(GOLDEN_CASES[path]))
    if os.environ.get("REPROBUILD_UPDATE_GOLDEN"):
        path.write_text(text)
    assert path.is_file(), f"missing golden file {path}; run with REPROBUILD_UPDATE_GOLDEN=1"
    assert text == path.read_text()


def test_variant_selects_the_matrix_image_and_its_kind() -> None:
    """--variant NAME looks up the tag `reprobuild image --variant NAME` gives; a GPU variant
    gets the GPU reservation without --gpu."""
    from reprobuild.imaging.plan import spec_tag
    from reprobuild.locks.lockfile import load_lock

    matrix = TINY.parent / "matrix"
    six = (
        f"reprobuild-test/matrix:cpu-six-{load_lock(matrix / 'requirements-six.lock').sha256[:12]}"
    )
    spec = plan_build(matrix, variant_name="cpu-six").spec
    assert spec_tag(spec, "cpu-six") == six
    engine = FakeEngine({six: attrs()})
    compose_project(matrix, variant="cpu-six", engine=engine)
    assert engine.asked == [six]

    gpu_sha = load_lock(matrix / "requirements-gpu.lock").sha256
    gpu_tag = f"reprobuild-test/matrix:gpu-25.10-{gpu_sha[:12]}"
    result = compose_project(
        matrix, variant="gpu-25.10", engine=FakeEngine({gpu_tag: attrs(variant="gpu")})
    )
    train = load(result.text)["services"]["train"]
    assert train["deploy"]["resources"]["reservations"]["devices"][0]["capabilities"] == ["gpu"]
    with pytest.raises(ImageNotBuiltError, match=r"--variant gpu-25\.10"):
        compose_project(matrix, variant="gpu-25.10", engine=FakeEngine({}))
    with pytest.raises(ConfigError, match="no variant 'nope'"):
        compose_project(matrix, variant="nope", engine=FakeEngine({}))


# ---- --env: the user's own variables ---------------------------------------------------------


def test_user_env_follows_reprobuild_s_in_every_run_but_not_prepare() -> None:
    env = (("WANDB_MODE", "offline"), ("DDP_EPOCHS", "40"), ("REPRO_TRIAL", "3"))
    data = load(render(document(ComposeSpec(ID, seed=7, determinism="warn", env=env))))
    assert "environment" not in data["services"]["prepare"]
    for name in ("train", "verify-a", "verify-b"):
        assert list(data["services"][name]["environment"].items()) == [
            ("REPRO_SEED", "${REPRO_SEED:-7}"),
            ("REPRO_DETERMINISM", "${REPRO_DETERMINISM:-warn}"),
            ("REPRO_RUN_DIR", "/reprobuild-run"),
            ("REPRO_OUTPUT_DIR", "/out"),
            ("REPRO_IMAGE", ID),
            ("WANDB_MODE", "offline"),
            ("DDP_EPOCHS", "40"),
            ("REPRO_TRIAL", "3"),  # replaces the shell's ${REPRO_TRIAL:-}
        ]
    text = render(document(ComposeSpec(ID, seed=7, determinism="warn", env=env)))
    assert "# (uid 10001). REPRO_SEED and REPRO_DETERMINISM from the shell override" in text
    assert "# Set by --env for every run: WANDB_MODE, DDP_EPOCHS, REPRO_TRIAL.\n" in text


def test_user_env_values_are_data_for_yaml_and_compose() -> None:
    from helpers import TRICKY_ENV_VALUES

    spec = ComposeSpec(ID, env=tuple(TRICKY_ENV_VALUES.items()))
    environment = load(render(document(spec)))["services"]["train"]["environment"]
    got = {k: v for k, v in environment.items() if k in TRICKY_ENV_VALUES}
    assert all(isinstance(v, str) for v in got.values())
    assert got["DOLLARS"] == "$$HOME $${X:?boom} $$(whoami) $$$$ $$"  # compose reads `$`
    assert {k: v.replace("$$", "$") for k, v in got.items()} == TRICKY_ENV_VALUES


def test_cli_env_reaches_every_run(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    ref = f"team/x@{DIGEST}"
    argv = ["compose", str(TINY), "--image", ref, "--env", "A=1", "--env", "B=$x", "--env", "A=2"]
    assert main(argv) == 0
    data = load(capsys.readouterr().out)
    for name in ("train", "verify-a", "verify-b"):
        assert list(data["services"][name]["environment"])[-2:] == ["A", "B"]
        assert data["services"][name]["environment"]["A"] == "2"
        assert data["services"][name]["environment"]["B"] == "$$x"
