"""Diverges on line 3: it prints the wall clock."""

import random
import time

print("start", random.random(), flush=True)
print("step 1 ok", flush=True)
print(f"step 2 at {time.time()!r}", flush=True)
print("done", flush=True)
