"""``reprobuild k8s``: the multi-node torchrun job of ``compose --nodes``, for Kubernetes.

Standard objects only, rendered as data (``yaml.safe_dump``), two documents:

- a headless ``Service`` (``clusterIP: None``) named like the job, selecting its pods, with
  ``publishNotReadyAddresses`` so each pod's DNS name exists before any readiness: the
  rendezvous needs it at start;
- an ``Indexed`` ``Job`` with ``completions = parallelism = N``: pod *i* is named
  ``<job>-<i>``, reachable as ``<job>-<i>.<job>`` through the Service (``subdomain``); every pod
  runs the image pinned by repository digest under ``torchrun``, node 0's pod hosting the c10d
  rendezvous, ``--local-addr`` its own DNS name (``$(NODE_INDEX)`` from the completion index,
  expanded by the kubelet), ``backoffLimit: 0`` and ``--max-restarts 0``: a lost pod fails
  the job instead of restarting ranks with replayed seeds.

GPU images get ``nvidia.com/gpu: M`` per pod (one per process) and the NCCL backend.
``/dev/shm`` is a memory ``emptyDir`` sized 1 GiB per process (Kubernetes gives 64 MiB by
default, too little for DataLoader workers). Run records and outputs go to ``emptyDir``
volumes: replace them with a PersistentVolumeClaim to keep them past the pod.

A Kubernetes node pulls by registry reference: an image known only by its local ID (built,
never pushed) cannot be named, and is refused.

Every ``$`` in a value is doubled: the kubelet expands ``$(VAR)`` in ``args`` and ``env``
values and ``$$`` is its escape, so program words and ``--env`` values stay data. The user's
``--env`` variables follow reprobuild's own in the container's ``env`` (a manifest has no
shell to pass ``REPRO_THREADS`` or ``REPRO_DIST_TIMEOUT_S`` through: ``--env`` sets them).
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

from reprobuild import __version__
from reprobuild.bases.refs import parse_ref
from reprobuild.cluster.compose import escape
from reprobuild.cluster.job import MOUNTS, PER_NODE, NodesJob, project_job
from reprobuild.cluster.nodes import JobShape
from reprobuild.cluster.pinning import ImageLookup
from reprobuild.cluster.userenv import INDEX_VAR, UserEnv, check_env, merged
from reprobuild.errors import ImageRefError, ReprobuildError
from reprobuild_entrypoint.contract import DATA_DIR, OUT_DIR, RECORD_DIR

KUBERNETES_VERSION = "1.34"
"""The Kubernetes release whose schemas the rendering is tested against (kubernetes-validate)."""
INDEX_ANNOTATION = "batch.kubernetes.io/job-completion-index"
NAME_MAX = 50
"""A job name leaves room in the 63-character pod hostname for ``-<index>``."""
_NAME_RE = re.compile(r"[a-z]([-a-z0-9]*[a-z0-9])?")


@dataclass(frozen=True)
class KubeSpec:
    name: str
    image: str
    shape: JobShape
    command: tuple[str, ...]
    seed: int
    determinism: str
    project: str
    env: UserEnv = ()
    """The user's own variables (``--env``), after reprobuild's in every pod."""
    arch: str = ""
    """The image's architecture (``amd64``, ``arm64``): a single-platform image is scheduled
    on nodes of it alone (``nodeSelector: kubernetes.io/arch``); "" unknown, no selector."""

    def __post_init__(self) -> None:
        check_name(self.name)
        check_env(self.env)
        if self.image.startswith("sha256:") or parse_ref(self.image).digest is None:
            raise ImageRefError(
                f"image {self.image!r} is not pinned by a registry digest: a Kubernetes node "
                "pulls NAME@sha256:<digest>",
                hint="push the image to a registry, then pass --image NAME@sha256:<digest> "
                "or the pushed tag",
            )


def check_name(name: str) -> str:
    if len(name) > NAME_MAX or not _NAME_RE.fullmatch(name):
        raise ReprobuildError(
            f"job name {name!r} is not allowed: use 1 to {NAME_MAX} lowercase letters, digits "
            "and '-', starting with a letter and ending with a letter or digit (a DNS label)"
        )
    return name


def default_name(project: str) -> str:
    """The last part of the project name as a DNS label (``team/ddp_train`` -> ``ddp-train``)."""
    name = re.sub(r"[^a-z0-9-]+", "-", project.rsplit("/", 1)[-1].lower()).strip("-")
    name = name[:NAME_MAX].rstrip("-")
    if not name or not name[0].isalpha():
        name = f"job-{name}".rstrip("-")[:NAME_MAX]
    return name


def _labels(spec: KubeSpec) -> dict[str, str]:
    return {
        "app.kubernetes.io/name": spec.name,
        "app.kubernetes.io/managed-by": "reprobuild",
    }


def service(spec: KubeSpec) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "Service",
        "metadata": {"name": spec.name, "labels": _labels(spec)},
        "spec": {
            "clusterIP": "None",
            "publishNotReadyAddresses": True,
            "selector": {"job-name": spec.name},
            "ports": [{"name": "rendezvous", "port": spec.shape.port, "protocol": "TCP"}],
        },
    }


def nodes_job(spec: KubeSpec) -> NodesJob:
    """The job a spec describes (:mod:`reprobuild.cluster.job`)."""
    return NodesJob(
        image=spec.image,
        shape=spec.shape,
        command=spec.command,
        seed=spec.seed,
        determinism=spec.determinism,
        env=spec.env,
        project=spec.project,
    )


def job(spec: KubeSpec) -> dict[str, Any]:
    shape = spec.shape
    nodes_spec = nodes_job(spec)
    args = nodes_spec.torchrun(
        node=f"{spec.name}-$({INDEX_VAR}).{spec.name}",
        endpoint=f"{spec.name}-0.{spec.name}",
        job_id=spec.name,
        escape=escape,
    )
    pods = [f"{spec.name}-{i}.{spec.name}" for i in range(shape.nodes)]
    # A manifest has no shell: a variable the shell would override is written as its value,
    # and left out when empty (--env sets REPRO_THREADS and the like).
    own = tuple((v.name, v.value) for v in nodes_spec.variables(pods) if v.value or not v.shell)
    user = tuple((name, escape(value)) for name, value in spec.env)
    env: list[dict[str, Any]] = [
        {
            "name": INDEX_VAR,
            "valueFrom": {"fieldRef": {"fieldPath": f"metadata.annotations['{INDEX_ANNOTATION}']"}},
        },
        *({"name": name, "value": value} for name, value in merged(own, user)),
    ]
    container: dict[str, Any] = {
        "name": "node",
        "image": spec.image,
        "args": list(args),  # the image's ENTRYPOINT (the reprobuild runtime) stays
        "env": env,
        "ports": [{"name": "rendezvous", "containerPort": shape.port, "protocol": "TCP"}],
        "volumeMounts": [
            {"name": "shm", "mountPath": "/dev/shm"},
            *({"name": m.kind, "mountPath": m.target} for m in MOUNTS if m.kind in PER_NODE),
        ],
    }
    if shape.gpu:
        gpus = {"nvidia.com/gpu": shape.nproc_per_node}
        container["resources"] = {"limits": dict(gpus), "requests": dict(gpus)}
    shm = f"{nodes_spec.shm_gb()}Gi"
    return {
        "apiVersion": "batch/v1",
        "kind": "Job",
        "metadata": {"name": spec.name, "labels": _labels(spec)},
        "spec": {
            "completionMode": "Indexed",
            "completions": shape.nodes,
            "parallelism": shape.nodes,
            "backoffLimit": 0,
            "template": {
                "metadata": {"labels": _labels(spec)},
                "spec": {
                    **({"nodeSelector": {"kubernetes.io/arch": spec.arch}} if spec.arch else {}),
                    "subdomain": spec.name,
                    "restartPolicy": "Never",
                    "enableServiceLinks": False,
                    "containers": [container],
                    "volumes": [
                        {"name": "shm", "emptyDir": {"medium": "Memory", "sizeLimit": shm}},
                        *({"name": kind, "emptyDir": {}} for kind in PER_NODE),
                    ],
                },
            },
        },
    }


def documents(spec: KubeSpec) -> list[dict[str, Any]]:
    return [service(spec), job(spec)]


def render(spec: KubeSpec) -> str:
    shape = spec.shape
    header = (
        f"Generated by reprobuild {__version__}: `reprobuild k8s --nodes {shape.nodes} "
        f"--nproc-per-node {shape.nproc_per_node}{' --gpu' if shape.gpu else ''}` for "
        f"{spec.project}.",
        f"A torchrun job of {shape.nodes} pod(s) x {shape.nproc_per_node} process(es) (world "
        f"size {shape.world_size}, backend {shape.backend}): an Indexed Job and its headless "
        "Service;",
        f"pod {spec.name}-0 hosts the c10d rendezvous on port {shape.port}. Standard objects "
        f"only, checked against Kubernetes {KUBERNETES_VERSION}'s schemas.",
        f"  kubectl apply -f FILE && kubectl wait --for=condition=complete job/{spec.name}",
        "Run records and outputs are emptyDir volumes: mount a PersistentVolumeClaim at "
        f"{RECORD_DIR} and {OUT_DIR} to keep them;",
        f"data goes at {DATA_DIR} the same way.",
        *(
            (f"Set by --env in every pod: {', '.join(name for name, _ in spec.env)}.",)
            if spec.env
            else ()
        ),
    )
    text = "".join(f"# {line}\n" for line in header)
    body = yaml.safe_dump_all(
        documents(spec), sort_keys=False, default_flow_style=False, width=1000
    )
    return text + "---\n" + body


def k8s_project(
    directory: Path,
    *,
    nodes: int,
    nproc_per_node: int | None = None,
    gpu: bool = False,
    image: str | None = None,
    variant: str | None = None,
    name: str | None = None,
    engine: ImageLookup | None = None,
    env: Sequence[str] = (),
) -> str:
    """The manifests for the project in ``directory``: its image, pinned by repository digest.
    ``env``: ``NAME=VALUE`` options (``--env``), checked before anything else."""
    if name is not None:
        check_name(name)  # before the engine is asked anything
    made = project_job(
        directory,
        nodes=nodes,
        nproc_per_node=nproc_per_node,
        gpu=gpu,
        image=image,
        variant=variant,
        engine=engine,
        env=env,
        what="Kubernetes job",
    )
    job_name = check_name(name) if name is not None else default_name(made.config.name)
    nodes_spec = made.job
    spec = KubeSpec(
        name=job_name,
        image=nodes_spec.image,
        shape=nodes_spec.shape,
        command=nodes_spec.command,
        seed=made.config.seed,
        determinism=made.config.determinism,
        project=made.config.name,
        env=nodes_spec.env,
        arch=made.pinned.architecture,
    )
    return render(spec)
