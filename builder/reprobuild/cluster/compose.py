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

import hashlib
import os
import re
import stat
import sys
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any, Protocol

import yaml

from reprobuild import __version__
from reprobuild._util.fsutil import write_atomic
from reprobuild.bases.refs import parse_ref
from reprobuild.cluster.nodes import (
    BACKEND_VAR,
    DEFAULT_JOB_ID,
    JOB_ID_VAR,
    NODES_VAR,
    JobShape,
    JobShapeError,
    program_args,
    require_torch,
    torchrun_command,
)
from reprobuild.cluster.userenv import UserEnv, check_env, merged, parse_env, shell_names
from reprobuild.errors import ImageNotBuiltError, ImageRefError, OutputError, ReprobuildError
from reprobuild.imaging.plan import project_tag, variant_of
from reprobuild.project.config import ProjectConfig, load_config
from reprobuild_entrypoint.contract import (
    DATA_DIR,
    IMAGE_VAR,
    LABEL_PREFIX,
    MODE_VAR,
    OUT_DIR,
    OUTPUT_DIR_VAR,
    RECORD_DIR,
    RUN_DIR_VAR,
    SEED_VAR,
    TRIAL_VAR,
)
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

_IMAGE_ID_RE = re.compile(r"^(?:sha256:)?([0-9a-f]{12,64})$")
_FULL_ID_RE = re.compile(r"^sha256:[0-9a-f]{64}$")


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


def check_pinned(image: str) -> None:
    """An image for a compose file must name one image for good: ``NAME@sha256:<digest>`` or
    a full image ID ``sha256:<64 hex>``."""
    if _FULL_ID_RE.fullmatch(image):
        return
    if parse_ref(image).digest is None:
        raise ImageRefError(
            f"image {image!r} is not pinned: use NAME@sha256:<digest> or an image ID "
            "sha256:<64 hex>"
        )


def escape(value: str) -> str:
    """A literal value for compose, which interpolates ``$VAR`` in every string: ``$$``."""
    return value.replace("$", "$$")


def _env(spec: ComposeSpec) -> tuple[tuple[str, str], ...]:
    seed = "" if spec.seed is None else str(spec.seed)
    mode = spec.determinism or ""
    return (
        (SEED_VAR, f"${{{SEED_VAR}:-{seed}}}"),
        (MODE_VAR, f"${{{MODE_VAR}:-{mode}}}"),
        (TRIAL_VAR, f"${{{TRIAL_VAR}:-}}"),  # trial k of the seed; empty: no trial
        (RUN_DIR_VAR, RECORD_DIR),
        (OUTPUT_DIR_VAR, OUT_DIR),
        (IMAGE_VAR, spec.image),  # the run's MLflow tags name it (a container cannot see it)
    )


def _with_user_env(
    spec: ComposeSpec, own: tuple[tuple[str, str], ...]
) -> tuple[tuple[str, str], ...]:
    """``own``, then the user's ``--env`` variables, their values literal (``$$``)."""
    return merged(own, tuple((name, escape(value)) for name, value in spec.env))


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
        environment=_with_user_env(spec, _env(spec)),
        volumes=(
            f"{HOST_DATA}:{DATA_DIR}:ro",
            f"{HOST_RUNS}/{name}:{RECORD_DIR}",
            f"{HOST_OUT}/{name}:{OUT_DIR}",
        ),
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
SHM_PER_PROCESS_GB = 1
"""/dev/shm per training process: DataLoader workers pass batches through shared memory, and
Docker's default of 64 MB is too little for one worker."""


def nodes_document(spec: ComposeSpec, shape: JobShape) -> ComposeFile:
    """One service per node on the private network ``job``; every node runs torchrun with
    the c10d rendezvous on the first node (:mod:`reprobuild.cluster.nodes`)."""
    names = shape.node_names()
    program = tuple(escape(w) for w in spec.command)
    program_args(spec.command)  # refuses a command torchrun cannot run, before anything else
    job_id = f"${{{JOB_ID_VAR}:-{DEFAULT_JOB_ID}}}"
    prepare = _prepare(spec, names)
    env = _with_user_env(
        spec,
        (
            *_env(spec),
            ("REPRO_THREADS", "${REPRO_THREADS:-}"),
            # the collective timeout when the program gives none (empty: torch's default)
            ("REPRO_DIST_TIMEOUT_S", "${REPRO_DIST_TIMEOUT_S:-}"),
            (BACKEND_VAR, shape.backend),
            (NODES_VAR, ",".join(names)),
        ),
    )
    services: list[tuple[str, Service]] = [("prepare", prepare)]
    for name in names:
        services.append(
            (
                name,
                Service(
                    image=spec.image,
                    hostname=name,
                    depends_on=(DependsOn("prepare"),),
                    command=torchrun_command(
                        shape, program, node=name, endpoint=names[0], job_id=job_id
                    ),
                    environment=env,
                    volumes=(
                        f"{HOST_DATA}:{DATA_DIR}:ro",
                        f"{HOST_RUNS}/{name}:{RECORD_DIR}",
                        f"{HOST_OUT}/{name}:{OUT_DIR}",
                    ),
                    network_mode=None,
                    networks=(JOB_NETWORK,),
                    shm_size=f"{SHM_PER_PROCESS_GB * shape.nproc_per_node}gb",
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


# ---- pinning the project's image ----------------------------------------------------------


class ImageLookup(Protocol):
    """What pinning needs from the engine (``reprobuild.backends.engine.Engine`` has it)."""

    def image_id(self, ref: str) -> str | None: ...

    def inspect(self, ref: str) -> dict[str, Any]: ...


class ImageReader(ImageLookup, Protocol):
    """What a multi-node job needs too: the image's manifest, to see that it has torch."""

    def read_file(self, image: str, path: str, *, max_bytes: int = ...) -> bytes: ...


@dataclass(frozen=True)
class PinnedImage:
    requested: str
    reference: str
    id: str
    labels: Mapping[str, str] = field(default_factory=dict)
    cmd: tuple[str, ...] = ()
    """The image's CMD (what a job runs when the project names no command)."""


def pinned_reference(name: str | None, image_id: str, repo_digests: list[str]) -> str:
    """The most immutable name of an image: ``NAME@sha256:<repo digest>`` (the one for
    ``name`` when there is one, else the first in sorted order), else its image ID."""
    wanted = _repository(name) if name is not None else None
    digests: list[tuple[str, str]] = []
    for entry in sorted(repo_digests):
        try:
            ref = parse_ref(entry)
        except ImageRefError:
            continue
        if ref.digest:
            digests.append((ref.name, ref.digest))
    for ref_name, digest in digests:
        if wanted is not None and _repository(ref_name) == wanted:
            return f"{ref_name}@{digest}"
    if digests:
        ref_name, digest = digests[0]
        return f"{ref_name}@{digest}"
    if not _FULL_ID_RE.fullmatch(image_id):
        raise ReprobuildError(f"the engine gave image ID {image_id!r}, not sha256:<64 hex>")
    return image_id


def _repository(name: str) -> tuple[str, str]:
    """``python``, ``docker.io/library/python``: one repository, written two ways."""
    ref = parse_ref(name)
    return ref.registry, ref.repository


def pin_image(engine: ImageLookup, ref: str, *, build_command: str | None = None) -> PinnedImage:
    """Look ``ref`` (a tag or an image ID) up on the engine and pin it."""
    # an image ID (full or short, as docker accepts it) names no repository
    name = None if _IMAGE_ID_RE.fullmatch(ref) else parse_ref(ref).name
    if engine.image_id(ref) is None:
        raise ImageNotBuiltError(ref, build_command)
    attrs = engine.inspect(ref)
    image_id = str(attrs.get("Id", ""))
    labels = dict((attrs.get("Config") or {}).get("Labels") or {})
    reference = pinned_reference(name, image_id, list(attrs.get("RepoDigests") or []))
    cmd = tuple(str(w) for w in (attrs.get("Config") or {}).get("Cmd") or ())
    return PinnedImage(ref, reference, image_id, labels, cmd)


# ---- the whole command --------------------------------------------------------------------


@dataclass(frozen=True)
class ComposeResult:
    text: str
    spec: ComposeSpec
    image: PinnedImage | None
    """None when ``--image`` was already pinned by digest (used as written, not looked up)."""


def build_command(directory: Path, *, gpu: bool, variant: str | None = None) -> str:
    if variant is not None:
        return f"reprobuild image {directory} --variant {variant}"
    return f"reprobuild image {directory}{' --gpu' if gpu else ''}"


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
    user_env = parse_env(env)
    config = load_config(directory)
    if variant is not None:
        gpu = config.variant(variant).gpu or gpu
    shape = job_shape(config, nodes, nproc_per_node, gpu=gpu)
    pinned: PinnedImage | None = None
    command = config.command
    digest_given = (
        image is not None and not _IMAGE_ID_RE.fullmatch(image) and parse_ref(image).digest
    )
    if digest_given and shape is None:
        reference = str(image)
    else:
        pinned, engine = _pin(directory, config, image, engine, gpu=gpu, variant=variant)
        reference = str(image) if digest_given else pinned.reference
        if shape is not None:
            require_torch(pinned.requested, image_distributions(engine, pinned))
            command = command or pinned.cmd
    spec = spec_for(config, reference, gpu=gpu, source=pinned.requested if pinned else None)
    spec = replace(spec, command=command, shape=shape, env=user_env)
    return ComposeResult(render(document(spec)), spec, pinned)


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


def _pin(
    directory: Path,
    config: ProjectConfig,
    image: str | None,
    engine: ImageLookup | None,
    *,
    gpu: bool,
    variant: str | None,
    what: str = "compose file",
) -> tuple[PinnedImage, ImageLookup]:
    if engine is None:
        from reprobuild.backends.engine import Engine

        engine = Engine()
    if image is None:
        tag = project_tag(config, gpu=gpu, variant_name=variant)
        pinned = pin_image(
            engine, tag, build_command=build_command(directory, gpu=gpu, variant=variant)
        )
    else:
        pinned = pin_image(engine, image)
    _check_variant(pinned, gpu=gpu, what=what)
    return pinned, engine


def image_distributions(engine: ImageLookup, image: PinnedImage) -> tuple[str, ...]:
    """The distribution names in the image's manifest (checked against its label)."""
    from reprobuild.imaging.manifest import MANIFEST_LABEL, MAX_MANIFEST_BYTES, Manifest
    from reprobuild_entrypoint import MANIFEST_PATH

    if not hasattr(engine, "read_file"):
        raise TypeError("a multi-node job needs an engine that can read the image's manifest")
    reader: ImageReader = engine  # type: ignore[assignment]
    raw = reader.read_file(image.id, MANIFEST_PATH, max_bytes=MAX_MANIFEST_BYTES)
    want = image.labels.get(MANIFEST_LABEL)
    got = hashlib.sha256(raw).hexdigest()
    if want != got:
        raise ReprobuildError(
            f"{image.requested}: {MANIFEST_PATH} has sha256 {got[:12]}... but the label says "
            f"{(want or 'nothing')[:12]}...; the image was altered after it was built"
        )
    return tuple(d.name for d in Manifest.from_json(raw).distributions)


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


def _check_variant(image: PinnedImage, *, gpu: bool, what: str = "compose file") -> None:
    variant = image.labels.get(f"{LABEL_PREFIX}variant")
    if variant is None:
        raise ReprobuildError(
            f"{image.requested} was not built by reprobuild (no io.reprobuild.variant label): "
            "it has no reprobuild runtime to write run records"
        )
    want = variant_of(gpu)
    if variant != want:
        flag = "add --gpu" if variant == "gpu" else "drop --gpu"
        raise ReprobuildError(
            f"{image.requested} is a {variant.upper()} image but a {want.upper()} {what} "
            f"was asked for: {flag}"
        )


GENERATED_MARK = b"# Generated by reprobuild "
"""How every file that ``-o`` writes begins: the one kind of file ``-o`` may replace."""


def _refuse_foreign(output: Path, mode: int) -> None:
    """An existing ``output`` is replaced only when reprobuild wrote it (or it is empty): a
    hand-written compose file, or /etc/passwd as root, is not lost to a mistyped ``-o``."""
    hint = "give another file name, or remove it first; - writes to stdout"
    if stat.S_ISLNK(mode):  # the rename would replace the link, never what it points to
        raise OutputError(f"{output} is a symlink; -o replaces only a file it wrote", hint=hint)
    try:
        fd = os.open(output, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK)
        try:
            head = os.read(fd, len(GENERATED_MARK))
        finally:
            os.close(fd)
    except OSError as exc:
        raise OutputError(f"cannot read {output}: {exc.strerror or exc}", hint=hint) from None
    if head and head != GENERATED_MARK:
        raise OutputError(
            f"{output} exists and reprobuild did not write it (it does not begin with "
            f"{GENERATED_MARK.decode().strip()!r}); -o replaces only a file it wrote",
            hint=hint,
        )


def check_output(output: Path | None) -> None:
    """Refuse an ``-o`` that ``write_output`` would refuse, before any work (the engine asked,
    a job rendered): a directory, a FIFO or device, a symlink, a file reprobuild did not write.
    """
    if output is None or str(output) == "-":
        return
    if output.is_dir():
        raise OutputError(f"{output} is a directory; give a file name (e.g. {output}/compose.yml)")
    try:
        mode = output.lstat().st_mode
    except OSError:
        return  # nothing there yet (or unreadable: the write says why)
    if not (stat.S_ISREG(mode) or stat.S_ISLNK(mode)):
        # the atomic rename would replace the FIFO or device itself (/dev/null as root)
        raise OutputError(
            f"{output} is not a regular file; give a file name, or - for stdout",
            hint="to discard the output, leave -o out and redirect stdout",
        )
    _refuse_foreign(output, mode)


def write_output(text: str, output: Path | None) -> None:
    """``output`` None or ``-``: stdout. Else written atomically (a temp file, then rename):
    a failure leaves the old file or none, never half of one. An existing file is replaced
    only when reprobuild wrote it (``check_output``, again at the write)."""
    if output is None or str(output) == "-":
        sys.stdout.write(text)
        return
    check_output(output)
    try:
        write_atomic(output, text)
    except OSError as exc:
        raise OutputError(f"cannot write {output}: {exc.strerror or exc}") from None
