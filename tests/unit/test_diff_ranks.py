"""``reprobuild diff`` of two runs of one distributed job, rank by rank (issue 13): each
node's run record comes with one framework record per rank (its ``distributed`` section);
the diff lists ``rank R.<field>`` under ``ranks``."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from reprobuild.checks.diff import diff

DATA = Path(__file__).parent.parent / "data" / "diff"


def node_run(where: Path, seeds: dict[int, int], backend: str = "gloo") -> Path:
    """A node's run directory: a real run record (tests/data/diff) and a framework record per
    rank, as the runtime writes them under torchrun."""
    where.mkdir(parents=True)
    record = json.loads((DATA / "run-image.json").read_text())
    run_id = record["run_id"]
    path = where / f"run-{run_id}.json"
    path.write_text(json.dumps(record))
    for rank, seed in seeds.items():
        framework: dict[str, Any] = {
            "schema_version": 1,
            "kind": "reprobuild.frameworks",
            "run_id": run_id,
            "framework_settings": {"torch": {"version": "2.13.0+cpu", "seed": seed}},
            "distributed": {
                "rank": rank,
                "local_rank": rank % 2,
                "world_size": 4,
                "group_rank": rank // 2,
                "rank_seed": seed,
                "backend": backend,
                "restart_count": 0,
                "host": f"node-{rank // 2}-{where.name}",  # not compared
                "comm_settings": {"NCCL_ALGO": "Ring"},
            },
        }
        name = f"run-{run_id}-frameworks-node-{rank}.json"
        (where / name).write_text(json.dumps(framework))
    return path


def test_same_job_is_identical_rank_by_rank(tmp_path: Path) -> None:
    a = node_run(tmp_path / "a", {0: 0, 1: 1})
    b = node_run(tmp_path / "b", {0: 0, 1: 1})
    result = diff(str(a), str(b))
    assert result.identical, result.lines()


def test_a_rank_with_another_seed_or_backend_is_named(tmp_path: Path) -> None:
    a = node_run(tmp_path / "a", {0: 0, 1: 1})
    b = node_run(tmp_path / "b", {0: 0, 1: 5}, backend="nccl")
    result = diff(str(a), str(b))
    found = {(d.group, d.key): (d.a, d.b) for d in result.differences}
    assert found == {
        ("ranks", "rank 1.rank_seed"): (1, 5),
        ("ranks", "rank 1.torch.seed"): (1, 5),
        ("ranks", "rank 0.backend"): ("gloo", "nccl"),
        ("ranks", "rank 1.backend"): ("gloo", "nccl"),
    }
    assert "ranks" in result.lines()


def test_a_missing_rank_is_a_difference(tmp_path: Path) -> None:
    a = node_run(tmp_path / "a", {0: 0, 1: 1})
    b = node_run(tmp_path / "b", {0: 0})
    result = diff(str(a), str(b))
    assert ("ranks", "rank 1.rank_seed") in {(d.group, d.key) for d in result.differences}
