"""``reprobuild verify --nodes N --nproc-per-node M``: the arguments (engine-free). The runs
themselves are in tests/engine/test_nodes.py."""

from __future__ import annotations

import pytest

from reprobuild.checks.verify import verify_spec_from_args
from reprobuild.cli import main
from reprobuild.errors import ReprobuildError

IMAGE = "team/ddp@sha256:" + "cd" * 32
PROGRAM = ["python", "train.py"]


def test_nodes_reach_the_spec() -> None:
    spec = verify_spec_from_args(IMAGE, PROGRAM, nodes=2, nproc_per_node=3)
    assert (spec.nodes, spec.nproc_per_node) == (2, 3)
    assert verify_spec_from_args(IMAGE, PROGRAM).nodes is None


@pytest.mark.parametrize(
    ("kwargs", "match"),
    [
        ({"nodes": 0}, "--nodes 0 is not allowed"),
        ({"nodes": 2, "nproc_per_node": 0}, "--nproc-per-node 0 is not allowed"),
        ({"nodes": 9, "nproc_per_node": 8}, "world size of 72"),
        ({"nproc_per_node": 2}, "--nproc-per-node goes with --nodes"),
    ],
)
def test_bad_shapes_are_refused(kwargs: dict[str, int], match: str) -> None:
    with pytest.raises(ReprobuildError, match=match):
        verify_spec_from_args(IMAGE, PROGRAM, **kwargs)  # type: ignore[arg-type]


def test_local_and_nodes_do_not_mix() -> None:
    with pytest.raises(ReprobuildError, match="--nodes runs each node in a container"):
        verify_spec_from_args(None, PROGRAM, local=True, nodes=2)


def test_a_program_torchrun_cannot_start_is_refused() -> None:
    with pytest.raises(ReprobuildError, match="cannot run under torchrun"):
        verify_spec_from_args(IMAGE, ["python", "-O", "t.py"], nodes=2)


def test_resume_at_and_nodes_do_not_mix(capsys: pytest.CaptureFixture[str]) -> None:
    code = main(["verify", IMAGE, "--nodes", "2", "--resume-at", "1", "--", *PROGRAM])
    assert code == 2
    assert capsys.readouterr().err.startswith("error: --resume-at checks one container")
