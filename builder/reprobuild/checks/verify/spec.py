"""What ``reprobuild verify`` runs: its arguments checked and turned into a :class:`VerifySpec`
(pure: no engine, no runs)."""

from __future__ import annotations

import os
import posixpath
import re
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path, PurePosixPath
from typing import Any

from reprobuild.checks.verify.emulation import check_models, parse_cpus
from reprobuild.checks.volatile import PatternError, Rule, rules_for
from reprobuild.errors import ReprobuildError, VerifyError, VerifyUsageError
from reprobuild_entrypoint.contract import (
    DATA_DIR,
    MODE_VAR,
    OUT_DIR,
    OUTPUT_DIR_VAR,
    RECORD_DIR,
    RUN_DIR_VAR,
    SEED_VAR,
    TRIAL_VAR,
)
from reprobuild_entrypoint.settings import MODES, SEED_MAX

"""Each run's output directory in its container (``$REPRO_OUTPUT_DIR``)."""
"""Each run's ``REPRO_RUN_DIR`` in its container: the runtime writes its records there."""
DEFAULT_DATA_DIR = DATA_DIR
DEFAULT_RUNS = 2
MAX_RUNS = 16
MAX_OUTPUT_CHARS = 4096
"""An ``--output`` path longer than this is refused (no file system takes it)."""
_ENV_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
_GPU_ID = re.compile(r"[A-Za-z0-9][A-Za-z0-9:_.-]*")
_RESERVED_ENV = {
    RUN_DIR_VAR: "verify gives every run its own (mounted at /reprobuild-run)",
    "REPRO_RUN_ID": "every run gets its own from the runtime",
    OUTPUT_DIR_VAR: "verify gives every run its own (mounted at /out)",
}


def shorten(text: str, limit: int = 80) -> str:
    """``text`` for an error line: cut with an ellipsis past ``limit`` characters."""
    shown = repr(text)
    return shown if len(shown) <= limit else shown[: limit - 4] + "...'"


@dataclass(frozen=True)
class DataMount:
    """A host file or directory mounted read-only into every run's container."""

    host: Path
    container: str

    def to_dict(self) -> dict[str, str]:
        return {"host": str(self.host), "container": self.container}

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> DataMount:
        return cls(Path(data["host"]), str(data["container"]))


@dataclass(frozen=True)
class GpuRequest:
    """``--gpus``, as ``docker run --gpus`` takes it: ``all``, a count, or ``device=ID,...``."""

    spec: str
    count: int
    """-1 for all GPUs; 0 when ``device_ids`` names them."""
    device_ids: tuple[str, ...] = ()

    def cuda_visible_devices(self) -> str | None:
        """The ``CUDA_VISIBLE_DEVICES`` that selects the same GPUs on the host (--local)."""
        if self.device_ids:
            return ",".join(self.device_ids)
        if self.count > 0:
            return ",".join(str(i) for i in range(self.count))
        return None


@dataclass(frozen=True)
class VerifySpec:
    """What to run and how; see :func:`verify_spec_from_args`."""

    command: tuple[str, ...]
    image: str | None = None
    """None: ``--local``, on this host without an engine."""
    runs: int = DEFAULT_RUNS
    outputs: tuple[str, ...] = ()
    """Paths relative to the run's output directory; ``.`` is the whole directory, a trailing
    ``/`` marks a directory (compared file by file)."""
    data: tuple[DataMount, ...] = ()
    env: tuple[tuple[str, str], ...] = ()
    seed: int | None = None
    mode: str | None = None
    gpus: GpuRequest | None = None
    trial: int | None = None
    """``--trial K``: ``REPRO_TRIAL`` (trial K of the experiment seed, ``--seed`` or the
    image's; see ``reprobuild_entrypoint.trials``)."""
    network: bool = False
    ignore: tuple[str, ...] = ()
    """``--ignore REGEX``: more stdout fields left out of the comparison."""
    default_ignore: bool = True
    """Fold progress-bar redraws and leave the built-in wall-clock fields out of the
    comparison (:mod:`reprobuild.checks.volatile`); False: stdout is compared as written."""
    nodes: int | None = None
    """``--nodes N``: every run is a torchrun job of N containers on a network of its own
    (:mod:`reprobuild.cluster.nodes`); the command is the program torchrun starts."""
    nproc_per_node: int = 1
    cpus: tuple[str, ...] = ()
    """``--cpu native,Haswell,Nehalem``: run ``i`` on CPU ``cpus[i]``, emulated by qemu-user
    unless ``native`` (:mod:`reprobuild.checks.verify.emulation`); empty: every run native."""
    qemu: str | None = None
    """The host's qemu-x86_64-static, when a leg is emulated."""

    def stdout_rules(self) -> tuple[Rule, ...]:
        return rules_for(self.ignore, defaults=self.default_ignore)

    @property
    def local(self) -> bool:
        return self.image is None


def parse_output(text: str) -> str:
    """``--output PATH``: a path under the run's output directory (``/out/x`` is taken as
    ``x``); a trailing ``/`` means a directory, ``.`` the whole output directory."""
    raw = text.strip()
    if raw == OUT_DIR or raw == OUT_DIR + "/":
        return "."
    if raw.startswith(OUT_DIR + "/"):
        raw = raw[len(OUT_DIR) + 1 :]
    if "\0" in raw:
        raise VerifyUsageError(f"--output {shorten(text)}: the path holds a NUL character")
    if len(raw) > MAX_OUTPUT_CHARS:
        raise VerifyUsageError(
            f"--output {shorten(text)}: longer than {MAX_OUTPUT_CHARS} characters"
        )
    if not raw or raw.startswith("/"):
        raise VerifyUsageError(
            f"--output {shorten(text)}: give a path relative to the run's output directory "
            f"{OUT_DIR}",
            hint="e.g. --output metrics.json --output ckpt/",
        )
    norm = posixpath.normpath(raw)
    if norm == ".." or norm.startswith("../"):
        raise VerifyUsageError(
            f"--output {shorten(text)} points outside the output directory {OUT_DIR}"
        )
    if norm != "." and raw.endswith("/"):
        norm += "/"
    return norm


def parse_data(text: str) -> DataMount:
    """``--data HOST[:CONTAINER]``: mounted read-only at CONTAINER (default /data)."""
    if "\0" in text:
        raise VerifyUsageError(f"--data {shorten(text)}: the path holds a NUL character")
    host_text, _, container = text.partition(":")
    container = container or DEFAULT_DATA_DIR
    if not host_text:
        raise VerifyUsageError(
            f"--data {shorten(text)}: no host path", hint="use --data HOST_PATH[:CONTAINER_PATH]"
        )
    target = PurePosixPath(container)
    if not target.is_absolute() or ".." in target.parts or str(target) == "/":
        raise VerifyUsageError(
            f"--data {shorten(text)}: the container path {shorten(container)} must be absolute "
            "and not /",
            hint=f"e.g. --data {host_text}:{DEFAULT_DATA_DIR}",
        )
    for reserved in (OUT_DIR, RECORD_DIR):
        if target == PurePosixPath(reserved) or PurePosixPath(reserved) in target.parents:
            raise VerifyUsageError(
                f"--data {shorten(text)}: {reserved} is where verify mounts each run's own "
                "directory",
                hint=f"mount the data elsewhere, e.g. {DEFAULT_DATA_DIR}",
            )
    host = Path(host_text).expanduser().absolute()
    if not host.exists():
        raise VerifyError(f"--data {shorten(text)}: {host} does not exist")
    return DataMount(host, str(target))


def parse_env_option(text: str) -> tuple[str, str]:
    """``-e KEY=VALUE``, or ``-e KEY`` for the host's value (as ``docker run -e`` takes it)."""
    name, sep, value = text.partition("=")
    if not _ENV_NAME.fullmatch(name):
        raise VerifyUsageError(
            f"-e {shorten(text)}: {shorten(name)} is not a variable name", hint="use -e KEY=VALUE"
        )
    if not sep:
        host_value = os.environ.get(name)
        if host_value is None:
            raise VerifyUsageError(
                f"-e {name}: not set on this host", hint=f"give a value: -e {name}=VALUE"
            )
        value = host_value
    if "\0" in value:
        raise VerifyUsageError(f"-e {name}: the value holds a NUL character")
    if name in _RESERVED_ENV:
        raise VerifyUsageError(f"-e {name}: not yours to set here: {_RESERVED_ENV[name]}")
    return name, value


def parse_gpus(text: str) -> GpuRequest:
    """``--gpus all``, ``--gpus 2``, ``--gpus device=0,1`` (quotes around it allowed)."""
    spec = text.strip().strip("'\"").strip()
    if spec == "all":
        return GpuRequest(spec, -1)
    if spec.isascii() and spec.isdigit() and int(spec) > 0:
        return GpuRequest(spec, int(spec))
    if spec.startswith("device="):
        ids = tuple(part.strip() for part in spec[len("device=") :].split(","))
        if ids and all(_GPU_ID.fullmatch(i) for i in ids):
            return GpuRequest(spec, 0, ids)
    raise VerifyUsageError(
        f"--gpus {shorten(text)} is not a GPU request",
        hint="use --gpus all, --gpus N (the first N GPUs) or --gpus device=0,1 (by index or UUID)",
    )


def verify_spec_from_args(
    image: str | None,
    command: Sequence[str],
    *,
    local: bool = False,
    runs: int | None = None,
    outputs: Sequence[str] = (),
    data: Sequence[str] = (),
    env: Sequence[str] = (),
    seed: int | None = None,
    mode: str | None = None,
    gpus: str | None = None,
    network: bool = False,
    ignore: Sequence[str] = (),
    default_ignore: bool = True,
    trial: int | None = None,
    nodes: int | None = None,
    nproc_per_node: int | None = None,
    cpus: str | None = None,
) -> VerifySpec:
    """Check the arguments of ``reprobuild verify`` and turn them into a :class:`VerifySpec`
    (not to be confused with :func:`reprobuild.imaging.plan.plan_build`, which plans a build).
    ``runs`` None: one per ``--cpu`` leg, else :data:`DEFAULT_RUNS`."""
    _check_target(image, command, local)
    legs: tuple[str, ...] = ()
    if cpus is not None:
        legs = _check_cpus(cpus, runs, local=local, gpus=gpus, nodes=nodes)
        runs = len(legs)
    runs = DEFAULT_RUNS if runs is None else runs
    _check_settings(runs, seed, mode)
    _check_trial_and_local(trial, local=local, data=bool(data), network=network)
    parsed_env = tuple(parse_env_option(item) for item in env)
    _check_env_overlap(parsed_env, seed, mode, trial)
    mounts = tuple(parse_data(item) for item in data)
    _check_ignore(ignore, default_ignore)
    if nodes is not None or nproc_per_node is not None:
        _check_nodes(nodes, nproc_per_node, local=local, gpus=gpus, command=command)
    targets = [m.container for m in mounts]
    for target in targets:
        if targets.count(target) > 1:
            raise VerifyUsageError(f"--data: two mounts at {target}")
    return VerifySpec(
        command=tuple(command),
        image=None if local else image,
        runs=runs,
        outputs=tuple(dict.fromkeys(parse_output(item) for item in outputs)),
        data=mounts,
        env=parsed_env,
        seed=seed,
        mode=mode,
        gpus=None if gpus is None else parse_gpus(gpus),
        network=network,
        ignore=tuple(ignore),
        default_ignore=default_ignore,
        trial=trial,
        nodes=nodes,
        nproc_per_node=1 if nproc_per_node is None else nproc_per_node,
        cpus=legs,
        qemu=check_models(legs) if legs else None,
    )


def _check_trial_and_local(trial: int | None, *, local: bool, data: bool, network: bool) -> None:
    """``--trial`` in range; no ``--data`` or ``--network`` with ``--local``."""
    if trial is not None and not 0 <= trial <= SEED_MAX:
        raise VerifyUsageError(f"--trial {trial}: use a whole number from 0 to {SEED_MAX}")
    if local and data:
        raise VerifyUsageError(
            "--data mounts host paths into containers; --local runs on the host",
            hint="pass the host path to your command instead",
        )
    if local and network:
        raise VerifyUsageError("--network applies to containers; --local runs on the host")


def _check_ignore(ignore: Sequence[str], default_ignore: bool) -> None:
    """Every ``--ignore`` is a regular expression the rules take."""
    try:
        rules_for(ignore, defaults=default_ignore)
    except PatternError as exc:
        raise VerifyUsageError(
            str(exc), hint="a Python regular expression, e.g. --ignore 'lr=\\S+'"
        ) from None


def _check_cpus(
    text: str, runs: int | None, *, local: bool, gpus: str | None, nodes: int | None
) -> tuple[str, ...]:
    """``--cpu``: one run per leg, in a container of IMAGE, on CPUs alone."""
    for given, what in (
        (local, "--local (the legs run in containers of IMAGE)"),
        (gpus is not None, "--gpus (an emulated CPU drives no GPU)"),
        (nodes is not None, "--nodes"),
        (runs is not None, "--runs (one run per CPU named)"),
    ):
        if given:
            raise VerifyUsageError(f"--cpu does not go with {what}")
    legs = parse_cpus(text)
    if not DEFAULT_RUNS <= len(legs) <= MAX_RUNS:
        raise VerifyUsageError(
            f"--cpu {text!r}: name {DEFAULT_RUNS} to {MAX_RUNS} CPUs, one run each",
            hint="e.g. --cpu native,Haswell,Nehalem",
        )
    return legs


def _check_nodes(
    nodes: int | None,
    nproc_per_node: int | None,
    *,
    local: bool,
    gpus: str | None,
    command: Sequence[str],
) -> None:
    from reprobuild.cluster.nodes import JobShape, program_args

    if nodes is None:
        raise VerifyUsageError("--nproc-per-node goes with --nodes N (a multi-node job)")
    if local:
        raise VerifyUsageError("--nodes runs each node in a container; --local runs on the host")
    JobShape(nodes, 1 if nproc_per_node is None else nproc_per_node, gpu=gpus is not None)
    try:
        program_args(tuple(command))
    except ReprobuildError as exc:
        raise VerifyUsageError(exc.message, hint=exc.hint) from None


def _check_target(image: str | None, command: Sequence[str], local: bool) -> None:
    if local and image:
        raise VerifyUsageError(
            f"--local runs on this host: it takes no IMAGE (got {shorten(image)})",
            hint="reprobuild verify --local -- python train.py",
        )
    if not local and not image:
        raise VerifyUsageError(
            "no IMAGE to run",
            hint="reprobuild verify IMAGE -- python train.py (or --local to run on this host)",
        )
    if not command:
        shape = "--local" if local else "IMAGE"
        raise VerifyUsageError(
            "no command to run",
            hint=f"give it after `--`: reprobuild verify {shape} -- python train.py",
        )


def _check_settings(runs: int, seed: int | None, mode: str | None) -> None:
    if not DEFAULT_RUNS <= runs <= MAX_RUNS:
        raise VerifyUsageError(
            f"--runs {runs}: use {DEFAULT_RUNS} to {MAX_RUNS} runs (they run side by side)"
        )
    if seed is not None and not 0 <= seed <= SEED_MAX:
        raise VerifyUsageError(f"--seed {seed}: use a whole number from 0 to {SEED_MAX}")
    if mode is not None and mode not in MODES:
        raise VerifyUsageError(f"--mode {shorten(mode)}: use one of {', '.join(MODES)}")


def _check_env_overlap(
    parsed_env: tuple[tuple[str, str], ...],
    seed: int | None,
    mode: str | None,
    trial: int | None = None,
) -> None:
    names = [name for name, _ in parsed_env]
    for name, flag, given in (
        (SEED_VAR, "--seed", seed),
        (MODE_VAR, "--mode", mode),
        (TRIAL_VAR, "--trial", trial),
    ):
        if given is not None and name in names:
            raise VerifyUsageError(f"-e {name} and {flag} both given", hint=f"use {flag} only")
