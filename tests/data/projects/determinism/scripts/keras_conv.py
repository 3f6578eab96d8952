"""A Keras conv net with dropout on scikit-learn's digits. No seed: prints validation loss."""

import keras
import numpy as np
from sklearn.datasets import load_digits

x, y = load_digits(return_X_y=True)
x = (x / 16.0).astype("float32").reshape(-1, 8, 8, 1)
order = np.random.permutation(len(x))
x, y = x[order], y[order]
model = keras.Sequential(
    [
        keras.Input((8, 8, 1)),
        keras.layers.Conv2D(8, 3, activation="relu"),
        keras.layers.Flatten(),
        keras.layers.Dropout(0.3),
        keras.layers.Dense(10, activation="softmax"),
    ]
)
model.compile(optimizer="adam", loss="sparse_categorical_crossentropy")
history = model.fit(
    x[:1400],
    y[:1400],
    validation_data=(x[1400:], y[1400:]),
    epochs=3,
    batch_size=64,
    shuffle=True,
    verbose=0,
)
for epoch, loss in enumerate(history.history["val_loss"]):
    print(f"epoch {epoch} val_loss {float(loss)!r}")
