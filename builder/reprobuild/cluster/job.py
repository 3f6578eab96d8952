"""A multi-node training job, described once: what ``compose --nodes``, ``k8s`` and ``slurm``
write, each in its engine's syntax.

One job: the typed description (:class:`NodesJob`) and the one way a project becomes one
(:func:`project_job`: the project's file, ``--nodes``/``--nproc-per-node``/``--env`` checked
first, then the image pinned and its manifest read for torch). Pure apart from that engine
look-up; the writers (:mod:`reprobuild.cluster.compose`, :mod:`reprobuild.cluster.k8s`,
:mod:`reprobuild.cluster.slurm`) only spell it:

- nodes and ranks: ``shape.nodes`` nodes of ``shape.nproc_per_node`` processes; node *i*
  holds global ranks ``i*M .. i*M+M-1`` run after run (:mod:`reprobuild.cluster.nodes` says
  how torchrun's c10d rendezvous is made to keep that order);
- the rendezvous: c10d, its store on the first node, at ``shape.port``;
- seeds: ``REPRO_SEED`` for the job; each rank seeds with ``(seed + rank) mod 2**32``
  (the runtime's scheme, :func:`rank_seeds`);
- mounts: the job's data read-only at ``/data``, a run-record and an output directory per
  node (:data:`MOUNTS`);
- the environment: reprobuild's own variables (:meth:`NodesJob.variables`), some of them
  overridable from the shell that starts the job, then the user's ``--env``;
- the image: pinned (``NAME@sha256:<digest>``, or an image ID where the writer allows one).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

from reprobuild.bases.refs import parse_ref
from reprobuild.cluster.nodes import (
    BACKEND_VAR,
    NODES_VAR,
    JobShape,
    JobShapeError,
    program_args,
    require_torch,
    torchrun_command,
)
from reprobuild.cluster.pinning import (
    IMAGE_ID_RE,
    ImageLookup,
    PinnedImage,
    image_distributions,
    pin_project_image,
)
from reprobuild.cluster.userenv import UserEnv, check_env, parse_env
from reprobuild.project.config import ProjectConfig, load_config
from reprobuild_entrypoint.contract import (
    DATA_DIR,
    IMAGE_VAR,
    MODE_VAR,
    OUT_DIR,
    OUTPUT_DIR_VAR,
    RECORD_DIR,
    RUN_DIR_VAR,
    SEED_VAR,
    TRIAL_VAR,
)
from reprobuild_entrypoint.settings import rank_seed

THREADS_VAR = "REPRO_THREADS"
DIST_TIMEOUT_VAR = "REPRO_DIST_TIMEOUT_S"
SHM_PER_PROCESS_GB = 1
"""/dev/shm per training process: DataLoader workers pass batches through shared memory, and
the engines' default (64 MB) is too little for one worker."""


@dataclass(frozen=True)
class Var:
    """One of reprobuild's variables. ``shell``: the shell that starts the job may override it
    (compose writes ``${NAME:-value}``); a writer with no shell (Kubernetes) writes the value,
    and leaves an empty one out."""

    name: str
    value: str
    shell: bool = False


@dataclass(frozen=True)
class Mount:
    """A directory of the job's: ``data`` (shared by every node), ``runs`` and ``out`` (one
    per node) at ``target`` in the container."""

    kind: str
    target: str
    read_only: bool = False


MOUNTS: tuple[Mount, ...] = (
    Mount("data", DATA_DIR, read_only=True),
    Mount("runs", RECORD_DIR),
    Mount("out", OUT_DIR),
)
PER_NODE = ("runs", "out")
"""The mounts each node has its own directory of (``runs/<node>``, ``out/<node>``)."""


def run_variables(image: str, seed: int | None, determinism: str | None) -> tuple[Var, ...]:
    """The variables every run of the image gets, single container or node alike."""
    return (
        Var(SEED_VAR, "" if seed is None else str(seed), shell=True),
        Var(MODE_VAR, determinism or "", shell=True),
        Var(TRIAL_VAR, "", shell=True),  # trial k of the seed; empty: no trial
        Var(RUN_DIR_VAR, RECORD_DIR),
        Var(OUTPUT_DIR_VAR, OUT_DIR),
        Var(IMAGE_VAR, image),  # the run's MLflow tags name it (a container cannot see it)
    )


@dataclass(frozen=True)
class NodesJob:
    """One multi-node torchrun job, whatever engine runs it."""

    image: str
    shape: JobShape
    command: tuple[str, ...]
    """The program (the project's ``command``, else the image's CMD); torchrun starts it."""
    seed: int | None = None
    determinism: str | None = None
    env: UserEnv = ()
    """The user's own variables (``--env``), after reprobuild's on every node."""
    project: str | None = None
    source: str | None = None
    """How the image was named (the tag or ID asked for), for a header."""
    workdir: str = ""
    """The image's working directory (for runtimes that do not apply it themselves)."""

    def __post_init__(self) -> None:
        check_env(self.env)
        program_args(self.command)  # refuses a command torchrun cannot run

    @property
    def gpu(self) -> bool:
        return self.shape.gpu

    def node_names(self) -> tuple[str, ...]:
        """``node-0`` ...: each node's name for its directories (and its host on compose)."""
        return self.shape.node_names()

    def ranks(self, node: int) -> range:
        """The global ranks node ``node`` holds: ``node*M .. node*M+M-1``."""
        m = self.shape.nproc_per_node
        return range(node * m, node * m + m)

    def rank_seeds(self, node: int, seed: int | None = None) -> tuple[int, ...]:
        """The seed each of node ``node``'s ranks gives its RNGs, for the job's seed."""
        base = self.seed if seed is None else seed
        if base is None:
            return ()
        return tuple(rank_seed(base, rank) for rank in self.ranks(node))

    def torchrun(
        self,
        *,
        node: str,
        endpoint: str,
        job_id: str,
        escape: Callable[[str], str] = str,
    ) -> tuple[str, ...]:
        """The line node ``node`` runs, the rendezvous at ``endpoint`` (the first node);
        ``escape`` makes each program word literal for the writer's format."""
        program = tuple(escape(word) for word in self.command)
        return torchrun_command(self.shape, program, node=node, endpoint=endpoint, job_id=job_id)

    def variables(self, nodes: Sequence[str]) -> tuple[Var, ...]:
        """reprobuild's variables on every node; ``nodes``: every node's host name as the
        writer's engine knows it (the runtime names a lost peer by it)."""
        return (
            *run_variables(self.image, self.seed, self.determinism),
            Var(THREADS_VAR, "", shell=True),
            # the collective timeout when the program gives none (empty: torch's default)
            Var(DIST_TIMEOUT_VAR, "", shell=True),
            Var(BACKEND_VAR, self.shape.backend),
            Var(NODES_VAR, ",".join(nodes)),
        )

    def shm_gb(self) -> int:
        return SHM_PER_PROCESS_GB * self.shape.nproc_per_node


def job_shape(
    config: ProjectConfig, nodes: int | None, nproc_per_node: int | None, *, gpu: bool
) -> JobShape | None:
    """``--nodes``/``--nproc-per-node`` checked against the project (before any engine call)."""
    if nodes is None:
        if nproc_per_node is not None:
            raise JobShapeError("--nproc-per-node goes with --nodes N (a multi-node job)")
        return None
    return JobShape(
        nodes, 1 if nproc_per_node is None else nproc_per_node, config.max_world_size, gpu=gpu
    )


@dataclass(frozen=True)
class ProjectJob:
    job: NodesJob
    pinned: PinnedImage
    config: ProjectConfig


def project_job(
    directory: Path,
    *,
    nodes: int,
    nproc_per_node: int | None = None,
    gpu: bool = False,
    image: str | None = None,
    variant: str | None = None,
    engine: ImageLookup | None = None,
    env: Sequence[str] = (),
    what: str = "multi-node job",
) -> ProjectJob:
    """The job for the project in ``directory`` and its built image (the default tag of
    ``reprobuild image DIR [--gpu | --variant NAME]``, or ``image``). The options are checked
    before the engine is asked anything; the image must have torch. An ``image`` given as
    ``NAME@sha256:...`` is written as given, else the engine's pinned reference is."""
    user_env = parse_env(env)
    config = load_config(directory)
    if variant is not None:
        gpu = config.variant(variant).gpu or gpu
    shape = job_shape(config, nodes, nproc_per_node, gpu=gpu)
    assert shape is not None
    pinned, engine = pin_project_image(
        directory, config, image, engine, gpu=gpu, variant=variant, what=what
    )
    reference = pinned.reference
    if image is not None and not IMAGE_ID_RE.fullmatch(image) and parse_ref(image).digest:
        reference = image
    require_torch(pinned.requested, image_distributions(engine, pinned))
    job = NodesJob(
        image=reference,
        shape=shape,
        command=config.command or pinned.cmd,
        seed=config.seed,
        determinism=config.determinism,
        env=user_env,
        project=config.name,
        source=pinned.requested,
        workdir=pinned.workdir,
    )
    return ProjectJob(job, pinned, config)
