"""Resume a run exactly: capture every RNG state the runtime seeded, and restore it.

A resumed run that restores only the model and the optimizer starts every RNG over from the
image's seed, so dropout masks, DataLoader shuffles and Keras seed generators repeat the draws
of epoch 1. Save :func:`capture_rng_state` beside the model, give it back to
:func:`restore_rng_state` after loading, and go on from ``epochs_done``::

    from reprobuild_entrypoint import capture_rng_state, restore_rng_state

    torch.save({"model": ..., "optimizer": ..., "rng": capture_rng_state(epochs_done=epoch)}, f)
    ...
    start_epoch = restore_rng_state(torch.load(f, weights_only=False)["rng"])["epochs_done"]

What is captured (only from frameworks the program has imported; none is imported here):

- Python ``random``; NumPy's legacy global state, the call counter of the runtime's unseeded
  ``default_rng()`` and the Generators it made (the first 64);
- torch: the CPU generator, and every CUDA device's once CUDA is initialised (before that they
  are still as ``manual_seed`` left them); the ``generator=`` of DataLoaders passed as
  ``loaders=`` and of their samplers;
- TensorFlow: the eager context's op-seed stream (what ``tf.random.shuffle``,
  ``fit(shuffle=True)`` and other unseeded ops draw from) and ``tf.random``'s global generator;
- Keras 3: the global ``SeedGenerator`` (``keras.random`` without a seed) and the seed
  generators of the models passed as ``models=`` (``Dropout`` and the like own one; their
  state is not in the saved weights).

Checkpoints are taken at epoch boundaries. A DataLoader draws its shuffle and worker seeds
when an epoch's iterator starts, so the RNG state after an epoch decides the next one; in the
middle of an epoch those draws are spent and the position cannot be rebuilt from RNG state
alone, so ``batches_done`` other than 0 is refused (:class:`RngStateError`).

The state is a plain dict of ints, strings, bytes and tuples (``pickle``, ``torch.save``).
:func:`restore_rng_state` validates all of it first and changes nothing when anything does
not fit: another format or runtime version, another framework version, another world size or
rank, another CUDA device count, a damaged state (a sha256 over the payload), a foreign
object. If applying still fails half-way, what was applied is put back.
"""

from __future__ import annotations

import contextlib
import functools
import hashlib
import io
import os
import pickle
import random
import sys
from collections.abc import Callable, Iterable, Mapping
from typing import Any

from reprobuild_entrypoint import __version__

KIND = "reprobuild.rng_state"
FORMAT_VERSION = 1
_FRAMEWORKS = ("numpy", "torch", "tensorflow", "keras")


class RngStateError(ValueError):
    """The state cannot be captured or restored here; the message is one line."""


# ------------------------------------------------------------------------------- capture


def capture_rng_state(
    *,
    epochs_done: int | None = None,
    batches_done: int = 0,
    models: Iterable[Any] = (),
    loaders: Iterable[Any] = (),
) -> dict[str, Any]:
    """The complete RNG state of this process, as a plain picklable dict.

    ``epochs_done``: how many epochs are finished (given back by :func:`restore_rng_state`;
    pass it to ``range(epochs_done, N)`` or ``fit(initial_epoch=...)``). ``models``: Keras
    models whose seed generators to include. ``loaders``: torch DataLoaders whose own
    ``generator=`` (and their sampler's) to include.
    """
    if batches_done:
        raise RngStateError(
            f"batches_done={batches_done}: mid-epoch checkpoints are not supported (the "
            "DataLoader's shuffle and worker seeds for this epoch were drawn when it started); "
            "finish the epoch, then capture with epochs_done"
        )
    if epochs_done is not None and (not isinstance(epochs_done, int) or epochs_done < 0):
        raise RngStateError(f"epochs_done={epochs_done!r} is not a count of epochs")
    blob = pickle.dumps(_payload(epochs_done, list(models), list(loaders)), protocol=4)
    return {
        "kind": KIND,
        "format": FORMAT_VERSION,
        "runtime_version": __version__,
        "sha256": hashlib.sha256(blob).hexdigest(),
        "payload": blob,
    }


def _payload(epochs_done: int | None, models: list[Any], loaders: list[Any]) -> dict[str, Any]:
    payload: dict[str, Any] = {
        "position": {"epochs_done": epochs_done, "batches_done": 0},
        "world": _world(),
        "versions": _versions(),
        "python_random": random.getstate(),
    }
    if "numpy" in sys.modules:
        payload["numpy"] = _capture_numpy(sys.modules["numpy"])
    if "torch" in sys.modules:
        payload["torch"] = _capture_torch(sys.modules["torch"], loaders)
    if "tensorflow" in sys.modules:
        payload["tensorflow"] = _capture_tensorflow()
    if "keras" in sys.modules:
        payload["keras"] = _capture_keras(models)
    return payload


def _world() -> dict[str, int]:
    def number(name: str, default: int) -> int:
        text = os.environ.get(name, "").strip()
        return int(text) if text.isdigit() else default

    return {"world_size": number("WORLD_SIZE", 1), "rank": number("RANK", 0)}


def _versions() -> dict[str, str | None]:
    versions: dict[str, str | None] = {
        "python": ".".join(map(str, sys.version_info[:3])),
    }
    for name in _FRAMEWORKS:
        module = sys.modules.get(name)
        if module is not None:
            versions[name] = str(getattr(module, "__version__", None))
    return versions


def _capture_numpy(np: Any) -> dict[str, Any]:
    name, keys, pos, has_gauss, gauss = np.random.get_state(legacy=True)
    out: dict[str, Any] = {
        "legacy": (str(name), keys.astype("<u4").tobytes(), int(pos), int(has_gauss), gauss),
        "default_rng_calls": None,
        "generators": [],
    }
    frameworks = sys.modules.get("reprobuild_entrypoint.frameworks")
    if frameworks is not None and getattr(np.random.default_rng, "__reprobuild__", False):
        out["default_rng_calls"] = frameworks.DEFAULT_RNG["calls"]
        out["generators"] = [g.bit_generator.state for g in frameworks.DEFAULT_RNG["generators"]]
    return out


def _tensor_bytes(tensor: Any) -> bytes:
    return bytes(tensor.cpu().numpy().tobytes())


def _capture_torch(torch: Any, loaders: list[Any]) -> dict[str, Any]:
    cuda = None
    if torch.cuda.is_available() and torch.cuda.is_initialized():
        cuda = [_tensor_bytes(t) for t in torch.cuda.get_rng_state_all()]
    generators = []
    for n, loader in enumerate(loaders):
        for label, owner in (("generator", loader), ("sampler", getattr(loader, "sampler", None))):
            generator = getattr(owner, "generator", None)
            if generator is not None:
                generators.append((n, label, _tensor_bytes(generator.get_state())))
    return {"cpu": _tensor_bytes(torch.get_rng_state()), "cuda": cuda, "loaders": generators}


def _tf_internals() -> tuple[Any, Any]:
    """TensorFlow's eager context (its op-seed stream) and the module of ``tf.random``'s
    global generator: not public API, checked on TF 2.21."""
    return (
        _module("tensorflow.python.eager.context"),
        _module("tensorflow.python.ops.stateful_random_ops"),
    )


def _tf_global_generator(stateful_random_ops: Any) -> Any:
    """``tf.random``'s global generator once made (``get_global_generator`` or
    ``set_global_generator``), else None: the module attribute is ``global_generator`` in TF
    2.21 (older releases: ``_global_generator``)."""
    for name in ("global_generator", "_global_generator"):
        live = getattr(stateful_random_ops, name, None)
        if live is not None:
            return live
    return None


def _capture_tensorflow() -> dict[str, Any]:
    context, stateful_random_ops = _tf_internals()

    ctx = context.context()
    rng = getattr(ctx, "_rng", None)
    live = _tf_global_generator(stateful_random_ops)
    gen_state = None
    if live is not None:
        gen_state = (int(live.algorithm), _read_ints(live.state))
    return {
        "global_seed": getattr(ctx, "_seed", None),
        "op_seed_stream": None if rng is None else rng.getstate(),
        "global_generator": gen_state,
    }


def _seed_generators(models: list[Any]) -> list[tuple[str, Any]]:
    found: list[tuple[str, Any]] = []
    for model in models:
        for variable in getattr(model, "variables", ()):
            path = str(getattr(variable, "path", getattr(variable, "name", "")))
            if path.endswith("seed_generator_state"):
                found.append((path, variable))
    return found


def _capture_keras(models: list[Any]) -> dict[str, Any]:
    global_state = _module("keras.src.backend.common.global_state")
    seed_generator = _module("keras.src.random.seed_generator")
    live = global_state.get_global_attribute(seed_generator.GLOBAL_SEED_GENERATOR)
    return {
        "global_seed_generator": None if live is None else _read_ints(live.state),
        "models": [(path, _read_ints(v)) for path, v in _seed_generators(models)],
    }


def _resource_variable(variable: Any) -> Any:
    """The eager TensorFlow resource variable behind a Keras 3 (TensorFlow backend) or a TF
    variable, or None (another backend, a distributed variable, inside a ``tf.function``).
    Reading and assigning it with the raw ops skips Keras's and TF's Python layers: about
    11 instead of 65 us a read, 13 instead of 300 us an assign (TF 2.21, Keras 3.15)."""
    rvo = sys.modules.get("tensorflow.python.ops.resource_variable_ops")
    context = sys.modules.get("tensorflow.python.eager.context")
    if rvo is None or context is None or not context.executing_eagerly():
        return None
    for candidate in (variable, getattr(variable, "value", None)):
        if isinstance(candidate, rvo.BaseResourceVariable):
            return candidate
    return None


def _read_tensor(resource: Any) -> Any:
    """The variable's value now, as an eager tensor. Resource variables are copy-on-write,
    so a later assign does not change it: it is a backup as it is."""
    ops = _module("tensorflow.python.ops.gen_resource_variable_ops")
    return ops.read_variable_op(resource.handle, resource.dtype)


def _read_ints(variable: Any) -> list[int]:
    """A seed generator's state (a few integers) as plain ints: Keras 3 always has NumPy."""
    resource = _resource_variable(variable)
    value = variable.numpy() if resource is None else _read_tensor(resource).numpy()
    return [int(x) for x in sys.modules["numpy"].asarray(value).ravel().tolist()]


# ------------------------------------------------------------------------------- restore


def restore_rng_state(
    state: Mapping[str, Any], *, models: Iterable[Any] = (), loaders: Iterable[Any] = ()
) -> dict[str, Any]:
    """Put back what :func:`capture_rng_state` returned; returns its ``position``
    (``{"epochs_done": ..., "batches_done": 0}``). Pass the same ``models`` and ``loaders``
    as at capture. All or nothing: see the module docstring."""
    models, loaders = list(models), list(loaders)
    payload = _validated(state)
    plan = _plan(payload, models, loaders)
    # Python's random first: creating Keras's global seed generator draws from it.
    undo: list[Any] = [functools.partial(random.setstate, random.getstate())]
    try:
        for step in plan:
            undo.append(step.backup())
            step.apply()
    except Exception as exc:
        for put_back in reversed(undo):
            with contextlib.suppress(Exception):  # best effort: the first error is reported
                put_back()
        raise RngStateError(
            f"restoring the RNG state failed ({type(exc).__name__}: {exc}); "
            "the state before the call was put back"
        ) from exc
    return dict(payload["position"])


class _PlainUnpickler(pickle.Unpickler):
    """Unpickles plain data only: the payload holds ints, floats, strings, bytes, tuples, lists
    and dicts, and never needs a class. A payload naming any class or function is refused
    before it is looked up, so a crafted checkpoint cannot run code here (the sha256 beside
    the payload proves only that it was not damaged: whoever made it can compute it too)."""

    def find_class(self, module: str, name: str) -> Any:
        raise RngStateError(
            f"RNG state payload names {module}.{name}: a state holds plain data only, "
            "so this one was not written by capture_rng_state()"
        )


def _validated(state: Any) -> dict[str, Any]:
    if not isinstance(state, Mapping) or state.get("kind") != KIND:
        what = type(state).__name__
        if isinstance(state, Mapping):
            what += f" with keys {sorted(map(str, state))[:6]}"
        raise RngStateError(
            f"not a reprobuild RNG state (got {what}); pass what capture_rng_state() returned"
        )
    if state.get("format") != FORMAT_VERSION or state.get("runtime_version") != __version__:
        raise RngStateError(
            f"RNG state saved by reprobuild runtime {state.get('runtime_version')} (format "
            f"{state.get('format')}), this is runtime {__version__} (format {FORMAT_VERSION}): "
            "restore it with the image that saved it"
        )
    blob = state.get("payload")
    if not isinstance(blob, bytes) or hashlib.sha256(blob).hexdigest() != state.get("sha256"):
        raise RngStateError(
            "RNG state is damaged (its payload does not match its sha256): the checkpoint "
            "was truncated or altered"
        )
    try:
        payload = _PlainUnpickler(io.BytesIO(blob)).load()
    except RngStateError:
        raise
    except Exception as exc:
        raise RngStateError(f"RNG state payload cannot be read: {exc}") from exc
    if not isinstance(payload, dict) or not all(
        isinstance(payload.get(key), dict) for key in ("versions", "world", "position")
    ):
        raise RngStateError("RNG state payload is not one that capture_rng_state() writes")
    here = _versions()
    for name, saved in payload["versions"].items():
        if name == "python" or name not in here:
            continue
        if here[name] != saved:
            raise RngStateError(
                f"RNG state saved with {name} {saved}, this process has {name} {here[name]}: "
                "their RNG formats are not proven compatible"
            )
    world = _world()
    if payload["world"] != world:
        saved_world = payload["world"]
        raise RngStateError(
            f"RNG state saved by rank {saved_world['rank']} of world size "
            f"{saved_world['world_size']}, restored in rank {world['rank']} of world size "
            f"{world['world_size']}: each rank restores its own state in a world of the same size"
        )
    return payload


class _Step:
    """One change :func:`restore_rng_state` makes. ``backup()`` runs just before ``apply()``
    and returns what puts back only the state that ``apply()`` is about to change."""

    __slots__ = ("apply", "backup")

    def __init__(self, apply: Callable[[], object], backup: Callable[[], Callable[[], object]]):
        self.apply, self.backup = apply, backup


def _nothing() -> None:
    return None


def _plan(payload: dict[str, Any], models: list[Any], loaders: list[Any]) -> list[_Step]:
    """Check everything against this process and return the steps that apply it."""
    steps: list[_Step] = []
    numpy_legacy = None
    if "numpy" in payload:
        numpy_legacy, numpy_steps = _plan_numpy(payload["numpy"])
        steps += numpy_steps
    if "torch" in payload:
        steps += _plan_torch(payload["torch"], loaders)
    if "tensorflow" in payload:
        steps += _plan_tensorflow(payload["tensorflow"])
    if "keras" in payload:
        steps += _plan_keras(payload["keras"], models)
    # After Keras: making Keras's global seed generator draws its seed from ``random``
    # (restore_rng_state backs ``random`` up before the first step).
    saved_random = payload["python_random"]
    steps.append(_Step(functools.partial(random.setstate, saved_random), lambda: _nothing))
    if numpy_legacy is not None:
        # Last, so it needs no backup (reading NumPy's legacy state back costs as much as
        # the rest of a restore): nothing comes after it that could fail, and _plan_numpy
        # checked every field that set_state checks, so it sets the whole state or raises
        # before writing any of it.
        steps.append(_Step(numpy_legacy, lambda: _nothing))
    return steps


def _module(name: str) -> Any:
    import importlib

    return sys.modules.get(name) or importlib.import_module(name)


def _plan_numpy(saved: dict[str, Any]) -> tuple[Callable[[], object], list[_Step]]:
    """The call that sets NumPy's legacy global state (checked here), and the steps for the
    runtime's unseeded ``default_rng`` Generators."""
    np = _module("numpy")
    name, keys, pos, has_gauss, gauss = saved["legacy"]
    key = np.frombuffer(keys, dtype="<u4").astype(np.uint32) if isinstance(keys, bytes) else None
    if key is None or key.size != 624:
        raise RngStateError("RNG state is damaged: NumPy's MT19937 key is not 624 words")
    if (
        name != "MT19937"
        or type(pos) is not int
        or not 0 <= pos <= 624
        or has_gauss not in (0, 1)
        or not isinstance(gauss, float)
    ):
        raise RngStateError("RNG state is damaged: NumPy's legacy MT19937 state does not fit")
    legacy = functools.partial(np.random.set_state, (name, key, pos, has_gauss, gauss))
    steps = []
    frameworks = sys.modules.get("reprobuild_entrypoint.frameworks")
    if saved["default_rng_calls"] is not None and frameworks is not None:
        live = frameworks.DEFAULT_RNG["generators"]
        states = saved["generators"]
        if len(live) < len(states):
            raise RngStateError(
                f"RNG state holds {len(states)} unseeded NumPy Generators, this process has made "
                f"{len(live)}: create them (np.random.default_rng()) before restoring"
            )
        touched = live[: len(states)]

        def put(calls: int, bit_states: list[Any]) -> None:
            frameworks.DEFAULT_RNG["calls"] = calls
            for generator, bit_state in zip(touched, bit_states):  # noqa: B905 (3.8)
                generator.bit_generator.state = bit_state

        def backup() -> Callable[[], object]:
            before = [g.bit_generator.state for g in touched]
            return functools.partial(put, frameworks.DEFAULT_RNG["calls"], before)

        steps.append(_Step(functools.partial(put, saved["default_rng_calls"], states), backup))
    return legacy, steps


def _plan_torch(saved: dict[str, Any], loaders: list[Any]) -> list[_Step]:
    torch = _module("torch")

    def tensor(raw: bytes) -> Any:
        return torch.frombuffer(bytearray(raw), dtype=torch.uint8)

    cpu = tensor(saved["cpu"])
    steps = [
        _Step(
            functools.partial(torch.set_rng_state, cpu),
            lambda: functools.partial(torch.set_rng_state, torch.get_rng_state()),
        )
    ]
    if saved["cuda"] is not None:
        count = torch.cuda.device_count() if torch.cuda.is_available() else 0
        if count != len(saved["cuda"]):
            raise RngStateError(
                f"RNG state has {len(saved['cuda'])} CUDA device(s), this process sees {count}"
            )
        cuda = [tensor(raw) for raw in saved["cuda"]]
        steps.append(
            _Step(
                functools.partial(torch.cuda.set_rng_state_all, cuda),
                lambda: functools.partial(
                    torch.cuda.set_rng_state_all, torch.cuda.get_rng_state_all()
                ),
            )
        )
    owners = {}
    for n, loader in enumerate(loaders):
        owners[(n, "generator")] = loader
        owners[(n, "sampler")] = getattr(loader, "sampler", None)
    for n, label, raw in saved["loaders"]:
        generator = getattr(owners.get((n, label)), "generator", None)
        if generator is None:
            raise RngStateError(
                f"RNG state holds the {label} generator of DataLoader {n} in loaders=, "
                "which this call was not given"
            )
        steps.append(
            _Step(
                functools.partial(generator.set_state, tensor(raw)),
                functools.partial(_torch_generator_backup, generator),
            )
        )
    return steps


def _torch_generator_backup(generator: Any) -> Callable[[], object]:
    return functools.partial(generator.set_state, generator.get_state())


def _variable_step(variable: Any, value: list[int], where: str) -> _Step:
    """Assign ``value`` to a Keras or TF variable, backing up its value first. The value is
    converted and its shape checked here, before anything changes (the raw assign would take
    another shape); the assign and the backup use the raw ops where the variable allows
    (:func:`_resource_variable`)."""
    resource = _resource_variable(variable)
    if resource is None:
        return _Step(
            functools.partial(variable.assign, value),
            lambda: functools.partial(variable.assign, variable.numpy()),
        )
    ops = _module("tensorflow.python.ops.gen_resource_variable_ops")
    try:
        array = _module("numpy").array(value, dtype=resource.dtype.as_numpy_dtype)
    except Exception as exc:
        raise RngStateError(f"RNG state is damaged: {where} holds {value!r} ({exc})") from exc
    if array.shape != tuple(resource.shape):
        raise RngStateError(
            f"RNG state is damaged: {where} has shape {array.shape}, the variable "
            f"{tuple(resource.shape)}"
        )
    handle = resource.handle

    def backup() -> Callable[[], object]:
        return functools.partial(ops.assign_variable_op, handle, _read_tensor(resource))

    return _Step(functools.partial(ops.assign_variable_op, handle, array), backup)


def _plan_tensorflow(saved: dict[str, Any]) -> list[_Step]:
    _module("tensorflow")
    context, stateful_random_ops = _tf_internals()

    ctx = context.context()
    steps = []
    if saved["op_seed_stream"] is not None:

        def op_seeds() -> None:
            if getattr(ctx, "_seed", None) != saved["global_seed"]:
                ctx._set_global_seed(saved["global_seed"])
            ctx._rng.setstate(saved["op_seed_stream"])

        def op_seeds_backup() -> Callable[[], object]:
            seed, rng = getattr(ctx, "_seed", None), getattr(ctx, "_rng", None)
            stream = None if rng is None else rng.getstate()

            def put_back() -> None:
                if getattr(ctx, "_seed", None) != seed:
                    ctx._set_global_seed(seed)
                ctx._rng = rng
                if rng is not None:
                    rng.setstate(stream)

            return put_back

        steps.append(_Step(op_seeds, op_seeds_backup))
    if saved["global_generator"] is not None:
        algorithm, values = saved["global_generator"]
        live = _tf_global_generator(stateful_random_ops)
        if live is not None and int(live.algorithm) == algorithm:
            steps.append(_variable_step(live.state, values, "tf.random's global generator"))
        else:  # made from the saved state (get_global_generator() refuses under op
            # determinism), or replaced when the live one uses another algorithm

            def generator() -> None:
                made = stateful_random_ops.Generator.from_state(state=values, alg=algorithm)
                stateful_random_ops.set_global_generator(made)

            def put_back() -> None:
                stateful_random_ops.global_generator = live

            steps.append(_Step(generator, lambda: put_back))
    return steps


def _plan_keras(saved: dict[str, Any], models: list[Any]) -> list[_Step]:
    _module("keras")
    seed_generator = _module("keras.src.random.seed_generator")
    steps = []
    if saved["global_seed_generator"] is not None:
        value = saved["global_seed_generator"]

        def global_generator() -> None:
            _variable_step(
                seed_generator.global_seed_generator().state, value, "Keras's global seed"
            ).apply()

        global_state = _module("keras.src.backend.common.global_state")
        live_global = global_state.get_global_attribute(seed_generator.GLOBAL_SEED_GENERATOR)
        if live_global is not None:
            steps.append(_variable_step(live_global.state, value, "Keras's global seed"))
        else:  # made when restored (its seed drawn from ``random``, which is put back)

            def forget() -> None:
                global_state.set_global_attribute(seed_generator.GLOBAL_SEED_GENERATOR, None)

            steps.append(_Step(global_generator, lambda: forget))
    live = dict(_seed_generators(models))
    wanted = dict(saved["models"])
    if set(live) != set(wanted):
        missing = sorted(set(wanted) - set(live))[:3]
        extra = sorted(set(live) - set(wanted))[:3]
        raise RngStateError(
            f"the models= given do not have the seed generators in the RNG state (missing "
            f"{missing}, not in the state {extra}): pass the same models as at capture"
        )
    for path, value in wanted.items():
        steps.append(_variable_step(live[path], value, path))
    return steps
