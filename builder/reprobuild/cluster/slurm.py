"""``reprobuild slurm``: the multi-node torchrun job of ``compose --nodes``, as an sbatch script.

One job: write the job (:class:`reprobuild.cluster.job.NodesJob`) as a bash script for
``sbatch``. The script:

- asks for ``--nodes=N`` with one task per node (``--ntasks-per-node=1``) and, with ``--gpu``,
  ``--gpus-per-node=M``; one ``srun`` step starts one task on every node, with
  ``--kill-on-bad-exit=1`` (a node that fails ends the step on every node);
- lists the job's nodes with ``scontrol show hostnames``, sorted by name (``LC_ALL=C``): the
  c10d rendezvous orders the nodes by their ``--local-addr``, so the *i*-th name in that order
  is node *i*, holding ranks ``i*M .. i*M+M-1`` run after run; the first hosts the rendezvous;
- keeps run records and outputs per node under one directory every node sees (by default
  ``reprobuild-<job id>`` in the directory ``sbatch`` was run from):
  ``runs/node-<i>/``, ``out/node-<i>/``, as on compose; data read-only at ``/data``;
- runs the image by digest through one runtime (``--runtime``): ``podman`` (``podman run``,
  host network), ``apptainer`` (``apptainer exec docker://...``, a clean environment) or
  ``pyxis`` (``srun --container-image``, enroot's ``REGISTRY#IMAGE`` form). Apptainer and pyxis
  do not run the image's ENTRYPOINT, so the script names it (reprobuild's runtime).

Every value that reaches the script is data: a word is ``shlex.quote``-d, or validated (the
node count, the port), and the program's words are passed as arguments, never as code. The
variables the shell overrides (``REPRO_SEED``, ``REPRO_DETERMINISM``, ``REPRO_TRIAL``,
``REPRO_THREADS``, ``REPRO_DIST_TIMEOUT_S``, ``REPRO_JOB_ID``) are read from the environment
``sbatch`` passes, with the project's values as defaults.
"""

from __future__ import annotations

import json
import re
import shlex
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

from reprobuild import __version__
from reprobuild.bases.refs import parse_ref
from reprobuild.cluster import bundle as oci_bundle
from reprobuild.cluster.job import MOUNTS, NodesJob, project_job
from reprobuild.cluster.nodes import DEFAULT_JOB_ID, JOB_ID_VAR, program_args
from reprobuild.cluster.pinning import ImageLookup
from reprobuild.cluster.userenv import UserEnv, merged, parse_env
from reprobuild.errors import ImageRefError, ReprobuildError, UsageError
from reprobuild.imaging.platforms import MACHINES
from reprobuild.imaging.render import ENTRYPOINT
from reprobuild_entrypoint.contract import OUT_DIR, OUTPUT_DIR_VAR, RECORD_DIR, RUN_DIR_VAR
from reprobuild_entrypoint.settings import RANK_SEED_SCHEME

RUNTIMES = ("podman", "apptainer", "pyxis", "oci")
DEFAULT_RUNTIME = "podman"
JOB_DIR_VAR = "REPRO_JOB_DIR"
DATA_VAR = "REPRO_DATA"
JOB_MOUNT = oci_bundle.JOB_MOUNT
"""Where pyxis and oci mount the job's directory (one mount list for every node of the
step)."""
OCI_RUNC_ROOT = "/run/reprobuild-runc"
OCI_CONF_NOTE = (
    "oci.conf: Slurm's --container needs an oci.conf beside slurm.conf on every node, naming",
    "the OCI runtime (Slurm 22.05 and later; RunTimeRun, or RunTimeCreate and RunTimeStart,",
    "with RunTimeQuery, RunTimeKill and RunTimeDelete). As the engine tests run this script,",
    "with Debian's Slurm 22.05 and runc, the job submitted as root:",
    f'  RunTimeQuery="runc --root={OCI_RUNC_ROOT} state %n.%u.%j.%s.%t"',
    f'  RunTimeKill="runc --root={OCI_RUNC_ROOT} kill -a %n.%u.%j.%s.%t"',
    f'  RunTimeDelete="runc --root={OCI_RUNC_ROOT} delete --force %n.%u.%j.%s.%t"',
    f'  RunTimeRun="runc --root={OCI_RUNC_ROOT} run %n.%u.%j.%s.%t -b %b"',
    "Slurm reads the bundle's config.json, sets its process args to the task's command, its",
    "environment to the task's, adds its spool directory, and gives the runtime the result.",
    "Jobs of other users run rootless runc (--rootless=true --root=/run/user/%U/), which also",
    "needs a user namespace in the bundle's config: not written here.",
)
NAME_MAX = 64
_NAME_RE = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]*")
# Names whose value would change the submitting shell's own tools (PATH finds srun and podman)
# or Slurm's and the runtimes' behaviour, where the job's variables are the task's (pyxis).
_HOST_NAMES = frozenset({"PATH", "HOME", "USER", "SHELL", "IFS", "TMPDIR", "LANG", "LC_ALL"})
_HOST_PREFIXES = (
    "LD_",
    "SLURM",
    "SBATCH_",
    "SRUN_",
    "PYXIS_",
    "ENROOT_",
    "APPTAINER",
    "SINGULARITY",
    "BASH",
    "REPROBUILD_",
)


class SlurmOptionError(UsageError):
    """A runtime, job name or ``--env`` name the script cannot have."""


@dataclass(frozen=True)
class SlurmSpec:
    job: NodesJob
    name: str
    runtime: str = DEFAULT_RUNTIME
    bundle: str | None = None
    """``oci``: the bundle's absolute path (``reprobuild slurm --bundle``)."""
    path: str = ""
    """``oci``: the image's PATH (Slurm gives the container the task's environment)."""
    arch: str = ""
    """The image's architecture as its config says it (``amd64``, ``arm64``; "" unknown):
    the script says it and stops on a node of another machine (``uname -m``)."""
    platforms: tuple[str, ...] = ()
    """An image index's platforms: the script says them; each node pulls its own."""

    def __post_init__(self) -> None:
        if self.runtime not in RUNTIMES:
            raise SlurmOptionError(
                f"--runtime {self.runtime!r} is not allowed: use one of {', '.join(RUNTIMES)}"
            )
        if (self.runtime == "oci") != (self.bundle is not None):
            raise SlurmOptionError("--bundle DIR goes with --runtime oci, and only with it")
        if self.bundle is not None and not self.bundle.startswith("/"):
            raise SlurmOptionError(f"bundle {self.bundle!r} is not an absolute path")
        check_name(self.name)
        image = self.job.image
        if image.startswith("sha256:") or parse_ref(image).digest is None:
            raise ImageRefError(
                f"image {image!r} is not pinned by a registry digest: every node of a Slurm "
                "job pulls NAME@sha256:<digest>",
                hint="push the image to a registry, then pass --image NAME@sha256:<digest> "
                "or the pushed tag",
            )
        check_env_names(self.job.env)


def check_env_names(env: UserEnv) -> None:
    """``--env`` names a Slurm job cannot set: the script's variables reach the shell, srun
    and the runtime that start the container, not only the program."""
    for name, _ in env:
        if name in _HOST_NAMES or name.startswith(_HOST_PREFIXES):
            raise SlurmOptionError(
                f"--env {name} is not allowed in a Slurm job: it would change the shell, "
                "Slurm or the container runtime that start the job, not only the program",
                hint="give the program another name for it",
            )


def check_name(name: str) -> str:
    if len(name) > NAME_MAX or not _NAME_RE.fullmatch(name):
        raise SlurmOptionError(
            f"job name {name!r} is not allowed: use 1 to {NAME_MAX} letters, digits, '.', '_' "
            "and '-', starting with a letter or digit"
        )
    return name


def default_name(project: str) -> str:
    """The last part of the project name (``team/ddp train`` -> ``ddp-train``)."""
    name = re.sub(r"[^A-Za-z0-9._-]+", "-", project.rsplit("/", 1)[-1]).strip("-._")
    return name[:NAME_MAX] or "reprobuild"


def enroot_image(image: str) -> str:
    """pyxis names an image as enroot does, ``[REGISTRY#]IMAGE[@DIGEST]``: the registry is
    set off by ``#``, not ``/`` (Docker Hub is enroot's default and is left out)."""
    ref = parse_ref(image)
    path = f"{ref.repository}@{ref.digest}"
    if ref.registry in ("docker.io", "registry-1.docker.io", "index.docker.io"):
        return path
    return f"{ref.registry}#{path}"


def q(word: str) -> str:
    return shlex.quote(word)


def _words(words: Sequence[str], indent: str = "  ") -> str:
    """Shell words, one per line, each quoted, joined with line continuations."""
    return f" \\\n{indent}".join(words)


def _variables(spec: SlurmSpec) -> list[str]:
    """``NAME=VALUE`` words (bash: an array's items): reprobuild's variables, those the shell
    may override as ``"${NAME:-default}"``, then the user's ``--env`` values, quoted."""
    job = spec.job
    own: list[tuple[str, str]] = []
    for var in job.variables(("__NODES__",)):
        if var.name in (RUN_DIR_VAR, OUTPUT_DIR_VAR) and spec.runtime in ("pyxis", "oci"):
            continue  # set per node, inside the container (one mount for the whole job)
        if var.shell:
            value = f'"${{{var.name}:-{_dq(var.value)}}}"'
        elif var.value == "__NODES__":
            value = '"$nodes"'
        else:
            value = q(var.value)
        own.append((var.name, value))
    user = tuple((name, q(value)) for name, value in job.env)
    return [f"{name}={value}" for name, value in merged(own, user)]


def _dq(value: str) -> str:
    """A default inside ``"${NAME:-...}"``: only seeds and mode names reach it; refuse others."""
    if not re.fullmatch(r"[A-Za-z0-9._-]*", value):
        raise ReprobuildError(f"default {value!r} cannot be written into the script")
    return value


def _header(spec: SlurmSpec) -> list[str]:
    job = spec.job
    shape = job.shape
    m = shape.nproc_per_node
    gpu = " --gpu" if shape.gpu else ""
    made = f" for {job.project}" if job.project else ""
    named = f" ({job.source})" if job.source and job.source != job.image else ""
    seeds = (
        f"REPRO_SEED (default {job.seed}): rank r seeds its RNGs with {RANK_SEED_SCHEME}, so "
        f"node-0's ranks use {', '.join(map(str, job.rank_seeds(0)))}"
        if job.seed is not None
        else f"REPRO_SEED (default: the image's): rank r seeds its RNGs with {RANK_SEED_SCHEME}"
    )
    runtime = {
        "podman": "podman run --network=host --uts=host: each node's container has the node's "
        "name and addresses, so the nodes reach each other and node-0's rendezvous by name",
        "apptainer": "apptainer exec --cleanenv docker://IMAGE: the job's variables enter as "
        "APPTAINERENV_*, nothing else of the host's environment; the host network",
        "pyxis": "srun --container-image (enroot's REGISTRY#IMAGE@DIGEST form): the task's "
        "environment is the container's; the job directory is mounted whole and each node "
        "writes its own runs/ and out/ in it",
        "oci": "srun --container: Slurm's own OCI support runs the bundle that `reprobuild "
        "slurm --bundle` unpacked from the image (each layer checked against the image's "
        "digests and diff_ids) with the runtime oci.conf names; the task's environment is "
        "the container's; the node's network and host name; the job directory is mounted "
        "whole (a config.json per job, from the bundle's config.json.in)",
    }[spec.runtime]
    lines = [
        f"Generated by reprobuild {__version__}: `reprobuild slurm --nodes {shape.nodes} "
        f"--nproc-per-node {m}{gpu} --runtime {spec.runtime}`{made}.",
        f"Image: {job.image}{named}",
        "",
        f"A torchrun job of {shape.nodes} node(s) x {m} process(es) (world size "
        f"{shape.world_size}, backend {shape.backend}): one Slurm task per node, started by "
        "one srun step.",
        "  sbatch FILE            (from a directory every node sees: the job writes there)",
        "  sacct -j JOBID         (the job's and each step's state and exit code)",
        "",
        "Choices:",
        "- Node order: the job's nodes (scontrol show hostnames) sorted by name (LC_ALL=C), "
        "as torchrun's c10d",
        "  rendezvous orders them by --local-addr: the i-th is node-<i> and holds global ranks "
        f"i*{m} .. i*{m}+{m - 1},",
        f"  run after run. node-0 hosts the rendezvous store on port {shape.port}.",
        f"- Seeds: {seeds}.",
        "- Failure: torchrun --max-restarts=0 and srun --kill-on-bad-exit=1: a rank or node "
        "that fails ends the",
        "  job (Slurm's state FAILED, NODE_FAIL for a lost node) instead of restarting ranks "
        "with replayed seeds;",
        "  --no-requeue: nor does Slurm start the job again on its own after a node failure.",
        f"- Files: ${JOB_DIR_VAR} (default: reprobuild-<job id> in the submit directory) holds "
        f"runs/node-<i>/ ({RECORD_DIR})",
        f"  and out/node-<i>/ ({OUT_DIR}) of every node; ${DATA_VAR} (default: data/ in the "
        "submit directory) is /data, read-only.",
        f"- Runtime: {runtime}.",
        "- REPRO_SEED, REPRO_DETERMINISM, REPRO_TRIAL, REPRO_THREADS, REPRO_DIST_TIMEOUT_S and "
        f"{JOB_ID_VAR} (the rendezvous id)",
        "  from the environment sbatch passes override the defaults.",
    ]
    if job.env:
        lines.append(f"- Set by --env on every node: {', '.join(name for name, _ in job.env)}.")
    machine = MACHINES.get(spec.arch)
    if spec.platforms:
        lines.append(
            f"- Architecture: the image is an index of {' and '.join(spec.platforms)}: each "
            "node runs the image of its own machine."
        )
    elif machine:
        lines.append(
            f"- Architecture: the image is linux/{spec.arch}: the job's nodes must be "
            f"{machine} (uname -m); the script stops on one that is not."
        )
    if spec.runtime == "oci":
        lines += ["", *OCI_CONF_NOTE]
    return lines


_OCI_PATHS = [
    "# oci: the two paths go into the job's config.json (JSON text) and must be absolute",
    'case "$job_dir$data_dir" in',
    '  *[\\"\\\\\\&]*)',
    '    echo "reprobuild: error: $job_dir or $data_dir has a double quote, backslash or '
    "& (the job's config.json holds them): set REPRO_JOB_DIR and REPRO_DATA to other paths\" >&2",
    "    exit 2",
    "    ;;",
    "esac",
    'case "$job_dir" in /*) ;; *) job_dir="$PWD/$job_dir" ;; esac',
    'case "$data_dir" in /*) ;; *) data_dir="$PWD/$data_dir" ;; esac',
]

_SHELL_WORDS = {
    "@NODE@": "$SLURMD_NODENAME",
    "@HEAD@": "$REPROBUILD_HEAD",
    "@JOB@": "$REPROBUILD_RDZV_ID",
}
"""Marks in torchrun's own options that the script fills in: the node's own name, the first
node's, and the rendezvous id."""


def _torchrun_words(job: NodesJob, *, local_addr: bool = True) -> list[str]:
    """torchrun's line as script words: its own options with the node's and the rendezvous'
    names from the shell, then the program's words, each quoted (never filled in)."""
    line = job.torchrun(node="@NODE@", endpoint="@HEAD@", job_id="@JOB@")
    options = len(line) - len(program_args(job.command))
    words: list[str] = []
    for word in line[:options]:
        if word.startswith("--local-addr=") and not local_addr:
            continue
        for mark, shell in _SHELL_WORDS.items():
            if mark in word:
                before, _, after = word.partition(mark)
                word = f'{q(before) if before else ""}"{shell}"{q(after) if after else ""}'
                break
        else:
            word = q(word)
        words.append(word)
    return [*words, *(q(w) for w in line[options:])]


def _node_function(spec: SlurmSpec) -> list[str]:
    """The bash function every task runs on its node: find the node's index, then start the
    image (podman, apptainer) with the node's directories."""
    job = spec.job
    torchrun = _torchrun_words(job)
    shm = f"--shm-size={job.shm_gb()}g"
    mounts = {
        "data": '"$REPROBUILD_DATA"',
        "runs": '"$REPROBUILD_JOB_DIR/runs/node-$i"',
        "out": '"$REPROBUILD_JOB_DIR/out/node-$i"',
    }
    if spec.runtime == "podman":
        volumes = [
            f"--volume={mounts[m.kind]}:{m.target}{':ro' if m.read_only else ''}" for m in MOUNTS
        ]
        gpu = ["--device=nvidia.com/gpu=all"] if job.gpu else []
        start = [
            'podman run --rm --cidfile="$cidfile" --network=host --uts=host --pull=missing',
            shm,
            *gpu,
            *volumes,
            '"${env[@]}"',
            '"$REPROBUILD_IMAGE"',
            *torchrun,
        ]
        env_lines = ['local -a env=(); for word in "$@"; do env+=("--env=$word"); done']
        # podman's container is not a child of the task (conmon detaches it): when Slurm ends
        # the step (scancel, a lost node) it signals the task, which removes the container;
        # SIGKILL, KillWait later, would leave it running.
        after = [
            "  local pid",
            '  cidfile="$(mktemp -u "${TMPDIR:-/tmp}/reprobuild-cid.XXXXXX")"',
            '  trap \'podman rm -f -t 3 --cidfile "$cidfile" >/dev/null 2>&1; '
            'rm -f "$cidfile"\' TERM INT',
        ]
        tail = [
            "  pid=$!",
            "  local rc=0",
            '  wait "$pid" || rc=$?',
            '  rm -f "$cidfile"',
            '  return "$rc"',
        ]
    else:  # apptainer
        binds = [
            f"--bind={mounts[m.kind]}:{m.target}{':ro' if m.read_only else ''}" for m in MOUNTS
        ]
        workdir = [f"--pwd={q(job.workdir)}"] if job.workdir else []
        start = [
            "exec apptainer exec --cleanenv --no-home",
            *(["--nv"] if job.gpu else []),
            *workdir,
            *binds,
            '"docker://$REPROBUILD_IMAGE"',
            *(q(w) for w in ENTRYPOINT),
            *torchrun,
        ]
        env_lines = ['for word in "$@"; do export "APPTAINERENV_$word"; done']
        after, tail = [], []  # apptainer's processes are the task's own: Slurm ends them
    return [
        "reprobuild_node() {",
        "  local i=0 host",
        "  local -a hosts",
        '  IFS=, read -r -a hosts <<< "$REPROBUILD_NODES"',
        '  for host in "${hosts[@]}"; do',
        '    [ "$host" = "$SLURMD_NODENAME" ] && break',
        "    i=$((i + 1))",
        "  done",
        '  if [ "$i" -ge "${#hosts[@]}" ]; then',
        "    echo \"reprobuild: error: node $SLURMD_NODENAME is not one of the job's nodes"
        ' ($REPROBUILD_NODES)" >&2',
        "    return 1",
        "  fi",
        f"  {env_lines[0]}",
        *after,
        "  " + _words(start, "    ") + (" &" if tail else ""),
        *tail,
        "}",
    ]


def _pyxis_task(spec: SlurmSpec) -> list[str]:
    """pyxis: srun itself starts the container on every node; a POSIX shell in the image
    finds the node's index and directories, then runs reprobuild's runtime under torchrun."""
    job = spec.job
    # torchrun takes --local-addr from PET_LOCAL_ADDR: the node's name is known only inside
    inner = (
        'i=0; IFS=,; for host in $REPROBUILD_NODES; do [ "$host" = "$SLURMD_NODENAME" ] && '
        "break; i=$((i + 1)); done; unset IFS; "
        f'export PET_LOCAL_ADDR="$SLURMD_NODENAME" {RUN_DIR_VAR}="{JOB_MOUNT}/runs/node-$i" '
        f'{OUTPUT_DIR_VAR}="{JOB_MOUNT}/out/node-$i"; exec "$@"'
    )
    words = [*(q(w) for w in ENTRYPOINT), *_torchrun_words(job, local_addr=False)]
    mounts = f'"$data_dir:/data:ro,$job_dir:{JOB_MOUNT}"'
    workdir = [f"--container-workdir={q(job.workdir)}"] if job.workdir else []
    return [
        _words(
            [
                'srun --nodes="$SLURM_JOB_NUM_NODES" --ntasks-per-node=1 --kill-on-bad-exit=1',
                '--ntasks="$SLURM_JOB_NUM_NODES"',
                f"--container-image={q(enroot_image(job.image))}",
                f"--container-mounts={mounts}",
                *workdir,
                "--no-container-mount-home",
                "/bin/sh -c " + q(inner) + " reprobuild-node",
                *words,
            ]
        )
        + ' || fail "$?"'
    ]


def _oci_task(spec: SlurmSpec) -> list[str]:
    """oci: a config.json for this job (the bundle's template with the job's directories),
    then srun --container starts it on every node; a POSIX shell in the image finds the
    node's index and directories. Slurm 22.05 writes the step's environment into the
    container's configuration once, before the task's own variables exist (SLURMD_NODENAME is
    the batch node's there), so the node is found by its host name (no UTS namespace: the
    node's own), short form, which must be its Slurm node name."""
    job = spec.job
    path = f"export PATH={q(spec.path)}; " if spec.path else ""
    workdir = f"cd {q(job.workdir)}; " if job.workdir else ""
    inner = (
        "read -r me < /proc/sys/kernel/hostname; me=${me%%.*}; "
        'i=0; IFS=,; for host in $REPROBUILD_NODES; do [ "$host" = "$me" ] && break; '
        "i=$((i + 1)); done; unset IFS; "
        'if [ "$host" != "$me" ]; then echo "reprobuild: error: host name $me is not one of '
        "the job's nodes ($REPROBUILD_NODES): with --runtime oci each node's host name must "
        'be its Slurm node name" >&2; exit 1; fi; '
        f"{path}{workdir}"
        f'export PET_LOCAL_ADDR="$me" {RUN_DIR_VAR}="{JOB_MOUNT}/runs/node-$i" '
        f'{OUTPUT_DIR_VAR}="{JOB_MOUNT}/out/node-$i"; exec "$@"'
    )
    words = [*(q(w) for w in ENTRYPOINT), *_torchrun_words(job, local_addr=False)]
    record = f'"image": "{job.image}"'
    return [
        "# The bundle must be the image's (reprobuild-bundle.json names it).",
        f'if ! grep -q -F -- {q(record)} "$REPROBUILD_BUNDLE/{oci_bundle.RECORD}"; then',
        '  echo "reprobuild: error: $REPROBUILD_BUNDLE is not a bundle of $REPROBUILD_IMAGE'
        ' (unpack it with reprobuild slurm --runtime oci --bundle DIR)" >&2',
        "  exit 2",
        "fi",
        "# Slurm reads the mounts from the bundle's config.json and, in 22.05, runs the",
        "# bundle's rootfs/ whatever root.path says: a bundle for this job beside the image's,",
        "# its rootfs hard-linked to the image's (no bytes copied; read-only in the container).",
        'mkdir -p "$REPROBUILD_BUNDLE/jobs"',
        'oci_dir=$(mktemp -d "$REPROBUILD_BUNDLE/jobs/job-$SLURM_JOB_ID.XXXXXX")',
        "trap 'rm -rf \"$oci_dir\"' EXIT",
        'cp -al "$REPROBUILD_BUNDLE/rootfs" "$oci_dir/rootfs"',
        f'config=$(<"$REPROBUILD_BUNDLE/{oci_bundle.TEMPLATE}")',
        f'config=${{config//{oci_bundle.JOB_DIR_MARK}/"$job_dir"}}',
        f'config=${{config//{oci_bundle.DATA_MARK}/"$data_dir"}}',
        'printf \'%s\\n\' "$config" >"$oci_dir/config.json"',
        "# Slurm gives the container the task's environment.",
        'export "${variables[@]}"',
        _words(
            [
                'srun --nodes="$SLURM_JOB_NUM_NODES" --ntasks-per-node=1 --kill-on-bad-exit=1',
                '--ntasks="$SLURM_JOB_NUM_NODES"',
                '--container="$oci_dir"',
                "/bin/sh -c " + q(inner) + " reprobuild-node",
                *words,
            ]
        )
        + ' || fail "$?"',
    ]


def _machine_check(arch: str) -> list[str]:
    """Stop the job on a node whose machine is not the image's (the batch script runs on the
    job's first node): one line naming both, exit 2, before any container starts. Only the
    literals of :data:`MACHINES` reach the script; another architecture gets no check."""
    machine = MACHINES.get(arch)
    if machine is None:
        return []
    return [
        f'if [ "$(uname -m)" != {machine} ]; then',
        f'  echo "reprobuild: error: the image is linux/{arch} and node $(hostname) is '
        f'$(uname -m): submit the job to {machine} nodes" >&2',
        "  exit 2",
        "fi",
    ]


def render(spec: SlurmSpec) -> str:
    job = spec.job
    shape = job.shape
    lines = ["#!/bin/bash", *(f"# {line}".rstrip() for line in _header(spec))]
    # SC2016: the program's and --env's words are single-quoted so that they stay literal
    lines.append("# shellcheck disable=SC2016")
    lines += [
        f"#SBATCH --job-name={spec.name}",
        f"#SBATCH --nodes={shape.nodes}",
        "#SBATCH --ntasks-per-node=1",
        "#SBATCH --no-requeue",
    ]
    if shape.gpu:
        lines.append(f"#SBATCH --gpus-per-node={shape.nproc_per_node}")
    lines += [
        "set -euo pipefail",
        "",
        f"readonly REPROBUILD_IMAGE={q(job.image)}",
        *([f"readonly REPROBUILD_BUNDLE={q(spec.bundle)}"] if spec.bundle else []),
        f"readonly NODES={shape.nodes}",
        "# Slurm ends a job with SIGTERM (scancel, a lost node): srun returns, fail says so",
        "trap : TERM",
        "fail() {",
        "  echo \"reprobuild: error: the job's srun step failed (exit $1); each node's run "
        'record is in $job_dir/runs/node-<i>/" >&2',
        '  exit "$1"',
        "}",
        'submit_dir="${SLURM_SUBMIT_DIR:?submit this script with sbatch}"',
        f'job_dir="${{{JOB_DIR_VAR}:-$submit_dir/reprobuild-${{SLURM_JOB_ID}}}}"',
        f'data_dir="${{{DATA_VAR}:-$submit_dir/data}}"',
        'case "$job_dir$data_dir" in',
        "  *[:,]*)",
        "    echo \"reprobuild: error: $job_dir or $data_dir has a ':' or ',': the runtime "
        'cannot mount it; set REPRO_JOB_DIR and REPRO_DATA to other paths" >&2',
        "    exit 2",
        "    ;;",
        "esac",
        *(_OCI_PATHS if spec.runtime == "oci" else []),
        *_machine_check(spec.arch),
        'mapfile -t hosts < <(scontrol show hostnames "$SLURM_JOB_NODELIST" | LC_ALL=C sort)',
        'if [ "${#hosts[@]}" -ne "$NODES" ]; then',
        '  echo "reprobuild: error: the job has ${#hosts[@]} node(s), not $NODES" >&2',
        "  exit 2",
        "fi",
        'nodes=$(IFS=,; printf "%s" "${hosts[*]}")',
        'mkdir -p "$data_dir"',
        'for i in "${!hosts[@]}"; do',
        '  install -d -m 0777 "$job_dir/runs/node-$i" "$job_dir/out/node-$i"',
        "done",
        "",
        "# The job's variables, the same on every node: reprobuild's, then --env's.",
        "variables=(",
        *(f"  {word}" for word in _variables(spec)),
        ")",
        'export REPROBUILD_IMAGE REPROBUILD_NODES="$nodes" REPROBUILD_HEAD="${hosts[0]}"',
        f'export REPROBUILD_RDZV_ID="${{{JOB_ID_VAR}:-{DEFAULT_JOB_ID}}}-$SLURM_JOB_ID"',
        'export REPROBUILD_JOB_DIR="$job_dir" REPROBUILD_DATA="$data_dir"',
        'echo "reprobuild: job $SLURM_JOB_ID on ${hosts[*]}; runs in $job_dir" >&2',
        "",
    ]
    if spec.runtime == "oci":
        lines += _oci_task(spec)
    elif spec.runtime == "pyxis":
        lines += [
            "# pyxis gives the container the task's environment.",
            'export "${variables[@]}"',
            *_pyxis_task(spec),
        ]
    else:
        lines += [
            *_node_function(spec),
            "export -f reprobuild_node",
            _words(
                [
                    'srun --nodes="$NODES" --ntasks="$NODES" --ntasks-per-node=1 '
                    "--kill-on-bad-exit=1",
                    'bash -c \'reprobuild_node "$@"\' reprobuild-node "${variables[@]}"',
                ]
            )
            + ' || fail "$?"',
        ]
    lines.append('echo "reprobuild: job $SLURM_JOB_ID done; runs in $job_dir" >&2')
    return "\n".join(lines) + "\n"


def slurm_project(
    directory: Path,
    *,
    nodes: int,
    nproc_per_node: int | None = None,
    gpu: bool = False,
    runtime: str = DEFAULT_RUNTIME,
    image: str | None = None,
    variant: str | None = None,
    name: str | None = None,
    engine: ImageLookup | None = None,
    env: Sequence[str] = (),
    bundle: Path | None = None,
    log: Callable[[str], None] = lambda _: None,
) -> str:
    """The sbatch script for the project in ``directory``: its image, pinned by registry
    digest. ``runtime``, ``name`` and ``env`` are checked before the engine is asked; with
    ``oci`` the image is then unpacked into ``bundle`` (kept if it holds that image already)."""
    if runtime not in RUNTIMES:
        raise SlurmOptionError(
            f"--runtime {runtime!r} is not allowed: use one of {', '.join(RUNTIMES)}"
        )
    if (runtime == "oci") != (bundle is not None):
        raise SlurmOptionError(
            "--runtime oci needs --bundle DIR (where the image is unpacked, a directory every "
            "node sees); other runtimes take none"
        )
    if name is not None:
        check_name(name)
    check_env_names(parse_env(env))  # before the engine is asked anything
    made = project_job(
        directory,
        nodes=nodes,
        nproc_per_node=nproc_per_node,
        gpu=gpu,
        image=image,
        variant=variant,
        engine=engine,
        env=env,
        what="Slurm job",
    )
    job_name = name if name is not None else default_name(made.config.name)
    arch, platforms = made.pinned.architecture, made.pinned.platforms
    if bundle is None:
        return render(SlurmSpec(made.job, job_name, runtime, arch=arch, platforms=platforms))
    if platforms:
        raise SlurmOptionError(
            f"--bundle unpacks one image, and {made.job.image} is an index of "
            f"{', '.join(platforms)}",
            hint="give --image the platform's own image (NAME:TAG-ARCH, as pushed)",
        )
    SlurmSpec(made.job, job_name, runtime, str(bundle.absolute()))  # checks before unpacking
    unpacked = oci_bundle.unpack(made.job.image, bundle, log=log)
    log(f"bundle {'kept' if unpacked.reused else 'unpacked'}: {unpacked.path}")
    path = image_path(unpacked.path)
    return render(SlurmSpec(made.job, job_name, runtime, str(unpacked.path), path, arch))


def image_path(bundle: Path) -> str:
    """The PATH the image's config sets (empty: none), from the bundle's config.json."""
    config = json.loads((bundle / "config.json").read_text())
    for entry in config.get("process", {}).get("env", []):
        if isinstance(entry, str) and entry.startswith("PATH="):
            return entry[len("PATH=") :]
    return ""
