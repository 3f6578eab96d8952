"""Waits for SIGTERM; its handler prints and exits 42, so the test can see it ran."""

import signal
import sys
import time


def handler(signum: int, frame: object) -> None:
    print("handled SIGTERM", flush=True)
    sys.exit(42)


signal.signal(signal.SIGTERM, handler)
print("ready", flush=True)
while True:
    time.sleep(0.1)
