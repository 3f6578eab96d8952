"""``reprobuild compose --nodes N --nproc-per-node M`` without an engine: the torchrun job
document (one service per node on a private network, node 0 hosting the c10d rendezvous),
its bad inputs (each one error line, no file), and the golden file of a 2 x 2 job.

Refresh the golden file after an intended change, then review the diff like code:
    REPROBUILD_UPDATE_GOLDEN=1 python -m pytest tests/unit/test_compose_nodes.py
"""

from __future__ import annotations

import os
import shutil
from pathlib import Path
from typing import Any

import pytest
import yaml

from helpers import FakeImageEngine as FakeEngine
from reprobuild.cli import main
from reprobuild.cluster.compose import ComposeSpec, compose_project, document, render
from reprobuild.cluster.nodes import JobShape, JobShapeError, program_args
from reprobuild.errors import ConfigError, ReprobuildError
from reprobuild.imaging.plan import project_tag
from reprobuild.project.config import load_config
from reprobuild_entrypoint import MANIFEST_PATH

TESTS = Path(__file__).parent.parent
GOLDEN = TESTS / "golden" / "nodes-compose-2x2.yml"
TINY = TESTS / "data" / "projects" / "tiny"
ID = "sha256:" + "ab" * 32
DIGEST = "sha256:" + "cd" * 32
IMAGE = f"127.0.0.1:5000/team/ddp@{DIGEST}"


def tiny_copy(tmp_path: Path, extra: str = "") -> Path:
    project = tmp_path / "tiny"
    shutil.copytree(TINY, project)
    if extra:
        config = project / "reprobuild.yaml"
        config.write_text(config.read_text() + extra)
    return project


def spec(shape: JobShape, **kw: Any) -> ComposeSpec:
    return ComposeSpec(
        IMAGE,
        seed=7,
        determinism="strict",
        command=("python", "scripts/ddp_train.py", "--tag=$HOME"),
        project="team/ddp",
        shape=shape,
        **kw,
    )


def test_one_service_per_node_on_a_private_network() -> None:
    data = yaml.safe_load(render(document(spec(JobShape(3, 2)))))
    assert list(data["services"]) == ["prepare", "node-0", "node-1", "node-2"]
    assert data["networks"] == {"job": {"driver": "bridge", "internal": True}}
    for i in range(3):
        node = data["services"][f"node-{i}"]
        assert node["image"] == IMAGE
        assert node["hostname"] == f"node-{i}"
        assert node["networks"] == ["job"]
        assert "network_mode" not in node
        assert node["shm_size"] == "2gb"  # 1 GB per process, for DataLoader workers
        assert node["volumes"][1:] == [
            f"./runs/node-{i}:/reprobuild-run",
            f"./out/node-{i}:/out",
        ]
        command = node["command"]
        assert command[0] == "torchrun"
        assert "--nnodes=3" in command and "--nproc-per-node=2" in command
        assert "--rdzv-backend=c10d" in command
        assert "--rdzv-endpoint=node-0:29400" in command  # node 0 hosts the rendezvous
        assert f"--local-addr=node-{i}" in command  # sorts into node rank i
        assert "--max-restarts=0" in command
        assert command[-2:] == ["scripts/ddp_train.py", "--tag=$$HOME"]  # data, not a variable
        assert node["environment"]["REPRO_DIST_BACKEND"] == "gloo"
        assert "deploy" not in node
    made = data["services"]["prepare"]["entrypoint"]
    assert sum(p.startswith("/reprobuild-prepare/runs/node-") for p in made) == 3


def test_gpu_job_uses_nccl_and_reserves_a_gpu_per_process() -> None:
    data = yaml.safe_load(render(document(spec(JobShape(2, 4, gpu=True), gpu=True))))
    node = data["services"]["node-1"]
    assert node["environment"]["REPRO_DIST_BACKEND"] == "nccl"
    devices = node["deploy"]["resources"]["reservations"]["devices"]
    assert devices == [{"driver": "nvidia", "count": 4, "capabilities": ["gpu"]}]
    assert node["ulimits"] == {"memlock": -1, "stack": 67108864}


def test_node_names_sort_in_node_order_past_ten() -> None:
    names = JobShape(12, 1).node_names()
    assert names[0] == "node-00" and names[-1] == "node-11"
    assert list(names) == sorted(names)


@pytest.mark.parametrize(
    ("command", "args"),
    [
        (("python", "t.py", "-x"), ("t.py", "-x")),
        (("python3", "-u", "t.py"), ("t.py",)),
        (("/opt/venv/bin/python3.11", "-m", "pkg.train", "a"), ("--module", "pkg.train", "a")),
        (("bash", "run.sh"), ("--no-python", "bash", "run.sh")),
    ],
)
def test_program_args_hand_python_to_torchrun(
    command: tuple[str, ...], args: tuple[str, ...]
) -> None:
    assert program_args(command) == args


def test_program_args_refuse_interpreter_options() -> None:
    with pytest.raises(ReprobuildError, match="cannot run under torchrun"):
        program_args(("python", "-O", "t.py"))


@pytest.mark.parametrize(
    ("nodes", "nproc", "match"),
    [
        (0, 1, r"^--nodes 0 is not allowed: use a whole number from 1 to 64"),
        (2, 0, r"^--nproc-per-node 0 is not allowed: use a whole number from 1 to 64"),
        (-1, 1, r"^--nodes -1 is not allowed"),
        (5, 16, r"^--nodes 5 x --nproc-per-node 16 is a world size of 80, above the project's "),
    ],
)
def test_bad_shapes_are_refused(nodes: int, nproc: int, match: str) -> None:
    with pytest.raises(JobShapeError, match=match):
        JobShape(nodes, nproc)


def test_project_max_world_size_is_the_limit(tmp_path: Path) -> None:
    project = tiny_copy(tmp_path, "max_world_size: 4\n")
    assert load_config(project).max_world_size == 4
    with pytest.raises(
        JobShapeError, match="world size of 6, above the project's max_world_size 4"
    ):
        compose_project(project, nodes=3, nproc_per_node=2, engine=FakeEngine("x", ()))
    bad = tiny_copy(tmp_path / "b", "max_world_size: 0\n")
    with pytest.raises(ConfigError, match="max_world_size 0 must be an integer from 1 to"):
        load_config(bad)


def test_project_job_is_pinned_checked_for_torch_and_runs_the_project_command(
    tmp_path: Path,
) -> None:
    project = tiny_copy(tmp_path)
    tag = project_tag(load_config(project), gpu=False)
    engine = FakeEngine(tag, ("torch", "numpy"))
    result = compose_project(project, nodes=2, nproc_per_node=2, engine=engine)
    assert engine.read == [MANIFEST_PATH]
    data = yaml.safe_load(result.text)
    assert data["services"]["node-0"]["image"] == ID
    assert data["services"]["node-0"]["command"][-1] == "hello.py"  # tiny's `python hello.py`


def test_image_without_torch_is_refused(tmp_path: Path) -> None:
    project = tiny_copy(tmp_path)
    tag = project_tag(load_config(project), gpu=False)
    with pytest.raises(ReprobuildError, match=r"has no torch .*a multi-node job runs torchrun"):
        compose_project(project, nodes=2, engine=FakeEngine(tag, ("six", "idna")))


def test_gpu_job_for_a_cpu_image_is_refused(tmp_path: Path) -> None:
    project = tiny_copy(tmp_path)
    with pytest.raises(ReprobuildError, match="is a CPU image but a GPU compose file"):
        compose_project(project, nodes=2, gpu=True, image="x:1", engine=FakeEngine("x:1", ()))


def test_nproc_without_nodes_is_refused(tmp_path: Path) -> None:
    with pytest.raises(JobShapeError, match="--nproc-per-node goes with --nodes"):
        compose_project(TINY, nproc_per_node=2, engine=FakeEngine("x", ()))


@pytest.mark.parametrize(
    ("args", "first"),
    [
        (
            ["--nodes", "0"],
            "error: --nodes 0 is not allowed: use a whole number from 1 to 64 (the project's "
            "max_world_size)",
        ),
        (
            ["--nodes", "2", "--nproc-per-node", "0"],
            "error: --nproc-per-node 0 is not allowed: use a whole number from 1 to 64 (the "
            "project's max_world_size)",
        ),
        (
            ["--nodes", "8", "--nproc-per-node", "9"],
            "error: --nodes 8 x --nproc-per-node 9 is a world size of 72, above the project's "
            "max_world_size 64",
        ),
    ],
)
def test_cli_bad_shape_is_one_line_and_no_file(
    args: list[str], first: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    out = tmp_path / "compose.yml"
    code = main(["compose", str(TINY), "--image", IMAGE, *args, "-o", str(out)])
    assert code == 2
    err = capsys.readouterr().err.splitlines()
    assert err[0] == first
    assert len([line for line in err if line.startswith("error:")]) == 1
    assert not out.exists()


def test_golden_2x2() -> None:
    text = render(document(spec(JobShape(2, 2), source="team/ddp:cpu-0123456789ab")))
    if os.environ.get("REPROBUILD_UPDATE_GOLDEN"):
        GOLDEN.write_text(text)
    assert GOLDEN.is_file(), f"missing golden file {GOLDEN}; run with REPROBUILD_UPDATE_GOLDEN=1"
    assert text == GOLDEN.read_text()


def test_user_env_reaches_every_node_after_reprobuild_s() -> None:
    env = (("REPRO_DIST_TIMEOUT_S", "600"), ("WANDB_MODE", "offline"), ("REPRO_THREADS", "2"))
    text = render(document(spec(JobShape(3, 1), env=env)))
    data = yaml.safe_load(text)
    for i in range(3):
        environment = data["services"][f"node-{i}"]["environment"]
        assert list(environment.items())[-5:] == [
            ("REPRO_DIST_BACKEND", "gloo"),
            ("REPRO_DIST_NODES", "node-0,node-1,node-2"),
            ("REPRO_DIST_TIMEOUT_S", "600"),  # no longer ${REPRO_DIST_TIMEOUT_S:-}
            ("WANDB_MODE", "offline"),
            ("REPRO_THREADS", "2"),
        ]
        assert environment["REPRO_TRIAL"] == "${REPRO_TRIAL:-}"  # not given: still the shell's
    assert "# REPRO_SEED, REPRO_DETERMINISM, REPRO_TRIAL and REPRO_JOB_ID (the rendezvous id)" in (
        text
    )
    assert (
        "# Set by --env for every run: REPRO_DIST_TIMEOUT_S, WANDB_MODE, REPRO_THREADS.\n" in text
    )


def test_user_env_values_round_trip_on_every_node() -> None:
    from helpers import TRICKY_ENV_VALUES

    data = yaml.safe_load(
        render(document(spec(JobShape(2, 2), env=tuple(TRICKY_ENV_VALUES.items()))))
    )
    for i in range(2):
        environment = data["services"][f"node-{i}"]["environment"]
        got = {k: v.replace("$$", "$") for k, v in environment.items() if k in TRICKY_ENV_VALUES}
        assert got == TRICKY_ENV_VALUES


def test_project_job_takes_the_env_options(tmp_path: Path) -> None:
    project = tiny_copy(tmp_path)
    tag = project_tag(load_config(project), gpu=False)
    engine = FakeEngine(tag, ("torch",))
    options = ["DDP_EPOCHS=40", "REPRO_DIST_TIMEOUT_S=60", "DDP_EPOCHS=41"]
    result = compose_project(project, nodes=2, engine=engine, env=options)
    assert result.spec.env == (("DDP_EPOCHS", "41"), ("REPRO_DIST_TIMEOUT_S", "60"))
    node = yaml.safe_load(result.text)["services"]["node-1"]["environment"]
    assert (node["DDP_EPOCHS"], node["REPRO_DIST_TIMEOUT_S"]) == ("41", "60")
