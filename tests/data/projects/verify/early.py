"""Diverges on its first line, then would run for 60 s: verify must stop it at once."""

import time

print("started at", time.time(), flush=True)
for second in range(60):
    time.sleep(1)
    print("still running", second, flush=True)
