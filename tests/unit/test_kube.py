"""``reprobuild k8s``: the Indexed Job and headless Service of a multi-node torchrun job,
validated offline against Kubernetes' own JSON schemas (kubernetes-validate, pinned in the test
extras, bundles them per release; strict: an unknown field fails). A manifest with a bad field
fails the same validation, so the check is real. Engine-free: a fake engine serves the image."""

from __future__ import annotations

import shutil
from pathlib import Path
from typing import Any

import kubernetes_validate
import pytest
import yaml

from helpers import FAKE_ID as ID
from helpers import FakeImageEngine as FakeEngine
from reprobuild.cli import main
from reprobuild.cluster.k8s import (
    KUBERNETES_VERSION,
    KubeSpec,
    default_name,
    documents,
    k8s_project,
    render,
)
from reprobuild.cluster.nodes import JobShape
from reprobuild.errors import ImageRefError, ReprobuildError
from reprobuild.imaging.plan import project_tag
from reprobuild.project.config import load_config

DIGEST = "sha256:" + "cd" * 32
TINY = Path(__file__).parent.parent / "data" / "projects" / "tiny"
PUSHED = f"registry.example/team/ddp@{DIGEST}"


def spec(gpu: bool = False, command: tuple[str, ...] = ("python", "train.py")) -> KubeSpec:
    return KubeSpec(
        name="ddp",
        image=PUSHED,
        shape=JobShape(3, 2, gpu=gpu),
        command=command,
        seed=7,
        determinism="strict",
        project="team/ddp",
    )


def validate(doc: dict[str, Any]) -> None:
    kubernetes_validate.validate(doc, KUBERNETES_VERSION, strict=True)


@pytest.mark.parametrize("gpu", [False, True], ids=["cpu", "gpu"])
def test_manifests_pass_the_kubernetes_schemas(gpu: bool) -> None:
    docs = documents(spec(gpu))
    assert [d["kind"] for d in docs] == ["Service", "Job"]
    for doc in docs:
        validate(doc)


def test_a_bad_field_fails_the_schemas() -> None:
    service, job = documents(spec())
    job["spec"]["template"]["spec"]["containers"][0]["gpus"] = 2  # not a Container field
    with pytest.raises(kubernetes_validate.ValidationError, match="'gpus' was unexpected"):
        validate(job)
    service["spec"]["clusterIP"] = ["None"]  # a string in the schema
    with pytest.raises(kubernetes_validate.ValidationError):
        validate(service)


def test_indexed_job_and_headless_service_shape() -> None:
    service, job = documents(spec())
    assert service["spec"]["clusterIP"] == "None"
    assert service["spec"]["publishNotReadyAddresses"] is True
    assert service["spec"]["selector"] == {"job-name": "ddp"}
    js = job["spec"]
    assert js["completionMode"] == "Indexed"
    assert js["completions"] == js["parallelism"] == 3
    assert js["backoffLimit"] == 0
    pod = js["template"]["spec"]
    assert pod["subdomain"] == "ddp" and pod["restartPolicy"] == "Never"
    (container,) = pod["containers"]
    assert container["image"] == PUSHED
    assert "command" not in container  # the image's ENTRYPOINT, the runtime, stays
    args = container["args"]
    assert args[0] == "torchrun"
    assert "--rdzv-endpoint=ddp-0.ddp:29400" in args
    assert "--local-addr=ddp-$(NODE_INDEX).ddp" in args  # expanded by the kubelet
    assert "--nnodes=3" in args and "--nproc-per-node=2" in args
    assert args[-1] == "train.py"
    env = {e["name"]: e for e in container["env"]}
    assert env["REPRO_DIST_BACKEND"]["value"] == "gloo"
    assert env["REPRO_DIST_NODES"]["value"] == "ddp-0.ddp,ddp-1.ddp,ddp-2.ddp"  # pod DNS names
    assert env["REPRO_SEED"]["value"] == "7"
    index = env["NODE_INDEX"]["valueFrom"]["fieldRef"]["fieldPath"]
    assert index == "metadata.annotations['batch.kubernetes.io/job-completion-index']"
    assert "resources" not in container
    shm = next(v for v in pod["volumes"] if v["name"] == "shm")
    assert shm["emptyDir"] == {"medium": "Memory", "sizeLimit": "2Gi"}


def test_gpu_pods_ask_for_one_gpu_per_process_and_nccl() -> None:
    _, job = documents(spec(gpu=True))
    (container,) = job["spec"]["template"]["spec"]["containers"]
    assert container["resources"]["limits"] == {"nvidia.com/gpu": 2}
    env = {e["name"]: e.get("value") for e in container["env"]}
    assert env["REPRO_DIST_BACKEND"] == "nccl"


def test_program_words_are_data_for_the_kubelet() -> None:
    _, job = documents(spec(command=("python", "t.py", "--x=$(HOME)")))
    args = job["spec"]["template"]["spec"]["containers"][0]["args"]
    assert args[-1] == "--x=$$(HOME)"  # $$ is the kubelet's escape: the program gets $(HOME)


def test_an_unpushed_image_is_refused() -> None:
    with pytest.raises(ImageRefError, match="not pinned by a registry digest"):
        KubeSpec("ddp", ID, JobShape(2, 1), ("python", "t.py"), 0, "strict", "p")


@pytest.mark.parametrize("bad", ["", "Ddp", "1job", "job_x", "a" * 51, "job-"])
def test_bad_job_names_are_refused(bad: str) -> None:
    with pytest.raises(ReprobuildError, match="is not allowed: use 1 to 50 lowercase"):
        KubeSpec(bad, PUSHED, JobShape(2, 1), ("python", "t.py"), 0, "strict", "p")


def test_default_name_is_a_dns_label() -> None:
    assert default_name("reprobuild-test/determinism") == "determinism"
    assert default_name("team/DDP_train") == "ddp-train"
    assert default_name("team/9lives") == "job-9lives"


def test_project_rendering_checks_torch_and_pins(tmp_path: Path) -> None:
    project = tmp_path / "tiny"
    shutil.copytree(TINY, project)
    tag = project_tag(load_config(project), gpu=False)
    engine = FakeEngine(tag, ("torch",))
    engine.attrs["RepoDigests"] = [PUSHED]
    text = k8s_project(project, nodes=2, nproc_per_node=2, engine=engine)
    docs = list(yaml.safe_load_all(text))
    for doc in docs:
        validate(doc)
    assert docs[1]["spec"]["template"]["spec"]["containers"][0]["image"] == PUSHED
    assert docs[1]["metadata"]["name"] == "tiny"
    with pytest.raises(ReprobuildError, match="has no torch"):
        k8s_project(project, nodes=2, engine=FakeEngine(tag, ("six",)))
    with pytest.raises(ReprobuildError, match="is a CPU image but a GPU Kubernetes job"):
        k8s_project(project, nodes=2, gpu=True, image=tag, engine=engine)
    unpushed = FakeEngine(tag, ("torch",))
    with pytest.raises(ImageRefError, match="not pinned by a registry digest"):
        k8s_project(project, nodes=2, engine=unpushed)


def test_cli_bad_nodes_is_one_line_and_no_file(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    out = tmp_path / "job.yaml"
    assert main(["k8s", str(TINY), "--nodes", "0", "--image", PUSHED, "-o", str(out)]) == 2
    err = capsys.readouterr().err.splitlines()
    assert err[0].startswith("error: --nodes 0 is not allowed: use a whole number from 1 to 64")
    assert not out.exists()


# ---- --env: the user's own variables ---------------------------------------------------------


def env_spec(env: tuple[tuple[str, str], ...]) -> KubeSpec:
    return KubeSpec("ddp", PUSHED, JobShape(3, 2), ("python", "t.py"), 7, "strict", "p", env=env)


def test_user_env_follows_reprobuild_s_and_passes_the_schemas() -> None:
    env = (("REPRO_DIST_TIMEOUT_S", "600"), ("WANDB_MODE", "offline"), ("REPRO_THREADS", "2"))
    service, job = documents(env_spec(env))
    validate(service)
    validate(job)
    (container,) = job["spec"]["template"]["spec"]["containers"]
    assert [e["name"] for e in container["env"]] == [
        "NODE_INDEX",
        "REPRO_SEED",
        "REPRO_DETERMINISM",
        "REPRO_RUN_DIR",
        "REPRO_OUTPUT_DIR",
        "REPRO_IMAGE",
        "REPRO_DIST_BACKEND",
        "REPRO_DIST_NODES",
        "REPRO_DIST_TIMEOUT_S",
        "WANDB_MODE",
        "REPRO_THREADS",
    ]
    assert container["env"][-3:] == [
        {"name": "REPRO_DIST_TIMEOUT_S", "value": "600"},
        {"name": "WANDB_MODE", "value": "offline"},
        {"name": "REPRO_THREADS", "value": "2"},
    ]


def test_user_env_values_are_data_for_yaml_and_the_kubelet() -> None:
    from helpers import TRICKY_ENV_VALUES

    text = render(env_spec(tuple(TRICKY_ENV_VALUES.items())))
    assert "# Set by --env in every pod: QUOTES, HASH," in text
    docs = list(yaml.safe_load_all(text))
    for doc in docs:
        validate(doc)
    (container,) = docs[1]["spec"]["template"]["spec"]["containers"]
    got = {e["name"]: e["value"] for e in container["env"] if e["name"] in TRICKY_ENV_VALUES}
    assert all(isinstance(v, str) for v in got.values())
    assert got["DOLLARS"] == "$$HOME $${X:?boom} $$(whoami) $$$$ $$"  # $$: the kubelet's `$`
    assert {k: v.replace("$$", "$") for k, v in got.items()} == TRICKY_ENV_VALUES


def test_no_env_adds_no_header_line() -> None:
    assert "--env" not in render(env_spec(()))


def test_project_rendering_takes_the_env_options(tmp_path: Path) -> None:
    project = tmp_path / "tiny"
    shutil.copytree(TINY, project)
    tag = project_tag(load_config(project), gpu=False)
    engine = FakeEngine(tag, ("torch",))
    engine.attrs["RepoDigests"] = [PUSHED]
    options = ["REPRO_DIST_TIMEOUT_S=600", "WANDB_MODE=online", "WANDB_MODE=offline"]
    text = k8s_project(project, nodes=2, nproc_per_node=4, engine=engine, env=options)
    docs = list(yaml.safe_load_all(text))
    for doc in docs:
        validate(doc)
    env = docs[1]["spec"]["template"]["spec"]["containers"][0]["env"]
    assert env[-2:] == [
        {"name": "REPRO_DIST_TIMEOUT_S", "value": "600"},
        {"name": "WANDB_MODE", "value": "offline"},
    ]
