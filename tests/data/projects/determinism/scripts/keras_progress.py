"""Keras as people write it: `fit(verbose=1)` draws a progress bar with wall-clock figures
(`1s 5ms/step`), redrawn as often as the machine's speed allows. No seed. Issue 14: verify
must say `identical` under the runtime without a pattern from the user."""

import keras
import numpy as np
from sklearn.datasets import load_digits

x, y = load_digits(return_X_y=True)
x = (x / 16.0).astype("float32")
order = np.random.permutation(len(x))
x, y = x[order], y[order]
model = keras.Sequential(
    [
        keras.Input((64,)),
        keras.layers.Dense(32, activation="relu"),
        keras.layers.Dropout(0.3),
        keras.layers.Dense(10, activation="softmax"),
    ]
)
model.compile(optimizer="adam", loss="sparse_categorical_crossentropy", metrics=["accuracy"])
model.fit(
    x[:1400],
    y[:1400],
    validation_data=(x[1400:], y[1400:]),
    epochs=3,
    batch_size=16,
    shuffle=True,
    verbose=1,
)
