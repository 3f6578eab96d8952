"""Runs at every interpreter start in the image venv, entrypoint or not.

The venv's site-packages holds a ``.pth`` file whose second line is
``import reprobuild_entrypoint._startup``, so this runs even when the ENTRYPOINT is bypassed
(``docker run --entrypoint python3``, a Kubernetes ``command:``). ``python -S`` (no site) is
the one way around it.

It must stay cheap: builtins, ``os`` and ``sys`` (already loaded), and four small modules of
this package. It imports no framework; it only watches for their import. What it does:

1. Resolves the settings (a bad ``REPRO_SEED``/``REPRO_DETERMINISM``/``REPRO_THREADS`` prints
   one line and exits with status 2, as the entrypoint does).
2. Applies the environment plan to ``os.environ`` (same rules as the entrypoint; a no-op when
   the entrypoint already did it). Thread and library variables are read when the libraries
   load, later than now, so they take effect; ``PYTHONHASHSEED`` was read before this ran, so
   a stale one only reaches child processes, and a one-line warning says so.
3. Unless the mode is ``off``: says in one line when the fixed thread count is above the
   CPUs this container can use (:mod:`~reprobuild_entrypoint.cpus`: affinity and cgroup
   quota), once per process tree: the first interpreter sets ``REPROBUILD_CPUS_CHECKED``,
   which its children inherit, so the entrypoint, the program and its workers do not repeat
   it. Then it seeds ``random`` (when it is imported: now, if it already is) and, through
   :mod:`~reprobuild_entrypoint.importhook`, configures numpy, torch, tensorflow and keras
   right after the program imports them (:mod:`~reprobuild_entrypoint.frameworks`).
   In every mode, ``off`` too, the same hook adds the stack to the program's Weights & Biases
   runs once it imports ``wandb`` (:mod:`~reprobuild_entrypoint.wandbrun`).
4. Under the entrypoint with ``REPRO_RUN_DIR`` set (``REPRO_RUN_ID`` present at start), writes
   ``run-<id>-frameworks-<host>-<pid>.json`` at exit: what was configured in this process and
   the versions seen. Only a process that configured a framework writes one, and never a
   forked or spawned child of it (DataLoader workers): the pid must be the one that started,
   and ``multiprocessing.parent_process()`` must be None.

An unexpected failure here stops the interpreter (status 1) in strict mode and is a one-line
warning otherwise.
"""

from __future__ import annotations

import os
import sys

from reprobuild_entrypoint.contract import MODE_VAR, RUN_DIR_VAR

FRAMEWORKS = ("numpy", "torch", "tensorflow", "keras", "tf_keras")
"""Top-level modules configured on import; the keys of ``frameworks.CONFIGURATORS``."""

CPUS_CHECKED = "REPROBUILD_CPUS_CHECKED"
"""Set by the first interpreter of a process tree that compared the thread count with the
CPUs (to the CPUs it found): children inherit it and neither look nor say it again."""

STATE: dict[str, object] = {}
"""What start-up resolved and did in this process (``framework_settings`` of the records)."""

TYPE_CHECKING = False
if TYPE_CHECKING:
    from reprobuild_entrypoint.settings import Settings

_settings: Settings | None = None


def _say(message: str) -> None:
    if os.environ.get("REPRO_QUIET", "") in ("", "0"):
        sys.stderr.write(f"reprobuild: {message}\n")
        sys.stderr.flush()


def _fatal(message: str, status: int) -> None:
    sys.stderr.write(f"reprobuild: {message}\n")
    sys.stderr.flush()
    os._exit(status)


def _seed_random(name: str, module: object) -> None:
    seed = STATE["rank_seed"]
    module.seed(seed)  # type: ignore[attr-defined]
    STATE["random_seeded"] = seed


def _configure(name: str, module: object) -> None:
    from reprobuild_entrypoint import frameworks

    if _settings is not None:
        frameworks.configure(name, module, _settings)  # type: ignore[arg-type]


def _wandb(name: str, module: object) -> None:
    """The stack in every W&B run (:mod:`~reprobuild_entrypoint.wandbrun`), in every mode: it
    never raises (a failure is one line), so a strict run is not stopped over its tracker."""
    try:
        from reprobuild_entrypoint import wandbrun
    except Exception as exc:
        sys.stderr.write(f"reprobuild: W&B: the stack is left out of its runs ({exc})\n")
        return
    wandbrun.install(module)


def _boot() -> None:
    global _settings
    from reprobuild_entrypoint import envplan, settings

    try:
        resolved = settings.from_environ(os.environ)
    except settings.SettingsError as exc:
        _fatal(str(exc), 2)
        return
    # The entrypoint's own interpreter leaves a strict refusal to the entrypoint, which writes
    # the run record (with the reason) before it refuses, in the same line and status.
    entrypoint = "reprobuild_entrypoint" in getattr(sys, "orig_argv", ())
    left_to_entrypoint = entrypoint and resolved.mode == "strict"
    if resolved.cpu != "native" and resolved.mode != "off" and not left_to_entrypoint:
        _check_cpu_level(resolved)
    _settings = resolved
    STATE.update(
        pid=os.getpid(),
        seed=resolved.seed,
        mode=resolved.mode,
        rank=resolved.rank,
        rank_seed=resolved.rank_seed,
        threads=resolved.threads,
        cpu=resolved.cpu,
        cpu_source=resolved.cpu_source,
    )
    started_hash_seed = os.environ.get("PYTHONHASHSEED")
    env_plan = envplan.plan(os.environ, resolved)
    changed = sorted(
        name for name, value in env_plan.set.items() if os.environ.get(name) != value
    ) + sorted(name for name in env_plan.remove if name in os.environ)
    envplan.apply(env_plan, os.environ)
    STATE["env_changed_at_startup"] = changed
    STATE["env_user_set"] = env_plan.user_set
    wanted_hash_seed = env_plan.set.get("PYTHONHASHSEED")
    if (
        wanted_hash_seed is not None
        and started_hash_seed != wanted_hash_seed
        and not sys.flags.ignore_environment  # -I/-E: the variable was not used anyway
        and "reprobuild_entrypoint" not in getattr(sys, "orig_argv", ())  # it fixes it for all
    ):
        STATE["pythonhashseed_in_effect"] = started_hash_seed
        started = (
            "without PYTHONHASHSEED"
            if started_hash_seed is None
            else f"with PYTHONHASHSEED={started_hash_seed}"
        )
        _say(
            f"this interpreter started {started}, not the run's {wanted_hash_seed} (it is read "
            f"before start-up code runs; child processes get {wanted_hash_seed}): start through "
            "the image ENTRYPOINT or set PYTHONHASHSEED too"
        )
    from reprobuild_entrypoint import importhook

    if resolved.mode == "off":
        importhook.install({"wandb": _wandb})
        return
    _check_cpus(resolved)
    callbacks = {
        "random": _seed_random,
        **dict.fromkeys(FRAMEWORKS, _configure),
        "wandb": _wandb,
    }
    importhook.install(callbacks)
    if os.environ.get(RUN_DIR_VAR) and os.environ.get("REPRO_RUN_ID"):
        import atexit

        atexit.register(_write_record)


def _check_cpu_level(resolved: Settings) -> None:
    """A portable run pinned above this CPU: strict stops here with one line (status 3), the
    libraries would die with SIGILL; warn says so and runs native."""
    from reprobuild_entrypoint import cpulevel

    refusal, found = cpulevel.resolve(resolved)
    if found is not None:
        STATE["cpu_found"] = {"level": found.get("level"), "source": found.get("source")}
    if refusal is None:
        return
    if resolved.mode == "strict":
        _fatal(refusal, 3)
    _say(f"{refusal}; running native (REPRO_DETERMINISM=warn)")
    cpulevel.fall_back(resolved, refusal)


def _check_cpus(resolved: Settings) -> None:
    if os.environ.get(CPUS_CHECKED):
        return
    from reprobuild_entrypoint import cpus

    found = cpus.available()
    os.environ[CPUS_CHECKED] = "unknown" if found is None else f"{found:g}"
    if found is not None and resolved.threads > found:
        _say(cpus.notice(resolved.threads, resolved.threads_source, found))


def _write_record() -> None:
    """atexit: write this process's framework settings next to the run record."""
    if os.getpid() != STATE.get("pid"):
        return
    frameworks = sys.modules.get("reprobuild_entrypoint.frameworks")
    if frameworks is None or not frameworks.RECORD:
        return
    mp_process = sys.modules.get("multiprocessing.process")
    if mp_process is not None and mp_process.parent_process() is not None:
        return
    try:
        from reprobuild_entrypoint import runrecord

        runrecord.write_framework_record(
            os.environ[RUN_DIR_VAR], os.environ["REPRO_RUN_ID"], STATE, frameworks
        )
    except Exception as exc:
        _say(f"could not write the framework record: {type(exc).__name__}: {exc}")


def _mode_guess() -> str:
    for name in (MODE_VAR, "REPROBUILD_IMAGE_DETERMINISM"):
        value = os.environ.get(name, "").strip().lower()
        if value:
            return value
    return "strict"


try:
    _boot()
except Exception as _exc:
    _message = f"start-up failed: {type(_exc).__name__}: {_exc}"
    if _mode_guess() == "strict":
        _fatal(f"{_message} (REPRO_DETERMINISM=warn goes on without determinism)", 1)
    elif _mode_guess() != "off":
        _say(f"{_message}; going on without determinism")
