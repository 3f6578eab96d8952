"""``reprobuild compose``: a compose file that trains (and verifies) with a built image.

One job: build a typed compose document for a project and an image, and render it to YAML.
The document is data (dataclasses, rendered with ``yaml.safe_dump``); nothing is spliced into
YAML text by hand, and every literal value that compose would interpolate has its ``$``
doubled. What it holds:

- ``prepare``: a one-shot container from the same image, run as root, that creates the host
  directories the runs write into (``runs/<service>``, ``out/<service>``) with mode 0777. The
  image runs as uid 10001; a directory Docker creates for a bind mount belongs to root, and the
  runtime refuses to start when it cannot write its run record there.
- ``train``: the project's ``command`` (else the image's CMD) with ``REPRO_SEED`` and
  ``REPRO_DETERMINISM`` from the project (overridable from the shell: ``${REPRO_SEED:-7}``),
  ``REPRO_RUN_DIR`` on ``runs/train``, ``REPRO_OUTPUT_DIR`` on ``out/train``, ``./data``
  mounted read-only at ``/data`` (``$REPRO_DATA`` overrides the host path), no network.
- ``verify-a``, ``verify-b`` (profile ``verify``): the same run twice, each with its own run and
  output directories, so that ``reprobuild diff`` can compare the two run records.
- with ``--gpu``: every run reserves all GPUs (``deploy.resources.reservations.devices``,
  ``capabilities: [gpu]``) and gets NGC's recommended memlock/stack limits.
- with ``--nodes N``: instead of ``train``/``verify-*``, a torchrun job (:func:`nodes_document`):
  ``node-0`` ... on an internal network ``job``, node 0 hosting the c10d rendezvous, records
  in ``runs/node-<i>``; the image must have torch (its manifest is read to check).
- with ``--env NAME=VALUE`` (:mod:`reprobuild.cluster.userenv`): the user's own variables, after
  reprobuild's, in every service that runs the program (not ``prepare``), ``$`` doubled; one
  of the shell pass-throughs (``REPRO_THREADS``, ``REPRO_TRIAL``, ``REPRO_DIST_TIMEOUT_S``)
  given this way is written as given instead.

The format is the Compose Specification without a ``version:`` key, restricted to what both
docker-compose 1.29 (1.28+ for device reservations and profiles) and Compose v2 accept.

The image is pinned: a ``NAME@sha256:`` reference is used as written; a tag or an image ID is
looked up on the engine and replaced by ``NAME@sha256:<repo digest>`` when the image has one
(it was pushed or pulled), else by its image ID (``sha256:...``).
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

import yaml

from reprobuild import __version__
from reprobuild.bases.refs import parse_ref
from reprobuild.cluster.job import (
    MOUNTS,
    NodesJob,
    ProjectJob,
    Var,
    job_shape,
    project_job,
    run_variables,
)
from reprobuild.cluster.nodes import DEFAULT_JOB_ID, JOB_ID_VAR, JobShape
from reprobuild.cluster.pinning import (
    IMAGE_ID_RE,
    ImageLookup,
    PinnedImage,
    check_pinned,
    pin_project_image,
)
from reprobuild.cluster.userenv import UserEnv, check_env, merged, parse_env, shell_names
from reprobuild.errors import ReprobuildError
from reprobuild.project.config import ProjectConfig, load_config
from reprobuild_entrypoint.contract import IMAGE_VAR, MODE_VAR, SEED_VAR, TRIAL_VAR
from reprobuild_entrypoint.settings import MODES, SEED_MAX

# Mount points inside the container: the same as `reprobuild verify` uses.
# Host paths, relative to the compose file's directory.
HOST_DATA = "${REPRO_DATA:-./data}"
HOST_RUNS = "./runs"
HOST_OUT = "./out"
PREPARE_MOUNT = "/reprobuild-prepare"
IMAGE_PLACEHOLDER = (
    "${REPRO_IMAGE:?set REPRO_IMAGE to the image reprobuild built, pinned: "
    "NAME@sha256:<digest> or its image ID sha256:<hex>}"
)
TRAIN = "train"
VERIFY = ("verify-a", "verify-b")
VERIFY_PROFILE = "verify"
SHM_SIZE = "1gb"
# NVIDIA's recommended limits for its framework containers (NGC user guide:
# --shm-size=1g --ulimit memlock=-1 --ulimit stack=67108864).
GPU_ULIMITS: tuple[tuple[str, int], ...] = (("memlock", -1), ("stack", 67108864))


# ---- the typed document -------------------------------------------------------------------


@dataclass(frozen=True)
class GpuReservation:
    """``deploy.resources.reservations.devices``: all of the host's NVIDIA GPUs."""

    driver: str = "nvidia"
    count: str | int = "all"
    capabilities: tuple[str, ...] = ("gpu",)

    def to_dict(self) -> dict[str, Any]:
        return {
            "resources": {
                "reservations": {
                    "devices": [
                        {
                            "driver": self.driver,
                            "count": self.count,
                            "capabilities": list(self.capabilities),
                        }
                    ]
                }
            }
        }


@dataclass(frozen=True)
class DependsOn:
    service: str
    condition: str = "service_completed_successfully"


@dataclass(frozen=True)
class Service:
    """One service, in the order its keys are written."""

    image: str
    hostname: str | None = None
    profiles: tuple[str, ...] = ()
    depends_on: tuple[DependsOn, ...] = ()
    user: str | None = None
    entrypoint: tuple[str, ...] | None = None
    command: tuple[str, ...] | None = None
    environment: tuple[tuple[str, str], ...] = ()
    volumes: tuple[str, ...] = ()
    network_mode: str | None = "none"
    networks: tuple[str, ...] = ()
    shm_size: str | None = None
    ulimits: tuple[tuple[str, int], ...] = ()
    deploy: GpuReservation | None = None

    def to_dict(self) -> dict[str, Any]:
        out: dict[str, Any] = {"image": self.image}
        if self.hostname is not None:
            out["hostname"] = self.hostname
        if self.profiles:
            out["profiles"] = list(self.profiles)
        if self.depends_on:
            out["depends_on"] = {d.service: {"condition": d.condition} for d in self.depends_on}
        if self.user is not None:
            out["user"] = self.user
        if self.entrypoint is not None:
            out["entrypoint"] = list(self.entrypoint)
        if self.command is not None:
            out["command"] = list(self.command)
        if self.environment:
            out["environment"] = dict(self.environment)
        if self.volumes:
            out["volumes"] = list(self.volumes)
        if self.network_mode is not None:
            out["network_mode"] = self.network_mode
        if self.networks:
            out["networks"] = list(self.networks)
        if self.shm_size is not None:
            out["shm_size"] = self.shm_size
        if self.ulimits:
            out["ulimits"] = dict(self.ulimits)
        if self.deploy is not None:
            out["deploy"] = self.deploy.to_dict()
        return out


@dataclass(frozen=True)
class Network:
    """A network of the compose project's own. ``internal``: no route out of it (the nodes
    talk to each other only)."""

    internal: bool = True

    def to_dict(self) -> dict[str, Any]:
        return {"driver": "bridge", "internal": self.internal}


@dataclass(frozen=True)
class ComposeFile:
    header: tuple[str, ...]
    services: tuple[tuple[str, Service], ...]
    networks: tuple[tuple[str, Network], ...] = ()

    def to_dict(self) -> dict[str, Any]:
        out: dict[str, Any] = {
            "services": {name: service.to_dict() for name, service in self.services}
        }
        if self.networks:
            out["networks"] = {name: network.to_dict() for name, network in self.networks}
        return out


# ---- what the document is made from -------------------------------------------------------


@dataclass(frozen=True)
class ComposeSpec:
    """The inputs of a compose file. ``image`` is a pinned reference, or the ``${REPRO_IMAGE}``
    placeholder of the files in ``compose/``. ``seed``/``determinism`` are the defaults of
    ``${REPRO_SEED}``/``${REPRO_DETERMINISM}``; None leaves them to the image's own."""

    image: str
    gpu: bool = False
    seed: int | None = None
    determinism: str | None = None
    command: tuple[str, ...] = ()
    project: str | None = None
    source: str | None = None
    """How the image was named (the tag or ID asked for), for the header."""
    shape: JobShape | None = None
    """A multi-node torchrun job (``--nodes``); None: the single-container file."""
    env: UserEnv = ()
    """The user's own variables (``--env``), after reprobuild's in every service that runs
    the program; one of the shell's pass-throughs (``REPRO_THREADS``) given here replaces it."""

    def __post_init__(self) -> None:
        check_env(self.env)
        if self.image != IMAGE_PLACEHOLDER:
            check_pinned(self.image)
        if self.seed is not None and not 0 <= self.seed <= SEED_MAX:
            raise ReprobuildError(f"seed {self.seed} must be an integer from 0 to {SEED_MAX}")
        if self.determinism is not None and self.determinism not in MODES:
            raise ReprobuildError(
                f"determinism {self.determinism!r} must be one of: {', '.join(MODES)}"
            )
        for word in self.command:
            if any(ord(c) < 32 or ord(c) == 127 for c in word):
                raise ReprobuildError(f"command word {word!r} contains a control character")


def escape(value: str) -> str:
    """A literal value for compose, which interpolates ``$VAR`` in every string: ``$$``."""
    return value.replace("$", "$$")


def _environment(variables: tuple[Var, ...], env: UserEnv) -> tuple[tuple[str, str], ...]:
    """reprobuild's variables (those the shell may override as ``${NAME:-default}``), then the
    user's ``--env`` variables, their values literal (``$$``)."""
    own = tuple((v.name, f"${{{v.name}:-{v.value}}}" if v.shell else v.value) for v in variables)
    return merged(own, tuple((name, escape(value)) for name, value in env))


def _volumes(node: str) -> tuple[str, ...]:
    """The job's mounts (:data:`reprobuild.cluster.job.MOUNTS`) for the service ``node``."""
    host = {"data": HOST_DATA, "runs": f"{HOST_RUNS}/{node}", "out": f"{HOST_OUT}/{node}"}
    return tuple(f"{host[m.kind]}:{m.target}{':ro' if m.read_only else ''}" for m in MOUNTS)


def _from_shell(spec: ComposeSpec, names: tuple[str, ...]) -> str:
    """The header's list of the variables the shell overrides: those ``--env`` left."""
    given = {name for name, _ in spec.env}
    return shell_names([name for name in names if name not in given])


def _env_note(spec: ComposeSpec) -> tuple[str, ...]:
    """A header line naming the ``--env`` variables (not their values), when there are any."""
    if not spec.env:
        return ()
    return (f"Set by --env for every run: {', '.join(name for name, _ in spec.env)}.",)


def _run_service(spec: ComposeSpec, name: str, profiles: tuple[str, ...] = ()) -> Service:
    return Service(
        image=spec.image,
        profiles=profiles,
        depends_on=(DependsOn("prepare"),),
        command=tuple(escape(w) for w in spec.command) or None,
        environment=_environment(run_variables(spec.image, spec.seed, spec.determinism), spec.env),
        volumes=_volumes(name),
        shm_size=SHM_SIZE,
        ulimits=GPU_ULIMITS if spec.gpu else (),
        deploy=GpuReservation() if spec.gpu else None,
    )


def _prepare(spec: ComposeSpec, names: tuple[str, ...]) -> Service:
    """The one-shot root container that creates ``runs/<name>`` and ``out/<name>`` (mode 0777)
    for every service that runs, before they start as the image user."""
    return Service(
        image=spec.image,
        user="0:0",
        entrypoint=(
            "install",
            "-d",
            "-m",
            "0777",
            *(f"{PREPARE_MOUNT}/{kind}/{name}" for name in names for kind in ("runs", "out")),
        ),
        volumes=(f"{HOST_RUNS}:{PREPARE_MOUNT}/runs", f"{HOST_OUT}:{PREPARE_MOUNT}/out"),
    )


def document(spec: ComposeSpec) -> ComposeFile:
    if spec.shape is not None:
        return nodes_document(spec, spec.shape)
    services = (
        ("prepare", _prepare(spec, (TRAIN, *VERIFY))),
        (TRAIN, _run_service(spec, TRAIN)),
        *((name, _run_service(spec, name, (VERIFY_PROFILE,))) for name in VERIFY),
    )
    return ComposeFile(header=_header(spec), services=services)


# ---- a multi-node torchrun job (--nodes) ---------------------------------------------------

JOB_NETWORK = "job"


def nodes_job(spec: ComposeSpec, shape: JobShape) -> NodesJob:
    """The job a ``--nodes`` spec describes (:mod:`reprobuild.cluster.job`)."""
    return NodesJob(
        image=spec.image,
        shape=shape,
        command=spec.command,
        seed=spec.seed,
        determinism=spec.determinism,
        env=spec.env,
        project=spec.project,
        source=spec.source,
    )


def nodes_document(spec: ComposeSpec, shape: JobShape) -> ComposeFile:
    """One service per node on the private network ``job``; every node runs torchrun with
    the c10d rendezvous on the first node (:mod:`reprobuild.cluster.nodes`)."""
    job = nodes_job(spec, shape)  # refuses a command torchrun cannot run, before anything else
    names = job.node_names()
    job_id = f"${{{JOB_ID_VAR}:-{DEFAULT_JOB_ID}}}"
    env = _environment(job.variables(names), job.env)
    services: list[tuple[str, Service]] = [("prepare", _prepare(spec, names))]
    for name in names:
        services.append(
            (
                name,
                Service(
                    image=spec.image,
                    hostname=name,
                    depends_on=(DependsOn("prepare"),),
                    command=job.torchrun(
                        node=name, endpoint=names[0], job_id=job_id, escape=escape
                    ),
                    environment=env,
                    volumes=_volumes(name),
                    network_mode=None,
                    networks=(JOB_NETWORK,),
                    shm_size=f"{job.shm_gb()}gb",
                    ulimits=GPU_ULIMITS if spec.gpu else (),
                    deploy=GpuReservation(count=shape.nproc_per_node) if spec.gpu else None,
                ),
            )
        )
    return ComposeFile(
        header=_nodes_header(spec, shape),
        services=tuple(services),
        networks=((JOB_NETWORK, Network()),),
    )


_NODES_FROM_SHELL = (
    SEED_VAR,
    MODE_VAR,
    TRIAL_VAR,
    "REPRO_THREADS",
    "REPRO_DIST_TIMEOUT_S",
    JOB_ID_VAR,  # last: the header says "(the rendezvous id)" after it
)
_FROM_SHELL = (SEED_VAR, MODE_VAR, TRIAL_VAR)


def _nodes_header(spec: ComposeSpec, shape: JobShape) -> tuple[str, ...]:
    gpu = " --gpu" if spec.gpu else ""
    made = f" for {spec.project}" if spec.project else ""
    named = f" ({spec.source})" if spec.source and spec.source != spec.image else ""
    names = shape.node_names()
    return (
        f"Generated by reprobuild {__version__}: `reprobuild compose --nodes {shape.nodes} "
        f"--nproc-per-node {shape.nproc_per_node}{gpu}`{made}.",
        f"Image: {spec.image}{named}",
        "",
        f"A torchrun job of {shape.nodes} node(s) x {shape.nproc_per_node} process(es) (world "
        f"size {shape.world_size}, backend {shape.backend}): one service per node on the "
        f"private network `{JOB_NETWORK}`;",
        f"{names[0]} hosts the c10d rendezvous on port {shape.port}. Run it, then read each "
        "node's exit status:",
        "  docker-compose -f FILE up",
        "  docker-compose -f FILE ps",
        "Here every node is a container on this host; on several hosts, run one node service "
        "per host",
        f"with a network that spans them (an overlay network) and {names[0]} reachable by "
        "that name.",
        "",
        "Host paths are relative to this file's directory:",
        "  data/            read-only at /data ($REPRO_DATA names another)",
        "  runs/<node>/     the node's run record and one framework record per rank "
        "(rank, rank seed, backend)",
        f"  out/<node>/      outputs ($REPRO_OUTPUT_DIR); global rank 0 runs on {names[0]}",
        f"{_from_shell(spec, _NODES_FROM_SHELL)} (the rendezvous id) from the shell override "
        "the defaults.",
        *_env_note(spec),
    )


def _header(spec: ComposeSpec) -> tuple[str, ...]:
    gpu = " --gpu" if spec.gpu else ""
    if spec.image == IMAGE_PLACEHOLDER:
        run = f"docker-compose -f compose/{'train-gpu' if spec.gpu else 'train'}.yml"
        first = [
            f"Train{' on GPUs' if spec.gpu else ''} with an image built by "
            f"`reprobuild image DIR{gpu}`, named by {IMAGE_VAR}.",
            f"`reprobuild compose DIR{gpu} -o FILE` writes this file pinned to a project's image.",
            "",
            f"  export {IMAGE_VAR}=sha256:<id>  # `reprobuild image DIR{gpu} --json` prints it",
        ]
        where = "this file's directory, or --project-directory DIR"
    else:
        made = f" for {spec.project}" if spec.project else ""
        named = f" ({spec.source})" if spec.source and spec.source != spec.image else ""
        first = [
            f"Generated by reprobuild {__version__}: `reprobuild compose{gpu}`{made}.",
            f"Image: {spec.image}{named}",
            "",
        ]
        where = "this file's directory"
        run = "docker-compose -f FILE"
    return (
        *first,
        f"  {run} run --rm train",
        f"  {run} run --rm verify-a",
        f"  {run} run --rm verify-b",
        "  reprobuild diff runs/verify-a/run-<id>.json runs/verify-b/run-<id>.json",
        "",
        f"Host paths are relative to the compose project directory ({where}):",
        "  data/            read-only at /data ($REPRO_DATA names another)",
        "  runs/<service>/  run records ($REPRO_RUN_DIR)",
        "  out/<service>/   outputs ($REPRO_OUTPUT_DIR)",
        "The one-shot `prepare` service makes runs/ and out/ writable for the image's user",
        f"(uid 10001). {_from_shell(spec, _FROM_SHELL)} from the shell override the defaults.",
        *_env_note(spec),
    )


class _Dumper(yaml.SafeDumper):
    """safe_dump without anchors: the services repeat values, each written out in full."""

    def ignore_aliases(self, data: Any) -> bool:
        return True


# Plain scalars that YAML 1.2 (Go's yaml.v3, which Compose v2 reads with) takes for a number,
# a bool or null, where PyYAML (YAML 1.1) writes them unquoted as strings: `1e3`, `0o17`,
# `.5e1`. Compose v2 then gave the container FLOAT=1000 for a FLOAT=1e3 in the file. yaml.v3
# also drops `_` before reading a number, so `1_0e3` is one too.
_YAML12_NOT_STRING = re.compile(
    r"""[-+]?(?:\.[0-9]+|[0-9]+(?:\.[0-9]*)?)(?:[eE][-+]?[0-9]+)?
    |[-+]?0(?:[oO][0-7]+|[xX][0-9a-fA-F]+|[bB][01]+)
    |[-+]?\.(?:inf|Inf|INF)|\.(?:nan|NaN|NAN)
    |~|null|Null|NULL|true|True|TRUE|false|False|FALSE""",
    re.VERBOSE,
)


def _represent_str(dumper: yaml.SafeDumper, data: str) -> yaml.ScalarNode:
    if _YAML12_NOT_STRING.fullmatch(data.replace("_", "")):
        return dumper.represent_scalar("tag:yaml.org,2002:str", data, style="'")
    return dumper.represent_str(data)


_Dumper.add_representer(str, _represent_str)


def render(doc: ComposeFile) -> str:
    header = "".join(f"# {line}".rstrip() + "\n" for line in doc.header)
    body = yaml.dump(
        doc.to_dict(),
        Dumper=_Dumper,
        sort_keys=False,
        default_flow_style=False,
        allow_unicode=False,
        width=1000,
    )
    return header + body


# ---- the whole command --------------------------------------------------------------------


@dataclass(frozen=True)
class ComposeResult:
    text: str
    spec: ComposeSpec
    image: PinnedImage | None
    """None when ``--image`` was already pinned by digest (used as written, not looked up)."""


def compose_project(
    directory: Path,
    *,
    gpu: bool = False,
    image: str | None = None,
    engine: ImageLookup | None = None,
    variant: str | None = None,
    nodes: int | None = None,
    nproc_per_node: int | None = None,
    env: Sequence[str] = (),
) -> ComposeResult:
    """The compose file for the project in ``directory`` and its built image (the default
    tag ``reprobuild image DIR [--gpu | --variant NAME]`` gives, or ``image``), pinned. With
    ``nodes``: a multi-node torchrun job (:func:`nodes_document`). ``env``: ``NAME=VALUE``
    options (``--env``), checked before anything else."""
    if nodes is not None:
        made: ProjectJob = project_job(
            directory,
            nodes=nodes,
            nproc_per_node=nproc_per_node,
            gpu=gpu,
            image=image,
            variant=variant,
            engine=engine,
            env=env,
            what="compose file",
        )
        job = made.job
        spec = spec_for(made.config, job.image, gpu=job.gpu, source=job.source)
        spec = replace(spec, command=job.command, shape=job.shape, env=job.env)
        return ComposeResult(render(document(spec)), spec, made.pinned)
    user_env = parse_env(env)
    config = load_config(directory)
    if variant is not None:
        gpu = config.variant(variant).gpu or gpu
    job_shape(config, nodes, nproc_per_node, gpu=gpu)  # --nproc-per-node without --nodes
    pinned: PinnedImage | None = None
    if image is not None and not IMAGE_ID_RE.fullmatch(image) and parse_ref(image).digest:
        reference = image
    else:
        pinned, engine = pin_project_image(
            directory, config, image, engine, gpu=gpu, variant=variant
        )
        reference = pinned.reference
    spec = spec_for(config, reference, gpu=gpu, source=pinned.requested if pinned else None)
    spec = replace(spec, env=user_env)
    return ComposeResult(render(document(spec)), spec, pinned)


def spec_for(
    config: ProjectConfig, image: str, *, gpu: bool, source: str | None = None
) -> ComposeSpec:
    return ComposeSpec(
        image=image,
        gpu=gpu,
        seed=config.seed,
        determinism=config.determinism,
        command=config.command,
        project=config.name,
        source=source,
    )
