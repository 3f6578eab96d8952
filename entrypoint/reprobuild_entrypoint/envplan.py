"""Which environment variables a run gets, and which it must lose. Pure: no I/O.

Layer 1 of determinism (docs/determinism.md): variables that libraries read when they load or
create their handles, so they must be in the environment before the program starts.

:func:`image_env` is what the build bakes as image ``ENV`` (the host-side renderer imports it),
so the guarantees hold even when the ENTRYPOINT is bypassed. :func:`plan` compares a process's
environment with that baked set and with what the run's own settings want:

- a variable whose value is absent, equal to the baked default, or equal to what the run wants
  is *ours*: it gets the run's value;
- any other value was put there by the user (``docker run -e``, a Kubernetes ``env:``), wins,
  and is recorded as user-set. A user who sets exactly the baked value is indistinguishable
  from the image; that value is then ours (and follows ``REPRO_SEED`` and friends);
- a baked variable that the run's mode does not want (``off`` wants none; ``warn`` drops the
  raising and TF32-override switches) is removed, unless the user set it.

The plan is idempotent: planning again on an environment it was applied to changes nothing.

Choices, with reasons:

- Thread count: one fixed number for OpenMP, MKL, OpenBLAS and TensorFlow, default
  :data:`~reprobuild_entrypoint.settings.DEFAULT_THREADS` = 4, overridable with
  ``REPRO_THREADS``. CPU reductions split work by thread count: the same count gives the same
  bits, a different one may not, so the default cannot follow the host's core count. 4 keeps
  most of the throughput of the CPU side of GPU training (data loading runs in worker processes
  anyway) and of small CPU jobs on common 4-16 core hosts; 1 would be the most portable but
  costs CPU-bound jobs up to the core count in speed; on a host with fewer than 4 cores, 4
  threads oversubscribe (slower, same bits). Raise it for CPU-bound training and keep it fixed
  across the runs you compare: the record carries it.
- ``MKL_CBWR=AUTO,STRICT``: oneMKL's conditional numerical reproducibility, strict variant;
  reproducible on one CPU type, without the large slowdown of ``COMPATIBLE`` (same bits across
  all x86 CPUs), which hardly matters when GPU kernels already tie results to one architecture.
- ``MKL_DYNAMIC=FALSE``, ``OMP_DYNAMIC=FALSE``: oneMKL's reproducibility conditions; with
  dynamic adjustment on (oneMKL's default) the library may use fewer threads than it was given,
  and a different split gives other bits. Measured for issue 14 (README): with it on, a torch
  CNN "at 4 threads" on 2 CPUs ran oneMKL at 2 and printed the 2-thread bits; held to 4 it
  printed the 4-thread bits and ran about 1.10x slower there (4 threads on 2 CPUs).
- ``TF_ENABLE_ONEDNN_OPTS``: ``1`` (TensorFlow's own default on x86) in strict mode, ``0``
  (Eigen's kernels) in warn mode. Measured for issue 14 (README, "Determinism on CPU by thread
  count"): under op determinism, oneDNN was bit-identical run to run at 4, 2 and 1 threads, and
  4 to 15 % faster than Eigen; oneDNN's documentation promises run-to-run identical results for
  most primitives in a fixed environment. Without op determinism (warn) that was not measured,
  so warn keeps the kernels TF's start-up message advises for exact results. The two choices
  give different bits from each other: compare runs of one mode.
- ``TF_DETERMINISTIC_OPS=1`` only in strict mode: in current TF it is not a legacy no-op but the
  same switch as ``tf.config.experimental.enable_op_determinism()``, which makes ops without a
  deterministic kernel raise. ``TF_CUDNN_DETERMINISTIC=1`` only picks deterministic cuDNN
  algorithms and never raises, so warn mode keeps it.
- ``NVIDIA_TF32_OVERRIDE=0`` only in strict mode (it overrides whatever the program asks for).
- GPU-only variables (cuBLAS, NCCL, TF32) are baked for the ``gpu`` variant only.
- ``cpu`` other than ``native`` (``REPRO_CPU``, issue 31): the pins of
  :data:`PINS` for its level, which replace ``MKL_CBWR`` with
  ``COMPATIBLE``; what has no variable (oneDNN and NNPACK in torch, MKL's float32 sqrt) is
  switched by the import hook (:mod:`~reprobuild_entrypoint.frameworks`).
- The machine (issue 53): ``portable`` is the baseline of the machine the image is for
  (``x86-64-v2`` on x86-64, ``armv8-a`` on aarch64), so :func:`image_env` and
  :func:`level_name` take it; the builder passes the image's target machine, the runtime its
  own (:func:`this_machine`). The default is x86-64, so an amd64 image bakes what it baked
  before.
"""

from __future__ import annotations

import os

from reprobuild_entrypoint.settings import (
    CPU_MODES,
    DEFAULT_CPU,
    DEFAULT_THREADS,
    MAX_THREADS,
    MODES,
    SEED_MAX,
    VARIANTS,
    Settings,
)

TYPE_CHECKING = False
if TYPE_CHECKING:
    from collections.abc import Mapping, MutableMapping

PORTABLE_LEVELS = ("x86-64-v2", "x86-64-v3")
"""x86-64 levels a portable run can pin to; ``portable`` means the first on x86-64
(:mod:`~reprobuild_entrypoint.cpulevel` reads the CPU's)."""

AARCH64_LEVELS = ("armv8-a",)
"""aarch64 levels a portable run can pin to; ``portable`` means the first on aarch64."""

DEFAULT_MACHINE = "x86_64"
_MACHINE_ALIASES = {"amd64": "x86_64", "x86-64": "x86_64", "arm64": "aarch64"}


def normal_machine(machine: str) -> str:
    """``uname -m`` spelling of a machine: ``amd64`` is ``x86_64``, ``arm64`` is ``aarch64``."""
    name = machine.lower()
    return _MACHINE_ALIASES.get(name, name)


def this_machine() -> str:
    """The machine this process runs on (:func:`normal_machine` of ``uname -m``). ``os.uname``
    rather than ``platform.machine()``, which is the same on Linux: the start-up hook imports
    this module, and ``platform`` would bring ``re`` and ``collections`` into every process."""
    return normal_machine(os.uname().machine)


PINS = {
    "x86-64-v2": {
        "ATEN_CPU_CAPABILITY": "default",
        "ONEDNN_MAX_CPU_ISA": "SSE41",
        "MKL_CBWR": "COMPATIBLE",
        "NPY_DISABLE_CPU_FEATURES": "X86_V3 X86_V4 AVX512_ICL AVX512_SPR",
        "OPENBLAS_CORETYPE": "Nehalem",
    },
    "x86-64-v3": {
        "ATEN_CPU_CAPABILITY": "avx2",
        "ONEDNN_MAX_CPU_ISA": "AVX2",
        "MKL_CBWR": "COMPATIBLE",
        "NPY_DISABLE_CPU_FEATURES": "X86_V4 AVX512_ICL AVX512_SPR",
        "OPENBLAS_CORETYPE": "Haswell",
    },
    "armv8-a": {
        "ATEN_CPU_CAPABILITY": "default",
        "ONEDNN_MAX_CPU_ISA": "ADVANCED_SIMD",
        "NPY_DISABLE_CPU_FEATURES": "ASIMDHP ASIMDDP ASIMDFHM SVE",
        "OPENBLAS_CORETYPE": "ARMV8",
    },
}
"""The environment a portable run gets at each level (issue 31, docs/determinism.md).
``MKL_CBWR=COMPATIBLE``: oneMKL on AMD refuses its AVX2 and SSE4_2 branches (``AVX2,STRICT``
silently runs as ``AUTO,STRICT``), so the one branch every CPU shares is the generic one.
``armv8-a`` (issue 53, docs/explanation/determinism.md "aarch64"): ATen without SVE256, oneDNN
at Advanced SIMD, NumPy without its four aarch64 dispatch targets (the names NumPy 2.4.6
lists; an unknown name is refused with a warning, a baseline one is an error), OpenBLAS's
generic ARMv8 kernels; there is no oneMKL on aarch64."""


def level_name(cpu: str, machine: str = DEFAULT_MACHINE) -> str | None:
    """The level a ``REPRO_CPU`` value pins to on ``machine``; None for ``native``.
    ``portable`` is the machine's baseline; a level is itself, whatever the machine
    (:func:`~reprobuild_entrypoint.cpulevel.check` refuses a level of another machine)."""
    if cpu == "native":
        return None
    if cpu != "portable":
        return cpu
    return AARCH64_LEVELS[0] if normal_machine(machine) == "aarch64" else PORTABLE_LEVELS[0]


THREAD_VARIABLES = (
    "OMP_NUM_THREADS",
    "MKL_NUM_THREADS",
    "OPENBLAS_NUM_THREADS",
    "TF_NUM_INTRAOP_THREADS",
    "TF_NUM_INTEROP_THREADS",
)


def image_env(
    seed: int,
    mode: str,
    variant: str,
    threads: int = DEFAULT_THREADS,
    cpu: str = DEFAULT_CPU,
    machine: str = DEFAULT_MACHINE,
) -> dict[str, str]:
    """The determinism variables for an image (or a run) with these settings on ``machine``
    (the image's target: ``portable`` pins that machine's baseline), sorted by name.

    Raises ValueError for a value outside the allowed ones.
    """
    if not 0 <= seed <= SEED_MAX:
        raise ValueError(f"seed {seed!r} is out of range: use 0 to {SEED_MAX}")
    if mode not in MODES:
        raise ValueError(f"determinism mode {mode!r} is not one of {', '.join(MODES)}")
    if variant not in VARIANTS:
        raise ValueError(f"variant {variant!r} is not one of {', '.join(VARIANTS)}")
    if not 1 <= threads <= MAX_THREADS:
        raise ValueError(f"thread count {threads!r} is out of range: use 1 to {MAX_THREADS}")
    if cpu not in CPU_MODES:
        raise ValueError(f"CPU mode {cpu!r} is not one of {', '.join(CPU_MODES)}")
    if mode == "off":
        return {}
    env = {
        "PYTHONHASHSEED": str(seed),
        "MKL_CBWR": "AUTO,STRICT",
        "MKL_DYNAMIC": "FALSE",
        "OMP_DYNAMIC": "FALSE",
        "TF_ENABLE_ONEDNN_OPTS": "1" if mode == "strict" else "0",
        # Inductor's deterministic mode (no autotuning), read when torch._inductor loads: what
        # torch.use_deterministic_algorithms sets, without importing Inductor at start-up.
        "TORCHINDUCTOR_DETERMINISTIC": "1",
    }
    env.update(dict.fromkeys(THREAD_VARIABLES, str(threads)))
    if mode == "strict":
        env["TF_DETERMINISTIC_OPS"] = "1"
    level = level_name(cpu, machine)
    if level is not None:
        env.update(PINS[level])
    if variant == "gpu":
        env["CUBLAS_WORKSPACE_CONFIG"] = ":4096:8"
        env["TORCH_ALLOW_TF32_CUBLAS_OVERRIDE"] = "0"
        env["TF_CUDNN_DETERMINISTIC"] = "1"
        env["NCCL_ALGO"] = "Ring"
        env["NCCL_NVLS_ENABLE"] = "0"
        if mode == "strict":
            env["NVIDIA_TF32_OVERRIDE"] = "0"
    return dict(sorted(env.items()))


def baked_env(settings: Settings) -> dict[str, str]:
    """What the image's build baked, judged from the image's own settings; the image is for
    the machine it runs on."""
    return image_env(
        settings.image_seed,
        settings.image_mode,
        settings.variant,
        cpu=settings.image_cpu,
        machine=this_machine(),
    )


WAIT_POLICY = {"OMP_WAIT_POLICY": "PASSIVE"}
"""Set at run time (not baked) in strict and warn: an OpenMP thread that waits for work sleeps
instead of spinning. It changes no bits (the work is split by the thread count alone), and on a
machine with fewer free CPUs than threads a spinning thread takes the CPU its peers need:
issue 31 measured a small-tensor float64 LBFGS program at 4 threads on 2 CPUs
(docs/benchmarks.md, "Threads on a small machine"). Set it yourself (``ACTIVE``, or empty
for the library's default) to have it kept."""


def wanted_env(settings: Settings) -> dict[str, str]:
    """What this run wants: its own seed, mode and thread count, and :data:`WAIT_POLICY`."""
    env = image_env(
        settings.seed,
        settings.mode,
        settings.variant,
        settings.threads,
        settings.cpu,
        machine=this_machine(),
    )
    if settings.mode != "off":
        env.update(WAIT_POLICY)
    return env


class EnvPlan:
    """``set``: ours, with the run's values; ``user_set``: the user's, kept as they are;
    ``remove``: baked variables this run's mode does not want."""

    __slots__ = ("remove", "set", "user_set")

    def __init__(
        self, set: dict[str, str], user_set: dict[str, str], remove: tuple[str, ...]
    ) -> None:
        self.set = set
        self.user_set = user_set
        self.remove = remove

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, EnvPlan):
            return NotImplemented
        return (self.set, self.user_set, self.remove) == (other.set, other.user_set, other.remove)

    __hash__ = None  # type: ignore[assignment]

    def __repr__(self) -> str:
        return f"EnvPlan(set={self.set!r}, user_set={self.user_set!r}, remove={self.remove!r})"


def plan(environ: Mapping[str, str], settings: Settings) -> EnvPlan:
    """Compare ``environ`` with the baked and the wanted variables; see the module docstring."""
    baked = baked_env(settings)
    wanted = wanted_env(settings)
    to_set: dict[str, str] = {}
    user_set: dict[str, str] = {}
    remove: list[str] = []
    for name in sorted(baked.keys() | wanted.keys()):
        value = environ.get(name)
        if value is not None and value != baked.get(name) and value != wanted.get(name):
            user_set[name] = value
        elif name in wanted:
            to_set[name] = wanted[name]
        else:
            remove.append(name)
    return EnvPlan(to_set, user_set, tuple(remove))


def apply(env_plan: EnvPlan, environ: MutableMapping[str, str]) -> None:
    """Set ours and drop the unwanted; user-set variables are left alone."""
    for name, value in env_plan.set.items():
        if environ.get(name) != value:
            environ[name] = value
    for name in env_plan.remove:
        environ.pop(name, None)
