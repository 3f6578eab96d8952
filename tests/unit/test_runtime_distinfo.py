"""The per-rank part of the runtime (issue 13): the ``distributed`` section of a rank's
framework record, the backend caught at ``init_process_group`` (a real gloo group of one
process, torch on the host), and the line that names a peer a rank lost."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from reprobuild_entrypoint import distinfo
from reprobuild_entrypoint.settings import from_environ

TORCHRUN_ENV = {
    "RANK": "3",
    "LOCAL_RANK": "1",
    "WORLD_SIZE": "4",
    "GROUP_RANK": "1",
    "LOCAL_WORLD_SIZE": "2",
    "TORCHELASTIC_RESTART_COUNT": "0",
    "TORCHELASTIC_MAX_RESTARTS": "0",
    "TORCHELASTIC_RUN_ID": "job-7",
    "MASTER_ADDR": "node-0",
    "MASTER_PORT": "45411",
    "REPRO_DIST_BACKEND": "gloo",
    "NCCL_ALGO": "Ring",
    "GLOO_SOCKET_IFNAME": "eth0",
    "PATH": "/usr/bin",
}


def test_distributed_info_is_the_launcher_s_environment() -> None:
    seed = from_environ({**TORCHRUN_ENV, "REPRO_SEED": "7"}).rank_seed
    info = distinfo.distributed_info(TORCHRUN_ENV, seed, "node-1")
    assert info == {
        "rank": 3,
        "local_rank": 1,
        "world_size": 4,
        "group_rank": 1,
        "local_world_size": 2,
        "restart_count": 0,
        "max_restarts": 0,
        "elastic_run_id": "job-7",
        "master_addr": "node-0",
        "master_port": "45411",
        "backend_requested": "gloo",
        "rank_seed": 10,  # (7 + 3) mod 2**32
        "host": "node-1",
        "comm_settings": {"GLOO_SOCKET_IFNAME": "eth0", "NCCL_ALGO": "Ring"},
    }


def test_no_launcher_no_section() -> None:
    assert not distinfo.under_launcher({"LOCAL_RANK": "0"})
    assert distinfo.under_launcher({"RANK": "0"})


def test_lost_peer_line_names_the_node_behind_the_address() -> None:
    err = RuntimeError(
        "[/pytorch/third_party/gloo/gloo/transport/tcp/pair.cc:537] Read error "
        "[172.19.0.2]:6563: Connection reset by peer."
    )
    names = {"172.19.0.2": "job_node-1_1.job_job"}
    line = distinfo.lost_peer_line(err, {"RANK": "0", "HOSTNAME": "node-0"}, names.get)
    assert line == (
        "reprobuild: rank 0 on node-0 lost its connection to job_node-1_1.job_job at "
        "172.19.0.2:6563: that node stopped or its rank failed first; see its log"
    )
    nameless = distinfo.lost_peer_line(err, {"RANK": "0", "HOSTNAME": "node-0"}, lambda a: None)
    assert nameless is not None and "172.19.0.2:6563 (no name)" in nameless
    assert distinfo.lost_peer_line(RuntimeError("out of memory"), {}, names.get) is None
    chained = ValueError("wrapped")
    chained.__cause__ = err
    assert distinfo.lost_peer_line(chained, {"RANK": "0"}, names.get) is not None


def test_a_lost_node_is_named_from_what_was_learnt_at_start() -> None:
    """Once its container stops, Docker's DNS forgets a node, so the reverse lookup at
    failure time gives nothing: the name comes from the addresses learnt after
    ``init_process_group``, when every node was up."""
    err = RuntimeError("Connection closed by peer [10.213.3.1]:9409")
    looked_up: list[str] = []

    def forward(name: str) -> list[str]:
        looked_up.append(name)
        return {"node-0": ["10.213.3.2"], "node-1": ["10.213.3.1"]}.get(name, [])

    environ = {"RANK": "1", "HOSTNAME": "node-0", "REPRO_DIST_NODES": "node-0,node-1"}
    distinfo.PEERS.clear()
    try:
        distinfo.learn_peers(environ, forward)
        line = distinfo.lost_peer_line(err, environ, lambda a: None)
        assert looked_up == ["node-0", "node-1"]
        assert line is not None and "lost its connection to node-1 at 10.213.3.1:9409" in line
        # an address nobody learnt still falls back to the reverse lookup
        other = RuntimeError("Connection closed by peer [10.213.3.9]:9409")
        line = distinfo.lost_peer_line(other, environ, {"10.213.3.9": "late"}.get)
        assert line is not None and "to late at 10.213.3.9:9409" in line
    finally:
        distinfo.PEERS.clear()
        distinfo._LEARNING.clear()


def test_in_a_two_node_job_an_unknown_address_is_the_other_node() -> None:
    err = RuntimeError("Connection closed by peer [10.213.4.1]:1748")  # masqueraded
    nobody = {"10.0.0.9": "x"}.get
    for nodes, host, expected in (
        ("node-0,node-1", "node-0", "node-1 (the only other node) at 10.213.4.1:1748"),
        ("job-0.job,job-1.job", "job-1", "job-0.job (the only other node) at 10.213.4.1:1748"),
        ("node-0,node-1,node-2", "node-0", "10.213.4.1:1748 (no name)"),
        ("node-0,node-1", "elsewhere", "10.213.4.1:1748 (no name)"),
        ("", "node-0", "10.213.4.1:1748 (no name)"),
    ):
        environ = {"RANK": "0", "HOSTNAME": host, "REPRO_DIST_NODES": nodes}
        line = distinfo.lost_peer_line(err, environ, nobody, nobody)
        assert line is not None and f"lost its connection to {expected}: that node" in line, (
            nodes,
            line,
        )


def test_the_node_list_is_a_hint_never_a_failure() -> None:
    names = distinfo.node_names(
        {"REPRO_DIST_NODES": " node-0 ,,job-1.job,$(rm -rf /),-x," + "a" * 300}
    )
    assert names == ("node-0", "job-1.job")
    assert distinfo.node_names({}) == ()
    many = ",".join(f"n{i}" for i in range(5000))
    assert len(distinfo.node_names({"REPRO_DIST_NODES": many})) == distinfo.NODES_MAX
    distinfo.learn_peers({}, lambda name: pytest.fail("nothing to look up"))
    assert distinfo._forward("no-such-node.invalid") == []
    assert "127.0.0.1" in distinfo._forward("localhost") or "::1" in distinfo._forward("localhost")


def test_the_builder_and_the_runtime_name_the_same_variable() -> None:
    from reprobuild.cluster import nodes

    assert nodes.NODES_VAR == distinfo.NODES_VAR


def test_reverse_lookup_is_real_and_bounded() -> None:
    assert distinfo._reverse("127.0.0.1") is not None  # /etc/hosts names loopback
    assert distinfo.lost_peer_line(None, {}) is None


RANK_PROGRAM = """
import os, torch, torch.distributed as dist
dist.init_process_group("gloo")
t = torch.ones(1)
dist.all_reduce(t)
dist.destroy_process_group()
print(t.item())
"""


def test_dist_timeout_values() -> None:
    assert distinfo.timeout_from({}) is None
    assert distinfo.timeout_from({"REPRO_DIST_TIMEOUT_S": " "}) is None
    assert distinfo.timeout_from({"REPRO_DIST_TIMEOUT_S": "30"}) == 30
    for bad in ("0", "-5", "1.5", "abc", "86401", "9" * 100):
        with pytest.raises(ValueError, match=r"^REPRO_DIST_TIMEOUT_S=.* is not allowed: use"):
            distinfo.timeout_from({"REPRO_DIST_TIMEOUT_S": bad})


def test_a_real_rank_records_its_backend_and_seed(tmp_path: Path) -> None:
    """One gloo rank of a world of one, started as torchrun would start it, under the runtime
    (the installed wheel's ``.pth`` start-up is not on this interpreter, so the program imports
    ``_startup`` first, as the image's ``.pth`` line does). It destroys its group before exit:
    the record still names the backend, caught at ``init_process_group``."""
    env = {
        **{k: v for k, v in os.environ.items() if not k.startswith("REPRO_")},
        **TORCHRUN_ENV,
        "RANK": "0",
        "LOCAL_RANK": "0",
        "WORLD_SIZE": "1",
        "MASTER_ADDR": "127.0.0.1",
        "MASTER_PORT": "0",
        "REPRO_SEED": "5",
        "REPRO_RUN_DIR": str(tmp_path),
        "REPRO_RUN_ID": "rank-test",
        "REPRO_THREADS": "1",
        "REPRO_QUIET": "1",
    }
    del env["NCCL_ALGO"]
    code = "import reprobuild_entrypoint._startup\n" + RANK_PROGRAM
    proc = subprocess.run(
        [sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=120
    )
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.strip() == "1.0"
    (path,) = tmp_path.glob("run-rank-test-frameworks-*.json")
    record = json.loads(path.read_text())
    dist = record["distributed"]
    assert dist["backend"] == "gloo"
    assert dist["initialized_at_exit"] is False  # destroyed: only the wrapper knew
    assert dist["rank"] == 0 and dist["rank_seed"] == 5 and dist["world_size"] == 1
    assert record["framework_settings"]["torch"]["seed"] == 5
    assert dist["timeout_s"] is None and dist["timeout_source"] is None  # torch's default

    # REPRO_DIST_TIMEOUT_S reaches init_process_group when the program gives no timeout
    for path in tmp_path.glob("run-rank-test*"):
        path.unlink()
    env["REPRO_DIST_TIMEOUT_S"] = "45"
    proc = subprocess.run(
        [sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=120
    )
    assert proc.returncode == 0, proc.stderr
    (path,) = tmp_path.glob("run-rank-test-frameworks-*.json")
    dist = json.loads(path.read_text())["distributed"]
    assert dist["timeout_s"] == 45.0 and dist["timeout_source"] == "REPRO_DIST_TIMEOUT_S"
