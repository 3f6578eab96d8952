"""Fails: a traceback-like stderr and exit status 3."""

import sys

print("loading", flush=True)
for number in range(30):
    print(f"warning {number}: something noisy", file=sys.stderr)
print("FileNotFoundError: /data/train.csv", file=sys.stderr)
sys.exit(3)
