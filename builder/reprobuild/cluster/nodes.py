"""A multi-node training job: its shape, and the ``torchrun`` line every node runs.

One job: what ``reprobuild compose --nodes`` and ``reprobuild k8s`` share, pure (no engine, no
files). The renderers put the line into a compose service per node or a Kubernetes Indexed Job.

Rendezvous. Every node runs ``torchrun`` with the c10d rendezvous backend; node 0 hosts its
store (``--rdzv-endpoint NODE0:PORT``: torchrun on the host whose name matches the endpoint
starts the store). With c10d, torchrun ignores ``--node-rank`` (it says so on every node but
the first); the rendezvous gives node ranks in the sorted order of the nodes' addresses, so
each node passes ``--local-addr`` with its own name and the names sort in node order
(``node-0`` ... ``node-9``, zero-padded beyond ten). Node *i* then holds global ranks
``i*M .. i*M+M-1`` run after run, which is what the rank seeds and the data shards follow.

Bounded waits. ``--max-restarts 0``: a failed worker fails the job instead of an elastic
restart (a restart would replay the rank's seed from the start: see the README). A node that
never comes fails the rendezvous after ``join_timeout``; a node lost mid-run breaks its peers'
gloo/NCCL connections, their workers fail, and torchrun exits non-zero.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import PurePosixPath

from reprobuild.errors import ReprobuildError, UsageError
from reprobuild.project.config import DEFAULT_MAX_WORLD_SIZE

DEFAULT_PORT = 29400
JOIN_TIMEOUT_S = 300
"""How long node 0's rendezvous waits for every node to join before the job fails."""
BACKEND_VAR = "REPRO_DIST_BACKEND"
JOB_ID_VAR = "REPRO_JOB_ID"
NODES_VAR = "REPRO_DIST_NODES"
"""Every node's host name, comma-separated: the runtime looks their addresses up once the
process group is up, so that a rank which loses a peer can name its node (the runtime's
``distinfo.NODES_VAR``)."""
DEFAULT_JOB_ID = "reprobuild"
_PYTHON_RE = re.compile(r"python(?:3(?:\.\d+)?)?")


class JobShapeError(UsageError):
    """A node count, processes per node or world size the job cannot have."""


@dataclass(frozen=True)
class JobShape:
    nodes: int
    nproc_per_node: int
    max_world_size: int = DEFAULT_MAX_WORLD_SIZE
    port: int = DEFAULT_PORT
    gpu: bool = False

    def __post_init__(self) -> None:
        for option, value in (("--nodes", self.nodes), ("--nproc-per-node", self.nproc_per_node)):
            if isinstance(value, bool) or not isinstance(value, int) or value < 1:
                raise JobShapeError(
                    f"{option} {value!r} is not allowed: use a whole number from 1 to "
                    f"{self.max_world_size} (the project's max_world_size)"
                )
        if self.world_size > self.max_world_size:
            raise JobShapeError(
                f"--nodes {self.nodes} x --nproc-per-node {self.nproc_per_node} is a world size "
                f"of {self.world_size}, above the project's max_world_size {self.max_world_size}",
                hint="use fewer nodes or processes, or raise max_world_size in reprobuild.yaml",
            )
        if not 1 <= self.port <= 65535:
            raise JobShapeError(f"port {self.port} is not a TCP port: use 1 to 65535")

    @property
    def world_size(self) -> int:
        return self.nodes * self.nproc_per_node

    @property
    def backend(self) -> str:
        return "nccl" if self.gpu else "gloo"

    def node_names(self) -> tuple[str, ...]:
        width = len(str(self.nodes - 1))
        return tuple(f"node-{i:0{width}d}" for i in range(self.nodes))


def program_args(command: tuple[str, ...]) -> tuple[str, ...]:
    """What follows torchrun's own options for ``command``: torchrun starts Python itself
    (``python -u``), so ``python script.py ARGS`` becomes ``script.py ARGS``, ``python -m mod
    ARGS`` becomes ``--module mod ARGS``, and anything else runs as it is (``--no-python``)."""
    if not command:
        raise ReprobuildError(
            "the project has no command and the image no CMD: torchrun needs a program",
            hint="set command: in reprobuild.yaml, e.g. [python, train.py]",
        )
    first, rest = command[0], list(command[1:])
    if not _PYTHON_RE.fullmatch(PurePosixPath(first).name):
        return ("--no-python", *command)
    while rest and rest[0] == "-u":  # torchrun passes -u itself
        rest.pop(0)
    if rest and rest[0] == "-m" and len(rest) > 1:
        return ("--module", *rest[1:])
    if not rest or rest[0].startswith("-"):
        raise ReprobuildError(
            f"command {' '.join(command)!r} cannot run under torchrun: it starts "
            "`python -u SCRIPT` or `python -u -m MODULE` itself, with no other interpreter "
            "options",
            hint="make the command `python SCRIPT ARGS` or `python -m MODULE ARGS`",
        )
    return tuple(rest)


def torchrun_command(
    shape: JobShape, program: tuple[str, ...], *, node: str, endpoint: str, job_id: str
) -> tuple[str, ...]:
    """The line node ``node`` runs: torchrun with the c10d rendezvous at ``endpoint``."""
    return (
        "torchrun",
        f"--nnodes={shape.nodes}",
        f"--nproc-per-node={shape.nproc_per_node}",
        "--rdzv-backend=c10d",
        f"--rdzv-endpoint={endpoint}:{shape.port}",
        f"--rdzv-id={job_id}",
        f"--rdzv-conf=join_timeout={JOIN_TIMEOUT_S}",
        f"--local-addr={node}",
        "--max-restarts=0",
        "--monitor-interval=1",
        *program_args(program),
    )


def require_torch(image: str, distributions: tuple[str, ...]) -> None:
    """A multi-node job runs torchrun: the image must have torch installed."""
    names = {d.lower().replace("_", "-") for d in distributions}
    if "torch" not in names:
        raise ReprobuildError(
            f"{image} has no torch (its manifest lists {len(names)} distributions, none of "
            "them torch): a multi-node job runs torchrun",
            hint="add torch to the project's lock and rebuild the image",
        )
