"""What capture_rng_state/restore_rng_state cost next to the checkpoint they go into (issue 12).

Run by ``runtime_bench.py --rng-state`` inside the proof image (torch, and TensorFlow/Keras
when installed), or directly under the runtime: ``python benchmarks/rngstate_inside.py``.
For three torch models (the digits MLP of the tests, about 5 k parameters, a 1 M-parameter MLP,
and a 25 M-parameter one, the size of a ResNet-50) it times, in the same process:
``torch.save(model.state_dict())`` to a file, capture, restore, and capture + restore as a
share of that save time (goal: under 5%). With ``--keras`` it also times a Keras program's own
checkpoint, ``model.save_weights()`` (what ``ModelCheckpoint(save_weights_only=True)``
writes), of Keras models of the same three sizes: a program that loads TensorFlow saves its
model that way, not with ``torch.save``. Prints one JSON line.
"""

from __future__ import annotations

import json
import os
import statistics
import sys
import tempfile
import time
from collections.abc import Callable

import numpy as np
import torch
from torch import nn

from reprobuild_entrypoint import capture_rng_state, restore_rng_state

ROUNDS = 30


def median_ms(action: Callable[[], object]) -> float:
    action()  # warm-up
    times = []
    for _ in range(ROUNDS):
        start = time.perf_counter()
        action()
        times.append((time.perf_counter() - start) * 1000)
    return statistics.median(times)


KERAS_SIZES = {
    "keras_mlp_5k": (64, 64),
    "keras_mlp_1m": (1000, 1000),
    "keras_mlp_25m": (5000, 5000),
}
"""The torch MLPs' shapes (inputs, hidden width; 10 outputs), as Keras models."""


def keras_mlp(inputs: int, width: int) -> object:
    import keras

    return keras.Sequential(
        [
            keras.Input((inputs,)),
            keras.layers.Dense(width, activation="relu"),
            keras.layers.Dense(10),
        ]
    )


def main() -> None:
    models = {
        "digits_mlp_5k": nn.Sequential(nn.Linear(64, 64), nn.ReLU(), nn.Linear(64, 10)),
        "mlp_1m": nn.Sequential(nn.Linear(1000, 1000), nn.ReLU(), nn.Linear(1000, 10)),
        "mlp_25m": nn.Sequential(nn.Linear(5000, 5000), nn.ReLU(), nn.Linear(5000, 10)),
    }
    keras_models = []
    frameworks = ["random", "numpy", "torch"]
    if "--keras" in sys.argv:
        import keras

        model = keras.Sequential(
            [keras.Input((64,)), keras.layers.Dropout(0.3), keras.layers.Dense(10)]
        )
        keras.random.normal((1,))  # the global seed generator exists
        keras_models.append(model)
        frameworks += ["tensorflow", "keras"]
    np.random.default_rng().random()
    out: dict[str, object] = {"frameworks": frameworks, "rounds": ROUNDS}
    state = capture_rng_state(epochs_done=1, models=keras_models)
    out["state_bytes"] = len(state["payload"])
    capture = median_ms(lambda: capture_rng_state(epochs_done=1, models=keras_models))
    restore = median_ms(lambda: restore_rng_state(state, models=keras_models))
    out["capture_ms"], out["restore_ms"] = capture, restore

    def share(parameters: int, save: float, key: str = "torch_save_ms") -> dict[str, object]:
        return {
            "parameters": parameters,
            key: save,
            "capture_share": capture / save,
            "capture_and_restore_share": (capture + restore) / save,
        }

    with tempfile.TemporaryDirectory() as folder:
        path = os.path.join(folder, "ckpt.pt")
        for name, model in models.items():
            save = median_ms(lambda m=model: torch.save(m.state_dict(), path))
            out[name] = share(sum(p.numel() for p in model.parameters()), save)
        if keras_models:
            path = os.path.join(folder, "ckpt.weights.h5")
            for name, (inputs, width) in KERAS_SIZES.items():
                model = keras_mlp(inputs, width)
                save = median_ms(lambda m=model: m.save_weights(path))
                out[name] = share(model.count_params(), save, "keras_save_weights_ms")
    print(json.dumps(out))


if __name__ == "__main__":
    main()
