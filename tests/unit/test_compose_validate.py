"""The compose files pass the compose tool here (docker-compose 1.29 on Debian 12, Compose v2
on Debian 13: `config` validates against its schema and interpolates, no engine needed): every
file in compose/, the golden files, and the ones the command writes. A broken value fails it,
so the check is real. v2 prints volumes in the long syntax; `binds` reads both."""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path
from typing import Any

import pytest
import yaml

from reprobuild.cluster.compose import ComposeSpec, document, render

TESTS = Path(__file__).parent.parent
REPO = TESTS.parent
FILES = sorted((REPO / "compose").glob("*.yml")) + sorted((TESTS / "golden").glob("compose-*.yml"))
ID = "sha256:" + "ab" * 32


def compose_config(
    path: Path, env: dict[str, str] | None = None, *args: str
) -> subprocess.CompletedProcess[str]:
    tool = shutil.which("docker-compose")
    if tool is None:
        pytest.fail("docker-compose is not installed; run `scripts/setup` (scripts/setup-engine)")
    clean = {k: v for k, v in os.environ.items() if not k.startswith("REPRO_")}
    return subprocess.run(
        [tool, "-f", str(path), *args, "config"],
        capture_output=True,
        text=True,
        env={**clean, **(env or {})},
        cwd=path.parent,
        timeout=60,
        check=False,
    )


def binds(volumes: list[Any]) -> list[str]:
    """`SOURCE:TARGET[:ro]` for each volume, from v1's short or v2's long syntax."""
    out = []
    for v in volumes:
        if isinstance(v, str):
            out.append(v)
        else:
            out.append(f"{v['source']}:{v['target']}" + (":ro" if v.get("read_only") else ""))
    return out


def test_there_are_files_to_check() -> None:
    names = {p.name for p in FILES}
    assert {"train.yml", "train-gpu.yml", "compose-tiny-cpu.yml", "compose-tiny-gpu.yml"} <= names


@pytest.mark.parametrize("path", FILES, ids=lambda p: p.name)
def test_file_validates(path: Path) -> None:
    proc = compose_config(path, {"REPRO_IMAGE": ID})
    assert proc.returncode == 0, proc.stderr
    config = yaml.safe_load(proc.stdout)
    train = config["services"]["train"]
    assert train["image"] in (ID, yaml.safe_load(path.read_text())["services"]["train"]["image"])
    assert train["network_mode"] == "none"
    assert binds(train["volumes"])[0].endswith(":/data:ro")
    # the verify runs validate too, under their profile
    proc = compose_config(path, {"REPRO_IMAGE": ID}, "--profile", "verify")
    assert proc.returncode == 0, proc.stderr
    assert {"verify-a", "verify-b"} <= set(yaml.safe_load(proc.stdout)["services"])


def test_shell_overrides_reach_the_run(tmp_path: Path) -> None:
    path = tmp_path / "compose.yml"
    path.write_text(render(document(ComposeSpec(ID, seed=7, determinism="warn"))))
    proc = compose_config(path, {"REPRO_SEED": "42", "REPRO_DATA": "/srv/data"})
    assert proc.returncode == 0, proc.stderr
    train = yaml.safe_load(proc.stdout)["services"]["train"]
    assert train["environment"]["REPRO_SEED"] == "42"
    assert train["environment"]["REPRO_DETERMINISM"] == "warn"
    assert "/srv/data:/data:ro" in binds(train["volumes"])


def test_literal_dollars_survive_interpolation(tmp_path: Path) -> None:
    path = tmp_path / "compose.yml"
    words = ("python", "-c", "print('$HOME ${X:?boom}')")
    path.write_text(render(document(ComposeSpec(ID, command=words))))
    proc = compose_config(path)
    assert proc.returncode == 0, proc.stderr
    # docker-compose 1.29 prints the file back with `$` still escaped as `$$`
    command = yaml.safe_load(proc.stdout)["services"]["train"]["command"]
    assert [w.replace("$$", "$") for w in command] == list(words)


@pytest.mark.parametrize("name", ["train.yml", "train-gpu.yml"])
def test_static_files_need_the_image_variable(name: str) -> None:
    proc = compose_config(REPO / "compose" / name)
    assert proc.returncode != 0
    assert "set REPRO_IMAGE to the image reprobuild built" in proc.stderr


@pytest.mark.parametrize(
    ("old", "new", "complaint"),
    [
        ("network_mode: none", "network_mode: [none]", "network_mode"),
        ("capabilities:\n            - gpu", "capabilities: gpu", "capabilities"),
        ("shm_size: 1gb", "shm_size: {a: 1}", "shm_size"),
        ("condition: service_completed_successfully", "condition: done", "condition"),
    ],
)
def test_a_broken_value_fails_validation(
    tmp_path: Path, old: str, new: str, complaint: str
) -> None:
    text = render(document(ComposeSpec(ID, gpu=True)))
    assert old in text
    path = tmp_path / "compose.yml"
    path.write_text(text.replace(old, new, 1))
    proc = compose_config(path)
    assert proc.returncode != 0, proc.stdout
    assert complaint in proc.stderr


def test_nodes_file_validates(tmp_path: Path) -> None:
    """The multi-node golden file (tests/unit/test_compose_nodes.py): docker-compose accepts
    the per-node services, their network and the internal network itself."""
    path = TESTS / "golden" / "nodes-compose-2x2.yml"
    proc = compose_config(path, {"REPRO_JOB_ID": "job-7"})
    assert proc.returncode == 0, proc.stderr
    config = yaml.safe_load(proc.stdout)
    assert config["networks"]["job"]["internal"] is True
    for i in (0, 1):
        node = config["services"][f"node-{i}"]
        assert "job" in node["networks"]
        assert "--rdzv-id=job-7" in node["command"]
    broken = path.read_text().replace("internal: true", "internal: [yes]", 1)
    bad = tmp_path / "broken.yml"
    bad.write_text(broken)
    proc = compose_config(bad)
    assert proc.returncode != 0, proc.stdout
    assert "internal" in proc.stderr


@pytest.mark.parametrize("nodes", [False, True], ids=["single", "nodes"])
def test_env_values_survive_interpolation(tmp_path: Path, nodes: bool) -> None:
    """``--env`` values YAML or compose could misread pass `config` and come back the same
    (docker-compose 1.29 prints them with `$` still escaped as `$$`)."""
    from helpers import TRICKY_ENV_VALUES
    from reprobuild.cluster.nodes import JobShape

    env = (*TRICKY_ENV_VALUES.items(), ("REPRO_THREADS", "3"))
    shape = JobShape(2, 1) if nodes else None
    spec = ComposeSpec(ID, command=("python", "t.py"), shape=shape, env=env)
    path = tmp_path / "compose.yml"
    path.write_text(render(document(spec)))
    # (v2's `config` leaves out the services of a profile not asked for; v1 printed them all)
    proc = compose_config(path, {"REPRO_THREADS": "99", "X": "shell"}, "--profile", "verify")
    assert proc.returncode == 0, proc.stderr
    services = yaml.safe_load(proc.stdout)["services"]
    runs = ["node-0", "node-1"] if nodes else ["train", "verify-a", "verify-b"]
    for name in runs:
        environment = services[name]["environment"]
        got = {k: v.replace("$$", "$") for k, v in environment.items() if k in TRICKY_ENV_VALUES}
        assert got == TRICKY_ENV_VALUES
        assert environment["REPRO_THREADS"] == "3"  # the file's, not the shell's 99


YAML12_NUMBERS = {
    "E": "1e3",
    "NEG": "-2.5E-3",
    "DOT": ".5",
    "OCT": "0o17",
    "HEX": "0x1F",
    "BIN": "0b101",
    "UNDER": "1_000e1",
    "INF": "-.inf",
    "NUL": "~",
    "WORD": "1e3x",
}


def test_yaml12_numbers_stay_strings(tmp_path: Path) -> None:
    """PyYAML writes `1e3` plain (a string in YAML 1.1); Compose v2 reads YAML 1.2 and gave
    the container 1000. The file quotes such values, and the tool hands each back unchanged."""
    env = tuple(YAML12_NUMBERS.items())
    text = render(document(ComposeSpec(ID, command=("python", "t.py"), env=env)))
    for name, value in YAML12_NUMBERS.items():
        quoted = value if name == "WORD" else f"'{value}'"
        assert f"{name}: {quoted}\n" in text, name
    path = tmp_path / "compose.yml"
    path.write_text(text)
    proc = compose_config(path)
    assert proc.returncode == 0, proc.stderr
    environment = yaml.safe_load(proc.stdout)["services"]["train"]["environment"]
    assert {k: environment[k] for k in YAML12_NUMBERS} == YAML12_NUMBERS
