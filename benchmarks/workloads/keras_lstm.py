"""A "real-world" Keras script for the runtime benchmark: the row-by-row LSTM classifier of the
Keras examples, on scikit-learn's digits upsampled to 32x32 (32 steps of 32 features), with a
Conv1D front end and dropout, trained with Adam. No seed of its own (BENCH_SEED, see
_bench_env.py, is for bare and off runs): prints the validation loss of each epoch in full,
then the training time."""

import time

import _bench_env  # first: BENCH_THREADS before tensorflow loads
import keras
import numpy as np
from sklearn.datasets import load_digits

_bench_env.seed(keras.utils.set_random_seed)  # BENCH_SEED (bare and off runs only)
x, y = load_digits(return_X_y=True)
x = (x / 16.0).astype("float32").reshape(-1, 8, 8)
x = np.kron(x, np.ones((1, 4, 4), dtype="float32"))  # 8x8 -> 32x32, nearest neighbour
order = np.random.permutation(len(x))
x, y = x[order], y[order]
model = keras.Sequential(
    [
        keras.Input((32, 32)),
        keras.layers.Conv1D(64, 3, activation="relu"),
        keras.layers.LSTM(128),
        keras.layers.Dropout(0.3),
        keras.layers.Dense(10, activation="softmax"),
    ]
)
model.compile(optimizer="adam", loss="sparse_categorical_crossentropy")
start = time.perf_counter()
history = model.fit(
    x[:1400],
    y[:1400],
    validation_data=(x[1400:], y[1400:]),
    epochs=4,
    batch_size=32,
    shuffle=True,
    verbose=0,
)
for epoch, loss in enumerate(history.history["val_loss"]):
    print(f"epoch {epoch} val_loss {float(loss)!r}")
print(f"train_s {time.perf_counter() - start:.3f}")
