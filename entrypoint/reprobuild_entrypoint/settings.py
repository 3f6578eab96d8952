"""Resolve a run's determinism settings from an environment mapping. Pure: no I/O.

Precedence, per setting:

- seed: ``REPRO_SEED`` (run time) > ``REPROBUILD_IMAGE_SEED`` (baked by the build) > 0
- mode: ``REPRO_DETERMINISM`` > ``REPROBUILD_IMAGE_DETERMINISM`` > ``strict``
- threads: ``REPRO_THREADS`` > :data:`DEFAULT_THREADS`
- cpu: ``REPRO_CPU`` (``native``, ``portable`` or a level, ``x86-64-v2``/``x86-64-v3``/
  ``armv8-a``) >
  ``REPROBUILD_IMAGE_CPU`` (baked from ``cpu:`` in reprobuild.yaml) > ``native``
  (:mod:`~reprobuild_entrypoint.cpulevel` says what a portable run pins)
- trial: ``REPRO_TRIAL=k`` makes the seed above the experiment seed and derives the run seed
  from both (:mod:`~reprobuild_entrypoint.trials`)

An empty value counts as unset (``docker run -e REPRO_SEED=`` passes one). Any other value
that does not parse is a :class:`SettingsError`, never a silent fallback: a run that asked for
seed 42 must not quietly run with seed 0.

Per-rank seeds. A distributed launcher (torchrun, the Kubeflow PyTorchJob) sets ``RANK``,
``LOCAL_RANK`` and ``WORLD_SIZE`` per process. Each rank seeds its RNGs with
``rank_seed = (seed + rank) mod 2**32``: rank 0 (and so every single-process run) uses the seed
itself, every rank in a run gets a distinct stream, and the value can be worked out by hand from
the record. It is the scheme Hugging Face accelerate uses. The cost: runs with seeds ``s`` and
``s + 1`` share streams shifted by one rank, so space the seeds of independent runs at least
``WORLD_SIZE`` apart. ``PYTHONHASHSEED`` is the run seed on every rank (not the rank seed), so
that set and dict iteration order, and so anything built from it, is the same on all ranks.
Those three variables belong to the launcher, not to us: a value that is not a non-negative
integer is ignored (rank 0) rather than fatal.

Import cost matters: this module is imported at every interpreter start (see ``_startup``), so
it uses builtins only (no ``dataclasses``, no ``typing`` at run time).
"""

from __future__ import annotations

from reprobuild_entrypoint.contract import MODE_VAR, SEED_VAR, TRIAL_VAR

TYPE_CHECKING = False
if TYPE_CHECKING:
    from collections.abc import Mapping

SEED_MAX = 2**32 - 1
MODES = ("strict", "warn", "off")
CPU_MODES = ("native", "portable", "x86-64-v2", "x86-64-v3", "armv8-a")
"""``REPRO_CPU``: ``portable`` is ``x86-64-v2`` on x86-64 and ``armv8-a`` on aarch64; the
levels are the keys of ``envplan.PINS``."""
DEFAULT_CPU = "native"
VARIANTS = ("cpu", "gpu")
DEFAULT_MODE = "strict"
DEFAULT_VARIANT = "cpu"
DEFAULT_THREADS = 4
MAX_THREADS = 1024
RANK_SEED_SCHEME = "(seed + rank) mod 2**32"


class SettingsError(ValueError):
    """A setting has a value we refuse; the message names it and lists what is allowed."""


class Settings:
    """The resolved settings of one run (or one rank of it)."""

    __slots__ = (
        "cpu",
        "cpu_source",
        "experiment_seed",
        "image_cpu",
        "image_mode",
        "image_seed",
        "local_rank",
        "mode",
        "mode_source",
        "rank",
        "seed",
        "seed_source",
        "threads",
        "threads_source",
        "trial",
        "variant",
        "world_size",
    )

    def __init__(
        self,
        *,
        seed: int = 0,
        seed_source: str = "default",
        mode: str = DEFAULT_MODE,
        mode_source: str = "default",
        image_seed: int = 0,
        image_mode: str = DEFAULT_MODE,
        variant: str = DEFAULT_VARIANT,
        threads: int = DEFAULT_THREADS,
        threads_source: str = "default",
        rank: int | None = None,
        local_rank: int | None = None,
        world_size: int | None = None,
        experiment_seed: int | None = None,
        trial: int | None = None,
        cpu: str = DEFAULT_CPU,
        cpu_source: str = "default",
        image_cpu: str = DEFAULT_CPU,
    ) -> None:
        self.seed = seed
        self.seed_source = seed_source
        self.mode = mode
        self.mode_source = mode_source
        self.image_seed = image_seed
        self.image_mode = image_mode
        self.variant = variant
        self.threads = threads
        self.threads_source = threads_source
        self.rank = rank
        self.local_rank = local_rank
        self.world_size = world_size
        self.experiment_seed = experiment_seed
        self.trial = trial
        self.cpu = cpu
        self.cpu_source = cpu_source
        self.image_cpu = image_cpu

    @property
    def rank_seed(self) -> int:
        """The seed this process gives its RNGs: the run seed on rank 0 or without a rank."""
        return rank_seed(self.seed, self.rank or 0)

    def as_dict(self) -> dict[str, object]:
        out: dict[str, object] = {name: getattr(self, name) for name in self.__slots__}
        out["rank_seed"] = self.rank_seed
        return out

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, Settings):
            return NotImplemented
        return self.as_dict() == other.as_dict()

    def __hash__(self) -> int:
        return hash(tuple(sorted(self.as_dict().items())))

    def __repr__(self) -> str:
        fields = ", ".join(f"{k}={v!r}" for k, v in self.as_dict().items())
        return f"Settings({fields})"


def rank_seed(seed: int, rank: int) -> int:
    """``(seed + rank) mod 2**32``; see the module docstring for why."""
    return (seed + rank) % (SEED_MAX + 1)


def _value(environ: Mapping[str, str], name: str) -> str | None:
    value = environ.get(name)
    if value is None or not value.strip():
        return None
    return value.strip()


def _whole_number(text: str) -> int | None:
    # str.isdigit() accepts superscripts and other scripts' digits; int() accepts "+1", "1_0".
    if not text or not all("0" <= ch <= "9" for ch in text):
        return None
    return int(text)


def parse_seed(name: str, text: str) -> int:
    number = _whole_number(text)
    if number is None or number > SEED_MAX:
        raise SettingsError(
            f"{name}={text!r} is not a valid seed: use a whole number from 0 to {SEED_MAX}"
        )
    return number


def parse_mode(name: str, text: str) -> str:
    mode = text.lower()
    if mode not in MODES:
        raise SettingsError(
            f"{name}={text!r} is not a determinism mode: use one of {', '.join(MODES)}"
        )
    return mode


def parse_threads(name: str, text: str) -> int:
    number = _whole_number(text)
    if number is None or not 1 <= number <= MAX_THREADS:
        raise SettingsError(
            f"{name}={text!r} is not a thread count: use a whole number from 1 to {MAX_THREADS}"
        )
    return number


def parse_cpu(name: str, text: str) -> str:
    cpu = text.lower()
    if cpu not in CPU_MODES:
        raise SettingsError(f"{name}={text!r} is not a CPU mode: use one of {', '.join(CPU_MODES)}")
    return cpu


def parse_variant(name: str, text: str) -> str:
    variant = text.lower()
    if variant not in VARIANTS:
        raise SettingsError(f"{name}={text!r} is not a variant: use one of {', '.join(VARIANTS)}")
    return variant


def _launcher_int(environ: Mapping[str, str], name: str) -> int | None:
    text = _value(environ, name)
    return None if text is None else _whole_number(text)


def from_environ(environ: Mapping[str, str]) -> Settings:
    """Settings for this process from ``environ``; raises :class:`SettingsError`."""
    image_seed_text = _value(environ, "REPROBUILD_IMAGE_SEED")
    image_seed = (
        0 if image_seed_text is None else parse_seed("REPROBUILD_IMAGE_SEED", image_seed_text)
    )
    image_mode_text = _value(environ, "REPROBUILD_IMAGE_DETERMINISM")
    image_mode = (
        DEFAULT_MODE
        if image_mode_text is None
        else parse_mode("REPROBUILD_IMAGE_DETERMINISM", image_mode_text)
    )
    variant_text = _value(environ, "REPROBUILD_VARIANT")
    variant = (
        DEFAULT_VARIANT
        if variant_text is None
        else parse_variant("REPROBUILD_VARIANT", variant_text)
    )

    seed_text = _value(environ, SEED_VAR)
    if seed_text is not None:
        seed, seed_source = parse_seed(SEED_VAR, seed_text), SEED_VAR
    elif image_seed_text is not None:
        seed, seed_source = image_seed, "REPROBUILD_IMAGE_SEED"
    else:
        seed, seed_source = 0, "default"

    experiment_seed = trial = None
    trial_text = _value(environ, TRIAL_VAR)
    if trial_text is not None:
        trial = _whole_number(trial_text)
        if trial is None or trial > SEED_MAX:
            raise SettingsError(
                f"REPRO_TRIAL={trial_text!r} is not a trial number: use a whole number from 0 "
                f"to {SEED_MAX}"
            )
        from reprobuild_entrypoint.trials import trial_seed

        experiment_seed, seed = seed, trial_seed(seed, trial)
        seed_source = f"REPRO_TRIAL of {seed_source}"

    mode_text = _value(environ, MODE_VAR)
    if mode_text is not None:
        mode, mode_source = parse_mode(MODE_VAR, mode_text), MODE_VAR
    elif image_mode_text is not None:
        mode, mode_source = image_mode, "REPROBUILD_IMAGE_DETERMINISM"
    else:
        mode, mode_source = DEFAULT_MODE, "default"

    threads_text = _value(environ, "REPRO_THREADS")
    if threads_text is not None:
        threads, threads_source = parse_threads("REPRO_THREADS", threads_text), "REPRO_THREADS"
    else:
        threads, threads_source = DEFAULT_THREADS, "default"

    image_cpu_text = _value(environ, "REPROBUILD_IMAGE_CPU")
    image_cpu = (
        DEFAULT_CPU if image_cpu_text is None else parse_cpu("REPROBUILD_IMAGE_CPU", image_cpu_text)
    )
    cpu_text = _value(environ, "REPRO_CPU")
    if cpu_text is not None:
        cpu, cpu_source = parse_cpu("REPRO_CPU", cpu_text), "REPRO_CPU"
    elif image_cpu_text is not None:
        cpu, cpu_source = image_cpu, "REPROBUILD_IMAGE_CPU"
    else:
        cpu, cpu_source = DEFAULT_CPU, "default"

    return Settings(
        seed=seed,
        seed_source=seed_source,
        mode=mode,
        mode_source=mode_source,
        image_seed=image_seed,
        image_mode=image_mode,
        variant=variant,
        threads=threads,
        threads_source=threads_source,
        rank=_launcher_int(environ, "RANK"),
        local_rank=_launcher_int(environ, "LOCAL_RANK"),
        world_size=_launcher_int(environ, "WORLD_SIZE"),
        experiment_seed=experiment_seed,
        trial=trial,
        cpu=cpu,
        cpu_source=cpu_source,
        image_cpu=image_cpu,
    )
