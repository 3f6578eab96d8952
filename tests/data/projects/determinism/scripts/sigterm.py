"""Waits for SIGTERM; its handler prints and exits 42, so the test can see it ran."""

import os
import signal
import sys
import time


def handler(signum: int, frame: object) -> None:
    os.write(1, b"handled SIGTERM\n")  # not print(): re-entering stdout's buffer can raise
    sys.exit(42)


signal.signal(signal.SIGTERM, handler)
print("ready", flush=True)
while True:
    time.sleep(0.1)
