import platform

import numpy as np

rng = np.random.default_rng()
w = rng.normal(size=(8,))
x = np.random.rand(64, 8)
y = x @ np.arange(8.0)
for step in range(5):
    grad = 2 * x.T @ (x @ w - y) / len(x)
    w -= 0.05 * grad
    print(f"step {step} loss {float(np.mean((x @ w - y) ** 2))!r}")
print("machine", platform.machine())
