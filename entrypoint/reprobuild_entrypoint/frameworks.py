"""Layer 2 of determinism: configure a framework right after the program imported it.

Called by the import hook that ``_startup`` installs; never imports a framework the program did
not import (keras is seeded without importing tensorflow when tensorflow is not loaded).
Everything done is recorded in :data:`RECORD` (``framework_settings`` of the run record).

Error policy: in strict mode a failure raises :class:`DeterminismError` out of the program's
``import`` statement; in warn mode it prints one line on stderr and the program goes on.

PyTorch DataLoader workers need nothing here: each iterator draws its base seed from the
global torch RNG (seeded below), and every worker seeds ``random``, torch and NumPy's legacy
global RNG from it (``_worker_loop`` in torch/utils/data/_utils/worker.py, checked on 2.13;
tests/unit/test_runtime_frameworks.py proves it with NumPy augmentation in two workers).
"""

from __future__ import annotations

import importlib
import os
import sys
import warnings
from types import ModuleType
from typing import Any

from reprobuild_entrypoint import distinfo, envplan
from reprobuild_entrypoint.settings import Settings

RECORD: dict[str, dict[str, Any]] = {}
"""framework name -> what was configured and the version seen (and ``"error"`` on failure)."""

ERRORS: list[str] = []
"""One line per framework that could not be configured (warn mode goes on after them)."""

DEFAULT_RNG: dict[str, Any] = {"calls": 0, "generators": []}
"""State of the unseeded ``np.random.default_rng()`` replacement, for
:mod:`~reprobuild_entrypoint.rngstate`: the call counter, and the first
:data:`KEPT_GENERATORS` Generators it made (NumPy Generators take no weak references, so
they are held; later ones are reproducible from the counter but their states are not kept)."""
KEPT_GENERATORS = 64


class DeterminismError(RuntimeError):
    """Strict mode could not put a framework into deterministic mode."""


def _quiet() -> bool:
    return os.environ.get("REPRO_QUIET", "") not in ("", "0")


def _say(message: str) -> None:
    if not _quiet():
        sys.stderr.write(f"reprobuild: {message}\n")
        sys.stderr.flush()


def configure(name: str, module: ModuleType, settings: Settings) -> None:
    """Configure ``module`` (imported as ``name``) under ``settings``; see the error policy."""
    configurator = CONFIGURATORS.get(name)
    if configurator is None:
        return
    entry: dict[str, Any] = {"version": getattr(module, "__version__", None)}
    RECORD[name] = entry
    try:
        configurator(module, settings, entry)
    except Exception as exc:
        message = f"could not configure {name} for determinism: {type(exc).__name__}: {exc}"
        entry["error"] = message
        ERRORS.append(message)
        if settings.mode == "strict":
            raise DeterminismError(
                f"reprobuild: {message} (REPRO_DETERMINISM=warn runs without it)"
            ) from exc
        _say(f"{message}; going on without it (REPRO_DETERMINISM=warn)")


# ---------------------------------------------------------------------------------- numpy


def configure_numpy(np: ModuleType, settings: Settings, entry: dict[str, Any]) -> None:
    seed = settings.rank_seed
    np.random.seed(seed)
    entry["legacy_seed"] = seed
    entry["default_rng_unseeded"] = _derive_unseeded_default_rng(np)


def _derive_unseeded_default_rng(np: ModuleType) -> str:
    """Make ``np.random.default_rng()`` (no seed) reproducible.

    Unseeded it draws OS entropy. The replacement derives its seed from the legacy global RNG's
    state (seeded above, and re-seeded per DataLoader worker by torch) and a per-process call
    counter, without consuming that state: reproducible, and distinct per call and per worker.
    Explicit seeds pass through untouched.
    """
    random_mod = getattr(np, "random", None)
    original = getattr(random_mod, "default_rng", None)
    if original is None or getattr(original, "__reprobuild__", False):
        return "unchanged"
    import hashlib

    state = DEFAULT_RNG

    def default_rng(seed: Any = None) -> Any:
        if seed is None:
            _, keys, pos, *_ = np.random.get_state(legacy=True)
            digest = hashlib.blake2b(digest_size=16)
            digest.update(keys.tobytes())
            digest.update(f"{pos}:{state['calls']}".encode())
            state["calls"] += 1
            seed = np.random.SeedSequence(int.from_bytes(digest.digest(), "little"))
            generator = original(seed)
            if len(state["generators"]) < KEPT_GENERATORS:
                state["generators"].append(generator)
            return generator
        return original(seed)

    default_rng.__doc__ = original.__doc__
    default_rng.__wrapped__ = original  # type: ignore[attr-defined]
    default_rng.__reprobuild__ = True  # type: ignore[attr-defined]
    random_mod.default_rng = default_rng  # type: ignore[union-attr]
    return "derived from the legacy global RNG state"


# ---------------------------------------------------------------------------------- torch


def configure_torch(torch: ModuleType, settings: Settings, entry: dict[str, Any]) -> None:
    seed = settings.rank_seed
    warn_only = settings.mode == "warn"
    torch.manual_seed(seed)  # seeds every CUDA device too, lazily (no CUDA initialisation)
    entry["deterministic_via"] = _torch_deterministic(torch, warn_only)
    cudnn = torch.backends.cudnn
    cudnn.benchmark = False
    cudnn.deterministic = True
    entry["cudnn_benchmark_held"] = _hold_cudnn_benchmark_off(torch, entry)
    entry.update(
        seed=seed,
        deterministic_algorithms=bool(torch.are_deterministic_algorithms_enabled()),
        warn_only=warn_only,
        cudnn_benchmark=bool(cudnn.benchmark),
        cudnn_deterministic=bool(cudnn.deterministic),
        cuda=getattr(getattr(torch, "version", None), "cuda", None),
    )
    entry["tf32"] = _torch_tf32_off(torch)
    utils_det = getattr(getattr(torch, "utils", None), "deterministic", None)
    if utils_det is not None and hasattr(utils_det, "fill_uninitialized_memory"):
        entry["fill_uninitialized_memory"] = bool(utils_det.fill_uninitialized_memory)
    entry["onemkl_vml"] = _settle_vml(torch)
    threads, source = _torch_threads(settings)
    torch.set_num_threads(threads)
    entry["num_threads_set"] = threads
    entry["num_threads_source"] = source
    entry["num_threads"] = torch.get_num_threads()
    entry["num_interop_threads"] = torch.get_num_interop_threads()
    level = envplan.level_name(settings.cpu, envplan.this_machine())
    if level is not None:
        entry["portable"] = _torch_portable(torch, level)
    launched = distinfo.under_launcher(os.environ)
    if launched:
        entry["watch_init_process_group"] = distinfo.watch_init_process_group(torch)
    if settings.mode == "strict" or launched:
        from reprobuild_entrypoint import excepthook

        excepthook.install(launched=launched)


def _hold_cudnn_benchmark_off(torch: ModuleType, entry: dict[str, Any]) -> str:
    """Keep ``torch.backends.cudnn.benchmark`` off when the program turns it on after import.

    ``cudnn.benchmark = True`` is a line in many training scripts. With it, cuDNN times its
    candidate algorithms in each process and keeps the fastest; with ``deterministic = True``
    too it picks among the deterministic ones, which still differ from each other in their
    bits. Measured on one H200 (``scripts/gpu-proof``, 2026-11-29, torch 2.11.0+cu130, cuDNN
    9.19): the small CNN that sets it gave two runs under the runtime 1 float32 ulp apart at
    step 3; with the switch held off, identical. Nothing else keeps it off: unlike TF32
    (``NVIDIA_TF32_OVERRIDE``) it has no environment variable.

    Both ways in are held: the ``cudnn.benchmark`` attribute (its setter was captured from
    ``torch._C`` when torch defined the module) and ``torch._C._set_cudnn_benchmark``, which
    ``cudnn.flags(benchmark=True)`` and ``set_flags`` call. The first refusal prints one line;
    ``entry`` (the run record's torch settings) counts them: ``cudnn_benchmark_refused``.
    ``REPRO_DETERMINISM=off`` leaves the switch to the program.
    """
    core = getattr(torch, "_C", None)
    original = getattr(core, "_set_cudnn_benchmark", None)
    if original is None:
        return "not held (this torch has no _set_cudnn_benchmark)"
    if getattr(original, "__reprobuild__", False):
        return "held off"
    entry["cudnn_benchmark_refused"] = 0

    def _set_cudnn_benchmark(value: Any) -> Any:
        if value:
            entry["cudnn_benchmark_refused"] += 1
            if entry["cudnn_benchmark_refused"] == 1:
                _say(
                    "cudnn.benchmark = True is held off: cuDNN would pick its algorithms by "
                    "timing them, and runs would differ in their bits "
                    "(REPRO_DETERMINISM=off allows it)"
                )
            value = False
        return original(value)

    _set_cudnn_benchmark.__doc__ = original.__doc__
    _set_cudnn_benchmark.__wrapped__ = original  # type: ignore[attr-defined]
    _set_cudnn_benchmark.__reprobuild__ = True  # type: ignore[attr-defined]
    setattr(core, "_set_cudnn_benchmark", _set_cudnn_benchmark)  # noqa: B010
    prop = type(torch.backends.cudnn).__dict__.get("benchmark")
    if getattr(prop, "setter", None) is original:
        prop.setter = _set_cudnn_benchmark  # type: ignore[union-attr]
    elif prop is not None:
        return "held through torch._C only (cudnn.benchmark has no setter of torch's kind)"
    return "held off"


def _settle_vml(torch: ModuleType) -> str:
    """One call into oneMKL's vector math (VML) on this thread, before any parallel one.

    Measured (torch 2.13.0+cpu with its oneMKL, Intel Xeon; issue 31): a process's first
    *parallel* VML call gave other bits in one of its chunks in some fresh processes, every
    later call the same bits. ``torch.sin`` of 2,400 float64 values, which ATen splits into
    2,048-value chunks on two threads: 6 of 30 processes at 2 threads, 2 of 40 at 4 (8,208
    values); ``torch.sin``, ``exp``, ``tanh``... all go to VML, so the first large one in a
    program, model or data, could make a run differ from the next. After one small call of any
    VML function first (16 values: below ATen's grain, so on the calling thread; ``cos`` or a
    float32 ``sin`` did as well as a float64 ``sin``): none of 40 processes differed, each
    way. oneMKL's one-time set-up races when two threads enter VML at once. A first parallel
    matrix product or dot product showed no such race (30 processes)."""
    backend = getattr(getattr(torch, "backends", None), "mkl", None)
    if backend is None or not backend.is_available():
        return "not used (torch without oneMKL)"
    for dtype in (torch.float32, torch.float64):
        torch.sin(torch.zeros(16, dtype=dtype))
    return "set up on the main thread before any parallel call"


def _torch_deterministic(torch: ModuleType, warn_only: bool) -> str:
    """Deterministic algorithms on, without making ``import torch`` twice as slow.

    ``torch.use_deterministic_algorithms`` is two steps: set the flag in the C++ core, and
    ``import torch._inductor.config`` to set ``deterministic`` there. That import pulls in
    Inductor and Dynamo (1.6 s measured in torch 2.13, doubling ``import torch``) for programs
    that never compile. Inductor's config reads ``TORCHINDUCTOR_DETERMINISTIC`` (baked by
    envplan) when it loads, so while Inductor is not loaded the core flag alone is the same end
    state. Otherwise (Inductor already loaded, or no such setter) the public call is used.
    """
    setter = getattr(getattr(torch, "_C", None), "_set_deterministic_algorithms", None)
    lazy = (
        "torch._inductor.config" not in sys.modules
        and os.environ.get("TORCHINDUCTOR_DETERMINISTIC") == "1"
    )
    if lazy and setter is not None:
        setter(True, warn_only=warn_only)
        return "core flag; Inductor reads TORCHINDUCTOR_DETERMINISTIC=1 when it loads"
    torch.use_deterministic_algorithms(True, warn_only=warn_only)
    return "torch.use_deterministic_algorithms"


def _torch_portable(torch: ModuleType, level: str) -> dict[str, Any]:
    """A portable run (``REPRO_CPU``): what has no environment variable.

    - oneDNN off in torch at ``x86-64-v2`` (the prototype of issue 31 that gave one result on
      four CPUs); at ``x86-64-v3`` it stays on, capped at AVX2 by ``ONEDNN_MAX_CPU_ISA``.
      Off at ``armv8-a`` too: torch's aarch64 wheel carries the Arm Compute Library beside
      oneDNN, which has no variable of its own, and whether ``ONEDNN_MAX_CPU_ISA`` holds it
      was not measured (docs/explanation/determinism.md, "aarch64").
    - NNPACK off: it serves convolutions on AVX2 CPUs only (when oneDNN is off), so the same
      program would take other kernels on other CPUs.
    - float32 ``sqrt`` exact (:func:`_exact_sqrt`): oneMKL's vector math (VML), behind
      ``torch.sqrt`` on CPU, approximates it with ``rsqrtps``, whose bits depend on the chip.
    """
    out: dict[str, Any] = {"level": level}
    mkldnn = torch.backends.mkldnn
    if level in ("x86-64-v2", "armv8-a"):
        mkldnn.enabled = False
    out["mkldnn_enabled"] = bool(mkldnn.enabled)
    nnpack = getattr(torch.backends, "nnpack", None)
    if nnpack is not None and hasattr(nnpack, "set_flags"):
        nnpack.set_flags(False)
        out["nnpack_enabled"] = bool(torch._C._get_nnpack_enabled())
    out["sqrt"] = _exact_sqrt(torch)
    return out


_SQRT_NOTE = "float32 CPU sqrt correctly rounded (IEEE through NumPy, or float64): not oneMKL VML"


def _exact_sqrt(torch: ModuleType) -> str:
    """Route float32 CPU ``sqrt`` around oneMKL's VML, which rounds by a chip-dependent
    ``rsqrtps`` approximation (measured: 15.6 % of 10**6 float32 values not correctly rounded
    on an AMD EPYC, at every ``ATEN_CPU_CAPABILITY``, also with ``MKL_CBWR=COMPATIBLE``;
    ``pow(x, 0.5)`` and ``_foreach_sqrt`` go the same way).

    The replacement gives the correctly rounded square root, which is the same bits on every
    CPU, one of two ways:

    - where no gradient is wanted (an optimizer step runs under ``no_grad``), NumPy's
      ``np.sqrt`` on the tensor's memory: IEEE ``sqrtps``/``sqrtss``, correctly rounded at every
      SIMD level, in one pass (no copy of the input);
    - where autograd records the op, or under ``torch.compile``, or without NumPy, the square
      root in float64 rounded to float32. That is the correctly rounded float32 root whatever
      float64 sqrt is used, as long as that one is within 4 float64 ulps: the exact root of a
      float32 is never closer than 2**-50 (relative) to a float32 rounding midpoint, and VML's
      float64 sqrt (HA mode) is within 1 ulp. Autograd sees float64 ops, so gradients through
      it are exact too. It costs about 3x the float32 sqrt itself.

    Both give the same bits (0 of 1.2 * 10**6 values, normal, subnormal, huge, 0, -0, inf,
    differ from NumPy's). Patched, as the program sees them: ``torch.sqrt``, ``Tensor.sqrt``,
    ``Tensor.sqrt_`` and ``torch._foreach_sqrt(_)`` (default Adam, AdamW, Adagrad, RMSprop);
    other dtypes, other devices and ``pow(x, 0.5)`` pass through unchanged.
    """
    if getattr(torch.sqrt, "__reprobuild__", False):
        return _SQRT_NOTE
    float32 = torch.float32
    tensor_cls = torch.Tensor
    original_sqrt = torch.sqrt
    original_method = tensor_cls.sqrt
    original_inplace = tensor_cls.sqrt_
    original_foreach = torch._foreach_sqrt
    original_foreach_inplace = torch._foreach_sqrt_
    _ieee = _correctly_rounded_sqrt(torch, original_sqrt)

    def _ours(tensor: Any) -> bool:
        return (
            isinstance(tensor, tensor_cls)
            and tensor.dtype == float32
            and tensor.device.type == "cpu"
        )

    def sqrt(input: Any, *args: Any, out: Any = None, **kwargs: Any) -> Any:
        if args or kwargs or not _ours(input):
            if out is not None:
                kwargs["out"] = out
            return original_sqrt(input, *args, **kwargs)
        result = _ieee(input)
        if out is None:
            return result
        out.resize_(result.shape)
        out.copy_(result)
        return out

    def method(self: Any) -> Any:
        if not _ours(self):
            return original_method(self)
        return _ieee(self)

    def inplace(self: Any) -> Any:
        if not _ours(self):
            return original_inplace(self)
        return self.copy_(_ieee(self))  # copy_: autograd and the version counter see the write

    def foreach(tensors: Any) -> Any:
        tensors = list(tensors)
        if not all(_ours(t) for t in tensors):
            return original_foreach(tensors)
        return [_ieee(t) for t in tensors]

    def foreach_inplace(tensors: Any) -> None:
        tensors = list(tensors)
        if not all(_ours(t) for t in tensors):
            original_foreach_inplace(tensors)
            return
        for t in tensors:
            t.copy_(_ieee(t))

    replacements: tuple[tuple[Any, Any], ...] = (
        (sqrt, original_sqrt),
        (method, original_method),
        (inplace, original_inplace),
        (foreach, original_foreach),
        (foreach_inplace, original_foreach_inplace),
    )
    for replacement, original in replacements:
        replacement.__doc__ = original.__doc__
        replacement.__wrapped__ = original
        replacement.__reprobuild__ = True
    setattr(torch, "sqrt", sqrt)  # noqa: B010  (mypy: torch is a ModuleType here)
    tensor_cls.sqrt = method
    tensor_cls.sqrt_ = inplace
    setattr(torch, "_foreach_sqrt", foreach)  # noqa: B010
    setattr(torch, "_foreach_sqrt_", foreach_inplace)  # noqa: B010
    return _SQRT_NOTE


def _correctly_rounded_sqrt(torch: ModuleType, original_sqrt: Any) -> Any:
    """``root(tensor)``: the correctly rounded square root of a float32 CPU tensor, as a new
    tensor shaped and strided like it (see :func:`_exact_sqrt` for the two ways)."""
    float32, float64 = torch.float32, torch.float64
    plain = (torch.Tensor, torch.nn.Parameter)
    compiler = getattr(torch, "compiler", None)
    compiling = getattr(compiler, "is_compiling", None) or (lambda: False)
    numpy: list[Any] = []  # [numpy module or None], filled on first use

    def through_numpy(tensor: Any) -> Any:
        if not numpy:
            try:
                numpy.append(importlib.import_module("numpy"))
            except ImportError:
                numpy.append(None)
        np = numpy[0]
        if np is None:
            return None
        try:
            source = tensor.detach().numpy()
            result = torch.empty_like(tensor, requires_grad=False)
            with np.errstate(invalid="ignore"):  # sqrt(-1) is NaN, silently, as in torch
                np.sqrt(source, out=result.numpy())
        except (RuntimeError, TypeError, ValueError):
            return None  # a view NumPy cannot take (a neg or conj bit, say)
        return result

    def root(tensor: Any) -> Any:
        recorded = torch.is_grad_enabled() and tensor.requires_grad
        if not recorded and type(tensor) in plain and not compiling():
            result = through_numpy(tensor)
            if result is not None:
                return result
        return original_sqrt(tensor.to(float64)).to(float32)

    return root


def _torch_threads(settings: Settings) -> tuple[int, str]:
    """The intra-op thread count to give torch, always explicitly: left alone, torch caps
    ``OMP_NUM_THREADS`` at the host's physical cores, so the count (and the bits) would follow
    the host. A user-set ``OMP_NUM_THREADS`` is the user's count; otherwise ours."""
    text = os.environ.get("OMP_NUM_THREADS", "")
    if text != str(settings.threads) and text.isascii() and text.isdigit() and int(text) > 0:
        return int(text), "OMP_NUM_THREADS (user-set)"
    return settings.threads, settings.threads_source


def _torch_tf32_off(torch: ModuleType) -> dict[str, Any]:
    """Turn TF32 off with whichever knobs exist, and report the flags as they end up.

    The legacy ``allow_tf32`` setters go first: in torch 2.13 they also set the new
    ``fp32_precision`` knobs, whereas setting ``cudnn.conv/rnn.fp32_precision = "ieee"`` makes
    any later *read* of ``torch.backends.cudnn.allow_tf32`` raise ("mix of the legacy and new
    APIs"), which would break programs that log it. A new knob still at "tf32" afterwards (a
    release without the legacy setters) is then set to "ieee".
    """
    backends = torch.backends
    matmul = getattr(backends.cuda, "matmul", None)
    cudnn = backends.cudnn
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # a deprecation warning must not reach the program
        for holder in (matmul, cudnn):
            if holder is not None and hasattr(holder, "allow_tf32"):
                holder.allow_tf32 = False
    knobs = {
        "cuda.matmul": matmul,
        "cudnn.conv": getattr(cudnn, "conv", None),
        "cudnn.rnn": getattr(cudnn, "rnn", None),
    }
    out: dict[str, Any] = {}
    for label, holder in knobs.items():
        if holder is None or not hasattr(holder, "fp32_precision"):
            continue
        if holder.fp32_precision == "tf32":
            holder.fp32_precision = "ieee"
        out[f"{label}.fp32_precision"] = holder.fp32_precision
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        for label, holder in (("cuda.matmul", matmul), ("cudnn", cudnn)):
            if holder is not None and hasattr(holder, "allow_tf32"):
                out[f"{label}.allow_tf32"] = bool(holder.allow_tf32)
    if any(value is True for value in out.values()) or "tf32" in out.values():
        raise DeterminismError(f"TF32 is still enabled after turning it off: {out}")
    return out


# ----------------------------------------------------------------------------- tensorflow


def configure_tensorflow(tf: ModuleType, settings: Settings, entry: dict[str, Any]) -> None:
    seed = settings.rank_seed
    tf.random.set_seed(seed)
    entry["seed"] = seed
    experimental = tf.config.experimental
    if settings.mode == "strict":
        experimental.enable_op_determinism()
        entry["op_determinism"] = True
    else:
        # TF has no warn-only determinism: enabling it makes every op without a deterministic
        # kernel raise. Warn mode keeps deterministic cuDNN (TF_CUDNN_DETERMINISTIC) only.
        entry["op_determinism"] = False
        _say("tensorflow has no warn-only determinism; op determinism stays off in warn mode")
    if settings.cpu != "native":
        entry["portable"] = False
        _say(
            "tensorflow is not portable across CPUs (REPRO_CPU): its Eigen and oneDNN kernels "
            "gave other bits on AVX-512 and AVX2 CPUs under op determinism, with or without "
            "ONEDNN_MAX_CPU_ISA; same CPU model, same bits"
        )
    experimental.enable_tensor_float_32_execution(False)
    entry["tensor_float_32"] = bool(experimental.tensor_float_32_execution_enabled())
    # Thread counts come from TF_NUM_INTRAOP_THREADS / TF_NUM_INTEROP_THREADS (envplan): the
    # tf.config.threading calls fail once the eager context exists.


# ---------------------------------------------------------------------------------- keras


def configure_keras(keras: ModuleType, settings: Settings, entry: dict[str, Any]) -> None:
    """Keras 3: its own global seed and its global ``SeedGenerator`` (used by ``keras.random``
    without a seed), plus the backend's.

    ``keras.utils.set_random_seed`` does all of it, but also imports tensorflow whenever it is
    installed ("so tf.data is seeded"), whatever the backend. So it is called only when
    tensorflow is already loaded (always so with the TensorFlow backend); otherwise the rest of
    what it does is done here, in its order: the two Keras globals, then ``random``, NumPy and
    a torch backend re-seeded (the global generator draws its own seed from ``random``, so this
    gives exactly the numbers ``set_random_seed`` would). TensorFlow, if the program imports it
    later, is seeded by its own hook.
    """
    seed = settings.rank_seed
    entry["seed"] = seed
    backend = getattr(keras, "backend", None)
    backend_name = getattr(backend, "backend", None)
    entry["backend"] = backend_name() if callable(backend_name) else None
    if "tensorflow" in sys.modules:
        keras.utils.set_random_seed(seed)
        entry["method"] = "keras.utils.set_random_seed"
        return
    import importlib

    rng_utils = importlib.import_module("keras.src.utils.rng_utils")
    global_state = importlib.import_module("keras.src.backend.common.global_state")
    seed_generator = importlib.import_module("keras.src.random.seed_generator")
    global_state.set_global_attribute(rng_utils.GLOBAL_RANDOM_SEED, seed)
    global_state.set_global_attribute(seed_generator.GLOBAL_SEED_GENERATOR, None)
    import random

    random.seed(seed)
    np = sys.modules.get("numpy")
    if np is not None:
        np.random.seed(seed)
    torch = sys.modules.get("torch")
    if entry["backend"] == "torch" and torch is not None:
        torch.manual_seed(seed)
    entry["method"] = "as keras.utils.set_random_seed, without importing tensorflow"


def configure_tf_keras(tf_keras: ModuleType, settings: Settings, entry: dict[str, Any]) -> None:
    """Legacy Keras 2 (``TF_USE_LEGACY_KERAS=1``): tensorflow-only, so the public call is fine."""
    tf_keras.utils.set_random_seed(settings.rank_seed)
    entry["seed"] = settings.rank_seed
    entry["method"] = "tf_keras.utils.set_random_seed"


CONFIGURATORS = {
    "numpy": configure_numpy,
    "torch": configure_torch,
    "tensorflow": configure_tensorflow,
    "keras": configure_keras,
    "tf_keras": configure_tf_keras,
}
"""Top-level module name -> configurator. ``random`` is seeded by ``_startup`` itself."""
