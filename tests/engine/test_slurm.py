"""Issue 41's proof on a real Slurm cluster: slurmctld and two slurmd from Debian's packages
(one munge key), each in a system container on the test engine; the compute nodes run the
image with podman (runc, overlay storage on a volume of their own), pulling it by digest from
the loopback registry. The tests submit the script `reprobuild slurm` wrote, unchanged, with
`sbatch`, and wait for it with `scontrol show job`.

- the 2-node x 2-process DDP job (gloo, CPU) ends with the same final loss and weights digest
  as the same image's `compose --nodes 2` job, and the same again on a second submission;
- `reprobuild verify --slurm` makes the two submissions (the host's `sbatch` is the
  controller's, through `docker exec`) and finds them identical;
- `--runtime oci`: the image unpacked into a bundle on the shared directory, run by Slurm's own
  `srun --container` with the nodes' oci.conf (runc): the compose job's loss again;
- the control (REPRO_DETERMINISM=off) gives another loss;
- every rank's record: its node in the sorted order of the nodes' names, its rank seed.

The registry listens on the host's loopback only: a forwarder container on the host's network
listens on the cluster network's gateway, and each compute node forwards its own
127.0.0.1:5000 there, so the image keeps its name and digest on every node. The job's times on
Slurm and on compose are printed (run pytest with -s to see them).
"""

from __future__ import annotations

import json
import os
import re
import secrets
import shutil
import socket
import subprocess
import time
import uuid
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

from helpers import DATA, run_cli

pytestmark = [pytest.mark.engine, pytest.mark.registry, pytest.mark.heavy]

JOB_TIMEOUT_S = 600
NODES = ("c1", "c2")
# Every capability but those this machine's bounding set lacks (see the environment notes:
# --privileged fails here), for slurmd and podman inside the node containers.
CAPS = [
    "AUDIT_CONTROL",
    "AUDIT_READ",
    "AUDIT_WRITE",
    "BLOCK_SUSPEND",
    "CHOWN",
    "DAC_OVERRIDE",
    "DAC_READ_SEARCH",
    "FOWNER",
    "FSETID",
    "IPC_LOCK",
    "IPC_OWNER",
    "KILL",
    "LEASE",
    "LINUX_IMMUTABLE",
    "MAC_ADMIN",
    "MAC_OVERRIDE",
    "MKNOD",
    "NET_ADMIN",
    "NET_BIND_SERVICE",
    "NET_BROADCAST",
    "NET_RAW",
    "SETFCAP",
    "SETGID",
    "SETPCAP",
    "SETUID",
    "SYSLOG",
    "SYS_ADMIN",
    "SYS_BOOT",
    "SYS_CHROOT",
    "SYS_MODULE",
    "SYS_NICE",
    "SYS_PACCT",
    "SYS_PTRACE",
    "SYS_RAWIO",
    "SYS_TIME",
    "SYS_TTY_CONFIG",
    "WAKE_ALARM",
]
NODE_DOCKERFILE = """FROM {base}
USER root
RUN apt-get update -q \\
 && DEBIAN_FRONTEND=noninteractive apt-get install -y -q --no-install-recommends \\
      slurmd slurmctld slurm-client munge podman runc socat ca-certificates procps \\
 && rm -rf /var/lib/apt/lists/*
# crun refuses this machine's cgroup v1 hybrid layout; runc runs there
RUN printf '[engine]\\nruntime = "runc"\\ncgroup_manager = "cgroupfs"\\n' \\
      > /etc/containers/containers.conf \\
 && printf '[[registry]]\\nlocation = "127.0.0.1:5000"\\ninsecure = true\\n' \\
      > /etc/containers/registries.conf.d/loopback.conf
"""
SLURM_CONF = """ClusterName=reprobuild
SlurmctldHost=ctl
AuthType=auth/munge
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
SchedulerType=sched/builtin
SelectType=select/cons_tres
SlurmctldPidFile=/run/slurmctld.pid
SlurmdPidFile=/run/slurmd.pid
SlurmdSpoolDir=/var/spool/slurmd
StateSaveLocation=/var/spool/slurmctld
SlurmUser=root
SlurmdUser=root
ReturnToService=2
MpiDefault=none
MinJobAge=3600
SlurmdTimeout=20
KillWait=10
JobAcctGatherType=jobacct_gather/none
AccountingStorageType=accounting_storage/none
NodeName=c[1-2] CPUs={cpus} State=UNKNOWN
PartitionName=debug Nodes=c[1-2] Default=YES MaxTime=INFINITE State=UP
"""
OCI_CONF = """# Slurm's own containers (srun --container): runc as root, as the script's header says
RunTimeQuery="runc --root=/run/reprobuild-runc state %n.%u.%j.%s.%t"
RunTimeKill="runc --root=/run/reprobuild-runc kill -a %n.%u.%j.%s.%t"
RunTimeDelete="runc --root=/run/reprobuild-runc delete --force %n.%u.%j.%s.%t"
RunTimeRun="runc --root=/run/reprobuild-runc run %n.%u.%j.%s.%t -b %b"
"""
START = """#!/bin/sh
set -e
install -m 0400 -o munge -g munge /etc/rb/munge.key /etc/munge/munge.key
mkdir -p /run/munge /var/spool/slurmd /var/spool/slurmctld
chown munge /run/munge
su -s /bin/sh munge -c munged
cp /etc/rb/slurm.conf /etc/rb/oci.conf /etc/slurm/
if [ "$(hostname)" = ctl ]; then
  slurmctld -i
else
  setsid socat TCP-LISTEN:5000,bind=127.0.0.1,fork,reuseaddr "TCP:$1" </dev/null >/dev/null 2>&1 &
  slurmd
fi
"""


def docker(*args: str, timeout: float = 600, check: bool = True) -> str:
    proc = subprocess.run(
        ["docker", *args], capture_output=True, text=True, timeout=timeout, check=False
    )
    if check and proc.returncode != 0:
        raise AssertionError(f"docker {' '.join(args[:3])}: {proc.stderr[-2000:]}")
    return proc.stdout


@dataclass
class Cluster:
    prefix: str
    shared: Path
    made: list[tuple[str, str]] = field(default_factory=list)
    bin: Path | None = None
    """A directory with ``sbatch``: the controller's, for commands run on this host."""

    def exec(self, node: str, *cmd: str, env: dict[str, str] | None = None) -> str:
        options = [f"--env={k}={v}" for k, v in (env or {}).items()]
        return docker("exec", "-w", str(self.shared), *options, f"{self.prefix}-{node}", *cmd)

    def submit(self, script: Path, env: dict[str, str] | None = None) -> str:
        """sbatch the script as written; the job's id."""
        return self.exec("ctl", "sbatch", "--parsable", script.name, env=env).strip()

    def wait(self, job: str) -> dict[str, str]:
        """Wait for the job with Slurm's own scontrol; its final fields."""
        deadline = time.monotonic() + JOB_TIMEOUT_S
        while True:
            line = self.exec("ctl", "scontrol", "show", "job", "-o", job)
            fields = dict(re.findall(r"(\w+)=(\S*)", line))
            if fields.get("JobState") not in ("PENDING", "RUNNING", "CONFIGURING", "COMPLETING"):
                return fields
            assert time.monotonic() < deadline, f"job {job} still {fields.get('JobState')}"
            time.sleep(1)


SBATCH = """#!/bin/sh
# the controller's real sbatch, from the same directory (shared at the same path)
exec docker exec -w "$PWD" --env REPRO_JOB_DIR --env REPRO_THREADS --env REPRO_DETERMINISM \\
  {container} sbatch "$@"
"""


def _free_port(host: str) -> int:
    with socket.socket() as s:
        s.bind((host, 0))
        return int(s.getsockname()[1])


@pytest.fixture(scope="session")
def slurm_node_image(base_ref: str, tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """The test base with Debian's Slurm, munge, podman and runc; removed at the end."""
    tag = f"reprobuild-test/slurm-node:{uuid.uuid4().hex[:12]}"
    context = tmp_path_factory.mktemp("slurm-node")
    (context / "Dockerfile").write_text(NODE_DOCKERFILE.format(base=base_ref))
    proc = subprocess.run(
        ["docker", "build", "-q", "-t", tag, str(context)],
        capture_output=True,
        text=True,
        env={**os.environ, "DOCKER_BUILDKIT": "0"},
        timeout=900,
        check=False,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    yield tag
    docker("rmi", "-f", tag, check=False)


@pytest.fixture(scope="session")
def slurm_cluster(
    slurm_node_image: str, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[Cluster]:
    """ctl (slurmctld) and c1, c2 (slurmd) on a network of their own, sharing one directory
    at the same path; everything (containers, volumes, network) removed at the end."""
    prefix = f"rbslurm{uuid.uuid4().hex[:8]}"
    shared = tmp_path_factory.mktemp("slurm-shared")
    etc = tmp_path_factory.mktemp("slurm-etc")
    (etc / "munge.key").write_bytes(secrets.token_bytes(1024))
    (etc / "slurm.conf").write_text(SLURM_CONF.format(cpus=os.cpu_count() or 1))
    (etc / "oci.conf").write_text(OCI_CONF)
    (etc / "start.sh").write_text(START)
    (etc / "start.sh").chmod(0o755)
    cluster = Cluster(prefix, shared)
    try:
        docker("network", "create", prefix)
        cluster.made.append(("network", prefix))
        gateway = docker(
            "network", "inspect", prefix, "-f", "{{(index .IPAM.Config 0).Gateway}}"
        ).strip()
        port = _free_port(gateway)
        fwd = f"{prefix}-fwd"
        docker(
            *("run", "-d", "--name", fwd, "--network", "host", "--entrypoint", "socat"),
            slurm_node_image,
            f"TCP-LISTEN:{port},bind={gateway},fork,reuseaddr",
            "TCP:127.0.0.1:5000",
        )
        cluster.made.append(("container", fwd))
        for node in ("ctl", *NODES):
            volume = f"{prefix}-{node}-podman"
            docker("volume", "create", volume)
            cluster.made.append(("volume", volume))
            docker(
                *("run", "-d", "--name", f"{prefix}-{node}", "--hostname", node),
                *("--network", prefix, "--user", "root"),
                *(f"--cap-add={cap}" for cap in CAPS),
                *("--security-opt", "seccomp=unconfined", "--security-opt", "apparmor=unconfined"),
                *("--security-opt", "systempaths=unconfined"),
                *("--device-cgroup-rule", "a *:* rwm", "--cgroupns=host"),
                *("-v", "/sys/fs/cgroup:/sys/fs/cgroup:rw"),
                *("-v", f"{volume}:/var/lib/containers"),  # overlay needs a non-overlay root
                *("-v", f"{etc}:/etc/rb:ro", "-v", f"{shared}:{shared}"),
                *("--entrypoint", "sleep", slurm_node_image, "infinity"),
            )
            cluster.made.insert(0, ("container", f"{prefix}-{node}"))
        for node in ("ctl", *NODES):
            docker("exec", f"{prefix}-{node}", "/etc/rb/start.sh", f"{gateway}:{port}")
        deadline = time.monotonic() + 60
        while "idle" not in cluster.exec("ctl", "sinfo", "-h", "-o", "%T %D"):
            assert time.monotonic() < deadline, cluster.exec("ctl", "sinfo")
            time.sleep(1)
        bin_dir = tmp_path_factory.mktemp("slurm-bin")
        (bin_dir / "sbatch").write_text(SBATCH.format(container=f"{prefix}-ctl"))
        (bin_dir / "sbatch").chmod(0o755)
        cluster.bin = bin_dir
        yield cluster
    finally:
        for kind, name in cluster.made:
            if kind == "container":
                docker("rm", "-f", "-v", name, check=False)
        for kind, name in cluster.made:
            if kind in ("volume", "network"):
                docker(kind, "rm", name, check=False)


@pytest.fixture(scope="session")
def pushed_image(determinism_image: str) -> Iterator[str]:
    """The determinism image pushed to the loopback registry: NAME@sha256:<digest>."""
    name = f"127.0.0.1:5000/reprobuild-test/slurm-ddp:{uuid.uuid4().hex[:12]}"
    docker("tag", determinism_image, name)
    try:
        docker("push", name, timeout=1200)
        digests = json.loads(docker("image", "inspect", name, "-f", "{{json .RepoDigests}}"))
        repo = name.rsplit(":", 1)[0]
        (ref,) = [d for d in digests if d.startswith(f"{repo}@")]
        yield ref
    finally:
        docker("rmi", name, check=False)


def ddp_project(tmp_path: Path) -> Path:
    project = tmp_path / "project"
    shutil.copytree(DATA / "projects" / "determinism", project)
    config = project / "reprobuild.yaml"
    text = config.read_text().replace(
        'command: ["python", "scripts/torch_mlp.py"]', 'command: ["python", "scripts/ddp_train.py"]'
    )
    assert "ddp_train.py" in text
    config.write_text(text)
    return project


def final_line(text: str) -> str:
    lines = [line for line in text.splitlines() if line.startswith("final_loss ")]
    assert len(lines) == 1, text[-3000:]
    return lines[0]


def write_script(cluster: Cluster, project: Path, image: str, label: str, *options: str) -> Path:
    script = cluster.shared / f"{label}.sbatch"
    proc = run_cli(
        "slurm",
        str(project),
        *("--nodes", "2", "--nproc-per-node", "2", "--image", image, "-o", str(script)),
        *options,
    )
    assert proc.returncode == 0, proc.stderr
    return script


def run_on_slurm(
    cluster: Cluster,
    project: Path,
    image: str,
    label: str,
    *options: str,
    env: dict[str, str] | None = None,
) -> tuple[str, dict[str, Any], Path, float]:
    """Write the script with the CLI, submit it unchanged, wait; rank 0's final line, its
    metrics, the job's directory and the job's wall time (submit to end)."""
    script = write_script(cluster, project, image, label, *options)
    started = time.monotonic()
    # the submitting shell's variables reach the job (sbatch's --export=ALL)
    job = cluster.submit(script, env={"REPRO_THREADS": "1", **(env or {})})
    fields = cluster.wait(job)
    took = time.monotonic() - started
    out = (cluster.shared / f"slurm-{job}.out").read_text(errors="replace")
    assert fields["JobState"] == "COMPLETED" and fields["ExitCode"] == "0:0", out[-4000:]
    job_dir = cluster.shared / f"reprobuild-{job}"
    metrics = json.loads((job_dir / "out" / "node-0" / "metrics.json").read_text())
    return final_line(out), metrics, job_dir, took


def run_on_compose(project: Path, image: str, directory: Path) -> tuple[str, dict[str, Any], float]:
    directory.mkdir()
    (directory / "data").mkdir()
    file = directory / "compose.yml"
    proc = run_cli(
        "compose",
        str(project),
        *("--nodes", "2", "--nproc-per-node", "2", "--image", image, "-o", str(file)),
    )
    assert proc.returncode == 0, proc.stderr
    name = f"rbslurmc{uuid.uuid4().hex[:10]}"
    clean = {k: v for k, v in os.environ.items() if not k.startswith(("REPRO_", "DDP_"))}
    env = {**clean, "REPRO_THREADS": "1", "REPRO_QUIET": "1"}
    base = ["docker-compose", "-p", name, "-f", str(file)]
    started = time.monotonic()
    try:
        up = subprocess.run(
            [*base, "up", "--no-color"],
            capture_output=True,
            text=True,
            cwd=directory,
            env=env,
            timeout=JOB_TIMEOUT_S,
            check=False,
        )
        took = time.monotonic() - started
        assert up.returncode == 0, up.stderr[-3000:]
        logs = subprocess.run(
            [*base, "logs", "--no-color", "node-0"],
            capture_output=True,
            text=True,
            cwd=directory,
            env=env,
            timeout=120,
            check=True,
        ).stdout
    finally:
        subprocess.run(
            [*base, "down", "-t", "1"], capture_output=True, cwd=directory, env=env, timeout=120
        )
    line = final_line("\n".join(part.split("| ", 1)[-1] for part in logs.splitlines()))
    metrics = json.loads((directory / "out" / "node-0" / "metrics.json").read_text())
    return line, metrics, took


@pytest.fixture(scope="session")
def compose_reference(
    pushed_image: str, tmp_path_factory: pytest.TempPathFactory
) -> tuple[str, dict[str, Any], float]:
    """The same image's `compose --nodes 2` job, run once: rank 0's final line, its metrics,
    its wall time."""
    tmp = tmp_path_factory.mktemp("slurm-compose")
    return run_on_compose(ddp_project(tmp), pushed_image, tmp / "compose")


def job_seconds(cluster: Cluster, job: str) -> tuple[int, int]:
    """(queued, ran): Slurm's own SubmitTime -> StartTime -> EndTime of a finished job."""
    line = cluster.exec("ctl", "scontrol", "show", "job", "-o", job)
    fields = dict(re.findall(r"(\w+)=(\S*)", line))
    at = {
        k: time.mktime(time.strptime(fields[k], "%Y-%m-%dT%H:%M:%S"))
        for k in ("SubmitTime", "StartTime", "EndTime")
    }
    return int(at["StartTime"] - at["SubmitTime"]), int(at["EndTime"] - at["StartTime"])


def test_slurm_job_gives_the_compose_job_s_bits(
    slurm_cluster: Cluster,
    pushed_image: str,
    compose_reference: tuple[str, dict[str, Any], float],
    tmp_path: Path,
) -> None:
    """`verify --slurm` submits the script twice (the real sbatch --wait) and finds the jobs
    identical; the first job's final line and metrics are the compose job's."""
    project = ddp_project(tmp_path)
    script = write_script(slurm_cluster, project, pushed_image, "strict")
    keep = slurm_cluster.shared / "verify-strict"
    assert slurm_cluster.bin is not None
    started = time.monotonic()
    proc = run_cli(
        *("verify", "--slurm", str(script), "--keep", str(keep), "--json"),
        cwd=slurm_cluster.shared,
        env={"PATH": f"{slurm_cluster.bin}:{os.environ['PATH']}", "REPRO_THREADS": "1"},
        timeout=2 * JOB_TIMEOUT_S,
    )
    verify_s = time.monotonic() - started
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    report = json.loads(proc.stdout)
    assert report["result"] == "identical" and report["first_divergence"] is None
    assert report["compared"]["nodes"] == 2 and report["compared"]["files"] >= 1
    assert report["compared"]["lines"] >= 2
    jobs = [job["job_id"] for job in report["jobs"]]
    first = final_line((keep / "run-1" / "stdout").read_text())
    assert final_line((keep / "run-2" / "stdout").read_text()) == first
    metrics = json.loads((keep / "run-1" / "out" / "node-0" / "metrics.json").read_text())
    composed, compose_metrics, compose_s = compose_reference
    times = [job_seconds(slurm_cluster, job) for job in jobs]
    print(
        f"\n2x2 DDP job: Slurm (podman) jobs {jobs}: queued/ran {times} s (the first pulls the "
        f"image on both nodes); verify --slurm {verify_s:.1f} s in all; compose {compose_s:.1f} s"
    )
    assert first == composed and metrics == compose_metrics

    # node i is the i-th name in sorted order and holds ranks 2i, 2i+1, each with its seed
    records = []
    for path in sorted((keep / "run-1").glob("runs/node-*/run-*-frameworks-*.json")):
        data = json.loads(path.read_text())
        if data.get("distributed"):
            records.append(data | {"_node": path.parent.name})
    records.sort(key=lambda r: r["distributed"]["rank"])
    assert [r["distributed"]["rank"] for r in records] == [0, 1, 2, 3]
    for record in records:
        dist = record["distributed"]
        rank = dist["rank"]
        assert record["_node"] == f"node-{rank // 2}"
        assert dist["host"] == NODES[rank // 2]
        assert dist["group_rank"] == rank // 2 and dist["rank_seed"] == rank
        assert dist["backend"] == "gloo" and dist["max_restarts"] == 0

    # the control: without the runtime's determinism, another loss
    off, _, _, _ = run_on_slurm(
        slurm_cluster,
        project,
        pushed_image,
        "off",
        env={"REPRO_DETERMINISM": "off"},
    )
    assert off != first


def test_slurm_s_own_containers_run_the_unpacked_bundle_with_the_same_bits(
    slurm_cluster: Cluster,
    pushed_image: str,
    compose_reference: tuple[str, dict[str, Any], float],
    tmp_path: Path,
) -> None:
    """--runtime oci: `reprobuild slurm` unpacks the image (checked layer by layer) into a
    bundle on the shared directory; the script, unchanged, runs it with srun --container and
    the nodes' oci.conf (runc); same final line and metrics as compose, no container left."""
    project = ddp_project(tmp_path)
    bundle = slurm_cluster.shared / "bundle"
    options = ("--runtime", "oci", "--bundle", str(bundle))
    started = time.monotonic()
    write_script(slurm_cluster, project, pushed_image, "oci", *options)
    unpack_s = time.monotonic() - started
    record = json.loads((bundle / "reprobuild-bundle.json").read_text())
    assert record["image"] == pushed_image and len(record["diff_ids"]) == len(record["layers"])
    line, metrics, job_dir, took = run_on_slurm(
        slurm_cluster, project, pushed_image, "oci", *options
    )
    job = job_dir.name.removeprefix("reprobuild-")
    composed, compose_metrics, _ = compose_reference
    print(
        f"\n2x2 DDP job, --runtime oci: unpack {unpack_s:.1f} s (once per image), job "
        f"{took:.1f} s submit to end, queued/ran {job_seconds(slurm_cluster, job)} s"
    )
    assert line == composed and metrics == compose_metrics
    for node in NODES:
        left = slurm_cluster.exec(node, "runc", "--root=/run/reprobuild-runc", "list", "-q")
        assert left.strip() == "", (node, left)


def test_a_node_lost_mid_job_ends_it_with_slurm_s_state_and_one_line(
    slurm_cluster: Cluster, pushed_image: str, tmp_path: Path
) -> None:
    """Last in this file: it stops compute node c2 for good."""
    script = write_script(
        slurm_cluster,
        ddp_project(tmp_path),
        pushed_image,
        "lost",
        # long enough to be stopped in the middle (see tests/engine/test_nodes.py)
        *("--env", "DDP_EPOCHS=40", "--env", "DDP_SLEEP=0.05"),
    )
    job = slurm_cluster.submit(script, env={"REPRO_THREADS": "1", "REPRO_DIST_TIMEOUT_S": "30"})
    out = slurm_cluster.shared / f"slurm-{job}.out"
    deadline = time.monotonic() + JOB_TIMEOUT_S
    while not out.is_file() or "epoch 0 loss" not in out.read_text(errors="replace"):
        assert time.monotonic() < deadline, out.read_text(errors="replace")[-3000:]
        time.sleep(1)
    docker("stop", "-t", "5", f"{slurm_cluster.prefix}-c2")
    stopped = time.monotonic()
    fields = slurm_cluster.wait(job)
    took = time.monotonic() - stopped
    text = out.read_text(errors="replace")
    print(f"\nlost node: job {fields['JobState']} {took:.0f} s after c2 stopped")
    assert fields["JobState"] in ("NODE_FAIL", "FAILED"), fields  # --no-requeue: not again
    assert "final_loss" not in text and "epoch 39" not in text
    errors = [line for line in text.splitlines() if line.startswith("reprobuild: error:")]
    assert len(errors) == 1 and "the job's srun step failed" in errors[0], text[-3000:]
    # nothing left on the other node: its container went with the step
    assert slurm_cluster.exec("c1", "podman", "ps", "-aq").strip() == ""
