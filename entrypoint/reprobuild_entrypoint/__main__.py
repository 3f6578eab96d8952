"""The image's ENTRYPOINT: set up a deterministic run, record it, then run the command.

``/opt/venv/bin/python -I -m reprobuild_entrypoint <command...>`` (the command is the image's
CMD or what ``docker run IMAGE ...`` passes; a leading ``--`` is dropped):

1. resolve the settings (``REPRO_SEED``, ``REPRO_DETERMINISM``, ``REPRO_THREADS``, ...): a bad
   value prints one line naming it and the allowed ones, and exits with status 2;
2. apply the environment plan (:mod:`~reprobuild_entrypoint.envplan`) to the environment: the
   program starts with ``PYTHONHASHSEED`` and the library variables in place;
3. with ``REPRO_RUN_DIR`` set, write ``run-<run id>.json`` there (atomically) and export
   ``REPRO_RUN_ID`` and the absolute ``REPRO_RUN_DIR``, so that Python processes of the run add
   their framework records beside it;
4. print one summary line on stderr (``REPRO_QUIET=1`` silences it);
5. run the command, through the base image's own entrypoint when the build baked one
   (``REPROBUILD_BASE_ENTRYPOINT``): ``exec`` it, so signals reach the program directly and its
   status is the container's; as PID 1 (or with ``REPROBUILD_FORCE_INIT=1``, for tests) act as
   a minimal init instead (:mod:`~reprobuild_entrypoint.initproc`).

Exit statuses of its own: 2 for a bad setting or an unwritable run record, 127 when the command
is not found, 126 when it cannot be executed.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Mapping, Sequence
from pathlib import Path

from reprobuild_entrypoint import envplan, hostinfo, jsonfile, runrecord
from reprobuild_entrypoint.envplan import EnvPlan
from reprobuild_entrypoint.launch import exec_command, parse_base_entrypoint
from reprobuild_entrypoint.settings import Settings, SettingsError, resolve

USAGE_ERROR = 2


def _quiet(environ: Mapping[str, str]) -> bool:
    return environ.get("REPRO_QUIET", "") not in ("", "0")


def summary(settings: Settings, env_plan: EnvPlan, record: Path | None, init: bool = False) -> str:
    """The one line printed on stderr before the command starts."""
    if settings.mode == "off":
        parts = [f"mode off: determinism not configured, {len(env_plan.remove)} variables removed"]
    else:
        seed = f"seed {settings.seed}"
        if settings.rank is not None:
            seed += f" (rank {settings.rank}: seed {settings.rank_seed})"
        parts = [seed, f"mode {settings.mode}", f"threads {settings.threads}"]
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
        settings = resolve(environ)
        base = parse_base_entrypoint(environ.get("REPROBUILD_BASE_ENTRYPOINT"))
        run_dir_text = environ.get("REPRO_RUN_DIR", "").strip()
        run_id_text = environ.get("REPRO_RUN_ID", "").strip()
        run_id = (
            runrecord.check_run_id(run_id_text)
            if run_id_text
            else runrecord.new_run_id(started, os.urandom(4).hex())
        )
    except SettingsError as exc:
        sys.stderr.write(f"reprobuild: {exc}\n")
        return USAGE_ERROR
    env_plan = envplan.plan(environ, settings)
    command = [*(base or ()), *argv]
    init = os.getpid() == 1 or environ.get("REPROBUILD_FORCE_INIT") == "1"
    record_path: Path | None = None
    if run_dir_text:
        run_dir = Path(run_dir_text).absolute()
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
            manifest=runrecord.manifest_info(runrecord.default_manifest_path(environ)),
            host=runrecord.host_info(hostinfo.gpu_info()),
        )
        try:
            record_path = jsonfile.write_atomic(runrecord.run_record_path(run_dir, run_id), record)
        except OSError as exc:
            sys.stderr.write(
                f"reprobuild: cannot write the run record to REPRO_RUN_DIR={run_dir_text!r}: "
                f"{exc.strerror or exc}\n"
            )
            return USAGE_ERROR
        environ["REPRO_RUN_DIR"] = str(run_dir)
        environ["REPRO_RUN_ID"] = run_id
    envplan.apply(env_plan, environ)
    if not _quiet(environ):
        sys.stderr.write(summary(settings, env_plan, record_path, init) + "\n")
    sys.stderr.flush()
    if init:
        from reprobuild_entrypoint.initproc import supervise

        return supervise(command)
    return exec_command(command)


def entrypoint() -> None:
    sys.exit(main(sys.argv[1:]))


if __name__ == "__main__":
    entrypoint()
