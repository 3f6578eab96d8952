"""julius (built from its sdist in the image) low-pass filters a two-tone signal: the 5 Hz
tone passes, the 200 Hz one is gone."""

import importlib.metadata
import math

import julius
import torch

rate = 1000
t = torch.arange(2 * rate, dtype=torch.float64) / rate
low = torch.sin(2 * math.pi * 5 * t)
high = torch.sin(2 * math.pi * 200 * t)
out = julius.lowpass_filter(low + high, cutoff=50 / rate)
inner = slice(rate // 2, -rate // 2)  # away from the edges' padding
error = (out - low)[inner].abs().max().item()
print("julius", importlib.metadata.version("julius"), "torch", torch.__version__)
print(f"lowpass max error {error:.1e}", "ok" if error < 1e-2 else "FAILED")
