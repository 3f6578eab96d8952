"""Diverges on line 2: os.urandom is not seeded by anything."""

import os

print("reading entropy", flush=True)
print("token", int.from_bytes(os.urandom(6), "big"), flush=True)
print("done", flush=True)
