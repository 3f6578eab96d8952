"""The image's ENTRYPOINT: set up a deterministic run, record it, then run the command.

``/opt/venv/bin/python -I -m reprobuild_entrypoint <command...>`` (the command is the image's
CMD or what ``docker run IMAGE ...`` passes; a leading ``--`` is dropped):

1. from_environ the settings (``REPRO_SEED``, ``REPRO_DETERMINISM``, ``REPRO_THREADS``, ...): a bad
   value prints one line naming it and the allowed ones, and exits with status 2;
2. in a GPU image (``REPROBUILD_VARIANT=gpu`` whose manifest has a ``gpu`` section or says
   ``"variant": "gpu"``), check the host (:mod:`~reprobuild_entrypoint.drivercheck`): find the
   GPUs and the driver (:mod:`~reprobuild_entrypoint.gpuinfo`: NVML, else nvidia-smi, else
   /proc) and compare the driver with the minimum the image's CUDA needs. ``strict`` refuses
   a driver that is too old, or no GPU at all unless ``REPRO_ALLOW_CPU=1``: one line, status 3,
   the program never starts; ``warn`` prints the line and goes on; ``off`` only records. CPU
   images skip this (and keep the cost of start-up they had);
3. apply the environment plan (:mod:`~reprobuild_entrypoint.envplan`) to the environment: the
   program starts with ``PYTHONHASHSEED`` and the library variables in place;
4. with ``REPRO_RUN_DIR`` set, write ``run-<run id>.json`` there (atomically; written for a
   refused run too, with the reason) and export ``REPRO_RUN_ID`` and the absolute
   ``REPRO_RUN_DIR``, so that Python processes of the run add their framework records beside
   it. Without it, write the record to the container's own temporary directory
   (:data:`DEFAULT_RECORD_DIR` under ``tempfile.gettempdir()``) and export ``REPRO_RUN_ID``
   and ``REPRO_RUN_RECORD`` (its path) but no ``REPRO_RUN_DIR``: the trackers' hooks
   (MLflow tags, W&B config) name the run and attach its record, and nothing else changes (no
   framework records, the same summary line); a record that cannot be written there is left
   out silently;
5. print one summary line on stderr (``REPRO_QUIET=1`` silences it, and the check's warnings);
6. run the command, through the base image's own entrypoint when the build baked one
   (``REPROBUILD_BASE_ENTRYPOINT``): ``exec`` it, so signals reach the program directly and its
   status is the container's; as PID 1 (or with ``REPROBUILD_FORCE_INIT=1``, for tests) act as
   a minimal init instead (:mod:`~reprobuild_entrypoint.initproc`).

Exit statuses of its own: 2 for a bad setting or an unwritable run record, 3 when a GPU image
refuses the host (driver too old, or no GPU visible), 127 when the command is not found, 126
when it cannot be executed.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from reprobuild_entrypoint import cpulevel, envplan, hostinfo, jsonfile, runrecord
from reprobuild_entrypoint.contract import EMULATOR_VAR, RUN_DIR_VAR, RUN_RECORD_VAR
from reprobuild_entrypoint.envplan import EnvPlan
from reprobuild_entrypoint.launch import (
    exec_command,
    parse_base_entrypoint,
    parse_emulator,
    under_emulator,
)
from reprobuild_entrypoint.settings import Settings, SettingsError, from_environ

if TYPE_CHECKING:
    from datetime import datetime

USAGE_ERROR = 2
HOST_REFUSED = 3
"""The image refused the host before the program started: a GPU image whose driver is older
than the image's CUDA needs, or with no GPU visible (strict mode; see drivercheck), or a
portable run pinned to a CPU level above this CPU's (strict mode; see cpulevel)."""


def _flag(environ: Mapping[str, str], name: str) -> bool:
    return environ.get(name, "") not in ("", "0")


def _quiet(environ: Mapping[str, str]) -> bool:
    return _flag(environ, "REPRO_QUIET")


class GpuCheck:
    """What the GPU host check found: the ``host.gpu`` section, the ``gpu_check`` section, and
    the verdict's status and message (None when nothing was checked)."""

    def __init__(self) -> None:
        self.host: dict[str, Any] | None = None
        self.record: dict[str, Any] | None = None
        self.status: str | None = None
        self.message: str | None = None

    def summary(self) -> str | None:
        host = self.host
        if host is None or self.record is None or not self.record.get("enforced"):
            return None
        if not host["count"]:
            return "no GPU"
        names = {d.get("name") for d in host["devices"] or ()} - {None}
        what = f"{host['count']} x {names.pop()}" if len(names) == 1 else f"{host['count']} GPUs"
        return f"{what} (driver {host['driver_version'] or 'unknown'})"


def gpu_check(
    settings: Settings, environ: Mapping[str, str], manifest: Mapping[str, Any], recording: bool
) -> GpuCheck:
    """Find the host's GPUs and check its driver, for a GPU image only (CPU images: nothing).

    Enforced when the image's manifest declares a GPU image (a ``gpu`` section, or
    ``"variant": "gpu"``); a ``REPROBUILD_VARIANT=gpu`` environment without one (no manifest:
    ``reprobuild verify --local --gpus``, tests) only records what it found."""
    result = GpuCheck()
    if settings.variant != "gpu":
        return result
    enforced = isinstance(manifest.get("gpu"), dict) or manifest.get("variant") == "gpu"
    if not recording and not (enforced and settings.mode != "off"):
        return result
    from reprobuild_entrypoint import drivercheck, gpuinfo

    result.host = host = gpuinfo.discover(environ)
    if not enforced:
        result.record = {
            "enforced": False,
            "reason": "the image manifest declares no GPU image (no gpu section or variant)",
        }
        return result
    requirement = drivercheck.image_requirement(manifest, environ)
    # An image whose CUDA comes from the lock's wheels on a plain Python base runs on CPU as
    # well: no GPU is then a fact to record, not a refusal (an NGC image still refuses).
    section = manifest.get("gpu")
    from_wheels = isinstance(section, dict) and section.get("stack") == "wheels"
    allow_cpu = _flag(environ, "REPRO_ALLOW_CPU") or from_wheels
    verdict = drivercheck.check(
        host["driver_version"],
        requirement,
        gpu_count=host["count"],
        mode=settings.mode,
        allow_cpu=allow_cpu,
        cpu_reason="its CUDA comes from the lock's wheels" if from_wheels else "REPRO_ALLOW_CPU",
    )
    result.status, result.message = verdict.status, verdict.message
    result.record = {
        "enforced": True,
        "mode": settings.mode,
        "allow_cpu": allow_cpu,
        "cuda_from_wheels": from_wheels,
        "requirement": None if requirement is None else requirement._asdict(),
        "host_driver": host["driver_version"],
        "gpu_count": host["count"],
        **verdict.as_dict(),
    }
    return result


def summary(
    settings: Settings,
    env_plan: EnvPlan,
    record: Path | None,
    init: bool = False,
    gpu: str | None = None,
) -> str:
    """The one line printed on stderr before the command starts."""
    if settings.mode == "off":
        parts = [f"mode off: determinism not configured, {len(env_plan.remove)} variables removed"]
    else:
        seed = f"seed {settings.seed}"
        if settings.trial is not None:
            seed += f" (trial {settings.trial} of seed {settings.experiment_seed})"
        if settings.rank is not None:
            seed += f" (rank {settings.rank}: seed {settings.rank_seed})"
        parts = [seed, f"mode {settings.mode}", f"threads {settings.threads}"]
        level = envplan.level_name(settings.cpu, envplan.this_machine())
        if level is not None:
            parts.append(f"cpu portable ({level})")
        if gpu is not None:
            parts.append(gpu)
        parts.append(f"{len(env_plan.set)} variables set")
        if env_plan.remove:
            parts.append(f"{len(env_plan.remove)} removed")
    if env_plan.user_set:
        parts.append(f"{len(env_plan.user_set)} user-set kept ({', '.join(env_plan.user_set)})")
    if init:
        parts.append("running as init")
    if record is not None:
        parts.append(f"record {record}")
    return "reprobuild: " + ", ".join(parts)


def _record_cpu(cpu: dict[str, Any], found: dict[str, object]) -> None:
    """What :func:`cpulevel.detect` read, into the record's ``host.cpu``; on aarch64 also the
    features the kernels dispatch on and the SVE vector length, which its one level does not
    tell."""
    cpu.update(
        level=found.get("level"), vendor=found.get("vendor"), flags_source=found.get("source")
    )
    if found.get("machine") == "aarch64":
        cpu.update(features=found.get("flags"), sve_vector_bits=found.get("sve_vector_bits"))


def main(argv: Sequence[str]) -> int:
    argv = list(argv)
    if argv[:1] == ["--"]:
        argv = argv[1:]
    if not argv:
        sys.stderr.write("reprobuild: no command given (set the image's CMD or pass one)\n")
        return USAGE_ERROR
    environ = os.environ
    started = runrecord.utc_now()
    try:
        settings = from_environ(environ)
        base = parse_base_entrypoint(environ.get("REPROBUILD_BASE_ENTRYPOINT"))
        emulator = parse_emulator(environ.pop(EMULATOR_VAR, None))
        run_dir_text = environ.get(RUN_DIR_VAR, "").strip()
        run_id = _run_id(environ, started)
    except SettingsError as exc:
        sys.stderr.write(f"reprobuild: {exc}\n")
        return USAGE_ERROR
    requested_cpu = settings.cpu
    default_dir = None if run_dir_text else default_record_dir()
    cpu_refusal, cpu_found = _cpu(settings, environ, recording=run_dir_text or default_dir)
    env_plan = envplan.plan(environ, settings)
    command = [*(base or ()), *argv]
    if emulator is not None:
        command = under_emulator(emulator, command, environ.get("PATH"))
    init = os.getpid() == 1 or environ.get("REPROBUILD_FORCE_INIT") == "1"
    manifest: dict[str, Any] = runrecord.manifest_info(runrecord.default_manifest_path(environ))
    gpu = gpu_check(settings, environ, manifest, recording=bool(run_dir_text))
    record_path: Path | None = None
    run_dir = Path(run_dir_text).absolute() if run_dir_text else default_dir
    if run_dir is not None:
        record = runrecord.run_record(
            run_id=run_id,
            started=started,
            settings=settings,
            env_plan=env_plan,
            argv=argv,
            command=command,
            base_entrypoint=base,
            init=init,
            environ=environ,
            manifest=manifest,
            host=_host(gpu, cpu_found, probe_gpu=bool(run_dir_text)),
            gpu_check=gpu.record,
            cpu_check={
                "requested": requested_cpu,
                "refused": cpu_refusal,
                "emulator": emulator,
            },
        )
        written = _write_record(environ, run_dir, run_dir_text, run_id, record)
        if isinstance(written, int):  # REPRO_RUN_DIR could not take it: said in one line
            return written
        record_path = written
    refused = _refusal(cpu_refusal, settings, gpu, environ)
    if refused is not None:
        return refused
    envplan.apply(env_plan, environ)
    if not _quiet(environ):
        shown = record_path if run_dir_text else None  # the line names only a record asked for
        sys.stderr.write(summary(settings, env_plan, shown, init, gpu.summary()) + "\n")
    sys.stderr.flush()
    if init:
        return _supervise(command, record_path, run_id)
    return exec_command(command)


def _supervise(command: list[str], record_path: Path | None, run_id: str) -> int:
    """As PID 1: run the command as a minimal init, then write the exit record."""
    from reprobuild_entrypoint import initproc

    status = initproc.supervise(command)
    if record_path is not None:
        _write_exit_record(record_path.parent, run_id, status, initproc.RECEIVED)
    return status


def _host(gpu: GpuCheck, cpu_found: dict[str, object] | None, *, probe_gpu: bool) -> dict[str, Any]:
    """The record's ``host``: the GPUs the check found (probed here only for a record asked
    for: the default record runs no nvidia-smi at every start), and what was read of the CPU."""
    probed = hostinfo.gpu_info() if probe_gpu else None
    host = runrecord.host_info(gpu.host if gpu.host is not None else probed)
    if cpu_found is not None:
        _record_cpu(host["cpu"], cpu_found)
    return host


def _run_id(environ: Mapping[str, str], started: datetime) -> str:
    """``REPRO_RUN_ID`` where the caller set one (checked), else a new one."""
    given = environ.get("REPRO_RUN_ID", "").strip()
    if given:
        return runrecord.check_run_id(given)
    return runrecord.new_run_id(started, os.urandom(4).hex())


def _cpu(
    settings: Settings, environ: Mapping[str, str], *, recording: object
) -> tuple[str | None, dict[str, object] | None]:
    """The portable CPU level's refusal (None where it holds) and what was read of the CPU
    (read for the record where a record is written, even without a level). In ``warn`` a
    refusal is said and the run falls back to native."""
    cpu_refusal, cpu_found = cpulevel.resolve(settings)
    if cpu_found is None and recording:
        cpu_found = cpulevel.detect()
    if cpu_refusal is not None and settings.mode == "warn":
        if not _quiet(environ):
            sys.stderr.write(f"reprobuild: {cpu_refusal}; running native\n")
        cpulevel.fall_back(settings, cpu_refusal)
    return cpu_refusal, cpu_found


def _write_record(
    environ: os._Environ[str],
    run_dir: Path,
    run_dir_text: str,
    run_id: str,
    record: dict[str, Any],
) -> Path | int | None:
    """Write the run record and export where it is: its path, None where the default place
    could not take it (left out quietly: no one asked for it), or USAGE_ERROR where
    ``REPRO_RUN_DIR`` could not (said in one line)."""
    record_path: Path | None = None
    try:
        record_path = jsonfile.write_atomic(runrecord.run_record_path(run_dir, run_id), record)
    except OSError as exc:
        if run_dir_text:
            sys.stderr.write(
                f"reprobuild: cannot write the run record to REPRO_RUN_DIR={run_dir_text!r}: "
                f"{exc.strerror or exc}\n"
            )
            return USAGE_ERROR
    if run_dir_text:
        environ[RUN_DIR_VAR] = str(run_dir)
        environ["REPRO_RUN_ID"] = run_id
    elif record_path is not None:
        environ[RUN_RECORD_VAR] = str(record_path)
        environ["REPRO_RUN_ID"] = run_id
    return record_path


def _refusal(
    cpu_refusal: str | None, settings: Settings, gpu: GpuCheck, environ: Mapping[str, str]
) -> int | None:
    """HOST_REFUSED, said in one line, where the host is refused (a CPU level in strict, the
    GPU check's refusal); a GPU warning is said and the run goes on (None)."""
    message = None
    if cpu_refusal is not None and settings.mode == "strict":
        message = cpu_refusal
    elif gpu.status == "refuse":
        message = gpu.message
    if message is not None:
        sys.stderr.write(f"reprobuild: {message}\n")
        sys.stderr.flush()
        return HOST_REFUSED
    if gpu.status == "warn" and not _quiet(environ):
        sys.stderr.write(f"reprobuild: {gpu.message}\n")
    return None


def _write_exit_record(run_dir: Path, run_id: str, status: int, signals: Sequence[int]) -> None:
    """``run-<id>-exit.json``; a failure to write it never changes the run's status."""
    try:
        jsonfile.write_atomic(
            runrecord.exit_record_path(run_dir, run_id),
            runrecord.exit_record(run_id, status, signals),
        )
    except OSError as exc:
        sys.stderr.write(f"reprobuild: cannot write the exit record: {exc.strerror or exc}\n")


DEFAULT_RECORD_DIR = "reprobuild-run"
"""Where the run record goes without ``REPRO_RUN_DIR``: this folder in the container's
temporary directory (``/tmp/reprobuild-run``), for the trackers' hooks to attach."""


def default_record_dir() -> Path | None:
    import tempfile

    try:
        return Path(tempfile.gettempdir()) / DEFAULT_RECORD_DIR
    except (OSError, RuntimeError):  # no usable temporary directory at all
        return None


def entrypoint() -> None:
    sys.exit(main(sys.argv[1:]))


if __name__ == "__main__":
    entrypoint()
