"""Preemption and exact resume, Keras 3 (issue 12). No seed: a model with dropout trained with
``fit(shuffle=True)``.

  python keras_resume.py [--resume] [--no-rng] [--epochs N] [--slow S] [--checkpoint PATH]

A callback keeps the last finished epoch in memory (weights, optimizer variables, RNG state
with the model's seed generators); on SIGTERM the handler pickles it to the checkpoint and
exits 0. ``--resume`` restores it and calls ``fit(initial_epoch=...)``; ``--no-rng`` (the
control) restores weights and optimizer only. Prints ``epoch N val_loss X`` and
``final val_loss X``.
"""

import argparse
import os
import pickle
import signal
import sys
import time

import keras
import numpy as np

from reprobuild_entrypoint import capture_rng_state, restore_rng_state

parser = argparse.ArgumentParser()
parser.add_argument(
    "--resume", action="store_true", default=os.environ.get("REPRO_RESUME") == "1"
)  # verify --resume-at
parser.add_argument("--no-rng", action="store_true")
parser.add_argument("--epochs", type=int, default=4)
parser.add_argument("--slow", type=float, default=0.0)
parser.add_argument(
    "--checkpoint",
    default=os.path.join(os.environ.get("REPRO_OUTPUT_DIR", "/out"), "keras-ckpt.pkl"),
)
args = parser.parse_args()

x = np.random.normal(size=(512, 16)).astype("float32")
y = (x[:, :4].sum(axis=1) > 0).astype("int64")
model = keras.Sequential(
    [
        keras.Input((16,)),
        keras.layers.Dense(32, activation="relu"),
        keras.layers.Dropout(0.3),
        keras.layers.Dense(2, activation="softmax"),
    ]
)
model.compile(optimizer="adam", loss="sparse_categorical_crossentropy")
model.optimizer.build(model.trainable_variables)
start = 0
if args.resume:
    with open(args.checkpoint, "rb") as f:
        checkpoint = pickle.load(f)
    model.set_weights(checkpoint["weights"])
    for variable, value in zip(model.optimizer.variables, checkpoint["optimizer"], strict=True):
        variable.assign(value)
    start = checkpoint["epochs_done"]
    if not args.no_rng:
        start = restore_rng_state(checkpoint["rng"], models=[model])["epochs_done"]
    print(f"resumed after epoch {start}", flush=True)

last_finished: dict[str, object] | None = None


class KeepLastEpoch(keras.callbacks.Callback):
    def on_epoch_end(self, epoch: int, logs: dict | None = None) -> None:
        global last_finished
        last_finished = {
            "weights": model.get_weights(),
            "optimizer": [v.numpy() for v in model.optimizer.variables],
            "epochs_done": epoch + 1,
            "rng": capture_rng_state(epochs_done=epoch + 1, models=[model]),
        }
        print(f"epoch {epoch + 1} val_loss {float(logs['val_loss'])!r}", flush=True)
        time.sleep(args.slow)


def on_sigterm(signum: int, frame: object) -> None:
    if last_finished is not None:
        with open(args.checkpoint + ".tmp", "wb") as f:
            pickle.dump(last_finished, f)
        os.replace(args.checkpoint + ".tmp", args.checkpoint)
        os.write(1, f"saved after epoch {last_finished['epochs_done']}\n".encode())
    sys.exit(0)


signal.signal(signal.SIGTERM, on_sigterm)
history = model.fit(
    x[:448],
    y[:448],
    validation_data=(x[448:], y[448:]),
    epochs=args.epochs,
    initial_epoch=start,
    batch_size=32,
    shuffle=True,
    verbose=0,
    callbacks=[KeepLastEpoch()],
)
print(f"final val_loss {float(history.history['val_loss'][-1])!r}", flush=True)
