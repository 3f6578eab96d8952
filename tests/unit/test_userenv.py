"""``--env NAME=VALUE`` (reprobuild.cluster.userenv): what is accepted, in which order, and what is
refused with one line naming the bad value and what is allowed. The renderings that use the
pairs are tested in test_compose.py, test_compose_nodes.py and test_kube.py."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import yaml

from helpers import TRICKY_ENV_VALUES
from reprobuild.cli import main
from reprobuild.cluster.compose import ComposeSpec, document, render
from reprobuild.cluster.k8s import KubeSpec, documents
from reprobuild.cluster.nodes import JobShape
from reprobuild.cluster.userenv import (
    MAX_OPTIONS,
    MAX_VALUE_BYTES,
    RESERVED,
    EnvOptionError,
    check_env,
    merged,
    parse_env,
)
from reprobuild.errors import UsageError

TINY = Path(__file__).parent.parent / "data" / "projects" / "tiny"
DIGEST = "sha256:" + "cd" * 32
PUSHED = f"registry.example/team/ddp@{DIGEST}"
PASS_THROUGH = {"REPRO_TRIAL", "REPRO_THREADS", "REPRO_DIST_TIMEOUT_S"}


def test_pairs_keep_their_order_and_a_later_name_wins() -> None:
    assert parse_env(["B=1", "A=2", "B=3", "C="]) == (("B", "3"), ("A", "2"), ("C", ""))
    assert parse_env([]) == ()


def test_the_value_is_everything_after_the_first_equals_sign() -> None:
    assert parse_env(["URL=http://x/?a=b&c=d", "_x9=="]) == (
        ("URL", "http://x/?a=b&c=d"),
        ("_x9", "="),
    )


def test_values_yaml_or_a_shell_would_read_are_taken_as_they_are() -> None:
    options = [f"{name}={value}" for name, value in TRICKY_ENV_VALUES.items()]
    assert dict(parse_env(options)) == TRICKY_ENV_VALUES


def test_the_user_may_set_what_compose_passes_through_from_the_shell() -> None:
    assert parse_env([f"{name}=1" for name in sorted(PASS_THROUGH)])


@pytest.mark.parametrize(
    ("option", "message"),
    [
        ("WANDB_MODE", "--env 'WANDB_MODE' has no '=': use --env NAME=VALUE"),
        ("", "--env '' has no '='"),
        ("=x", "--env name '' is not allowed: use a letter or '_', then letters, digits and '_'"),
        ("9LIVES=1", "--env name '9LIVES' is not allowed"),
        ("MY-VAR=1", "--env name 'MY-VAR' is not allowed"),
        ("MY VAR=1", "--env name 'MY VAR' is not allowed"),
        ("$(id)=1", "--env name '$(id)' is not allowed"),
        ("N\u00c9=1", "--env name 'N\u00c9' is not allowed"),
        ("A" * 257 + "=1", "at most 256 characters"),
        ("X=a\x00b", r"--env X='a\x00b' is not allowed: the value holds the control character "),
        ("X=line\nnext", "U+000A; use one line of printable text"),
        ("X=a\rb", "U+000D"),
        ("X=a\tb", "U+0009"),
        ("X=\x1b[31m", "U+001B"),
        ("X=\x7f", "U+007F"),
        ("X=\x85", "U+0085"),
        ("X=a\u2028b", "U+2028"),
        ("X=\udcff", "the value is not UTF-8 text"),
        ("X=" + "a" * (MAX_VALUE_BYTES + 1), "--env X: the value is 32769 bytes, above the 32 KiB"),
        ("X=" + "\u00e9" * (MAX_VALUE_BYTES // 2 + 1), "the value is 32770 bytes"),
    ],
)
def test_bad_options_are_refused_naming_the_value(option: str, message: str) -> None:
    with pytest.raises(EnvOptionError) as info:
        parse_env([option])
    assert message in str(info.value)
    assert "\n" not in str(info.value) and len(str(info.value)) <= 400
    assert isinstance(info.value, UsageError) and info.value.exit_code == 2


def test_a_value_of_exactly_32_kib_is_allowed() -> None:
    assert parse_env(["X=" + "a" * MAX_VALUE_BYTES]) == (("X", "a" * MAX_VALUE_BYTES),)


def test_more_than_256_options_are_refused_before_any_is_read() -> None:
    assert len(parse_env([f"V{i}=1" for i in range(MAX_OPTIONS)])) == MAX_OPTIONS
    with pytest.raises(EnvOptionError, match="257 --env options: at most 256 are allowed"):
        parse_env(["bad"] * (MAX_OPTIONS + 1))


@pytest.mark.parametrize(
    ("name", "instead"),
    [
        ("REPRO_SEED", "set seed: in reprobuild.yaml"),
        ("REPRO_DETERMINISM", "set determinism: in reprobuild.yaml"),
        ("REPRO_RUN_DIR", "reprobuild sets REPRO_RUN_DIR itself"),
        ("REPRO_OUTPUT_DIR", "reprobuild sets REPRO_OUTPUT_DIR itself"),
        ("REPRO_DIST_BACKEND", "--gpu picks nccl"),
        ("REPRO_JOB_ID", "--name (k8s)"),
        ("NODE_INDEX", "completion index"),
        ("REPRO_DIST_NODES", "lists the job's nodes"),
    ],
)
def test_names_reprobuild_sets_are_refused(name: str, instead: str) -> None:
    with pytest.raises(EnvOptionError, match=f"--env {name} is not allowed: ") as info:
        parse_env([f"{name}=1"])
    assert instead in str(info.value)


def test_every_fixed_variable_of_the_renderings_is_reserved() -> None:
    """What the renderings set, less what compose passes through from the shell, is exactly
    the reserved list (so a new variable cannot be overridden by --env unnoticed)."""
    shape = JobShape(2, 1)
    single = yaml.safe_load(render(document(ComposeSpec(PUSHED, seed=1, determinism="warn"))))
    nodes = yaml.safe_load(render(document(ComposeSpec(PUSHED, command=("x",), shape=shape))))
    kube = documents(KubeSpec("ddp", PUSHED, shape, ("python", "t.py"), 1, "warn", "p"))
    names = {
        *single["services"]["train"]["environment"],
        *nodes["services"]["node-0"]["environment"],
        *(e["name"] for e in kube[1]["spec"]["template"]["spec"]["containers"][0]["env"]),
    }
    assert names - PASS_THROUGH == set(RESERVED) - {"REPRO_JOB_ID"}
    assert "REPRO_JOB_ID" in RESERVED  # in the compose command line, from the shell


def test_library_pairs_are_checked_too() -> None:
    assert check_env([("A", "1")]) == (("A", "1"),)
    with pytest.raises(EnvOptionError, match="--env A is given twice"):
        check_env([("A", "1"), ("A", "2")])
    with pytest.raises(EnvOptionError, match="not allowed"):
        ComposeSpec(PUSHED, env=(("REPRO_SEED", "1"),))
    with pytest.raises(EnvOptionError, match=r"U\+000A"):
        KubeSpec("ddp", PUSHED, JobShape(2, 1), ("x",), 1, "warn", "p", env=(("A", "\n"),))


def test_merged_drops_the_pass_through_the_user_sets() -> None:
    own = (("REPRO_SEED", "1"), ("REPRO_THREADS", "${REPRO_THREADS:-}"), ("B", "x"))
    user = (("Z", "1"), ("REPRO_THREADS", "2"))
    assert merged(own, user) == (
        ("REPRO_SEED", "1"),
        ("B", "x"),
        ("Z", "1"),
        ("REPRO_THREADS", "2"),
    )


# ---- the CLI: one error line, exit 2, no file, no engine asked ------------------------------


@pytest.mark.parametrize(
    "job",
    [
        ["compose", "--image", PUSHED],
        ["compose", "--image", PUSHED, "--nodes", "2", "--nproc-per-node", "2"],
        ["k8s", "--image", PUSHED, "--nodes", "2"],
    ],
    ids=["compose", "compose-nodes", "k8s"],
)
@pytest.mark.parametrize(
    ("env", "first"),
    [
        ("NOEQUALS", "error: --env 'NOEQUALS' has no '='"),
        ("bad-name=1", "error: --env name 'bad-name' is not allowed"),
        ("REPRO_SEED=3", "error: --env REPRO_SEED is not allowed: reprobuild sets REPRO_SEED"),
        ("X=a\nb", "error: --env X='a\\nb' is not allowed: the value holds the control"),
    ],
    ids=["no-equals", "bad-name", "reserved", "newline"],
)
def test_cli_refuses_a_bad_env_in_one_line_and_writes_nothing(
    job: list[str], env: str, first: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    command, *rest = job
    out = tmp_path / "job.yml"
    argv = [command, str(TINY), *rest, "--env", "OK=1", "--env", env, "-o", str(out)]
    assert main(argv) == 2
    err = capsys.readouterr().err.splitlines()
    assert err[0].startswith(first), err
    assert len(err) == 1
    assert not out.exists()


def test_the_env_is_checked_before_the_engine_is_asked(tmp_path: Path) -> None:
    from reprobuild.cluster.compose import compose_project
    from reprobuild.cluster.k8s import k8s_project

    engine: Any = object()  # any call on it would fail with AttributeError
    with pytest.raises(EnvOptionError):
        compose_project(TINY, nodes=2, engine=engine, env=["REPRO_RUN_DIR=/x"])
    with pytest.raises(EnvOptionError):
        k8s_project(TINY, nodes=2, engine=engine, env=["REPRO_RUN_DIR=/x"])
