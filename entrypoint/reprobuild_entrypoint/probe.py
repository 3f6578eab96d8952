"""Report what an image holds, as one JSON document on stdout.

Run by reprobuild after the build (``python -m reprobuild_entrypoint.probe``); needs no GPU.
"""

from __future__ import annotations

import json
import platform
import re
import sys
from importlib import metadata


def distributions() -> list[dict[str, str]]:
    seen: dict[str, str] = {}
    for dist in metadata.distributions():
        name = dist.metadata["Name"]
        if name:
            seen.setdefault(re.sub(r"[-_.]+", "-", name).lower(), dist.version)
    return [{"name": n, "version": v} for n, v in sorted(seen.items())]


def probe() -> dict[str, object]:
    libc, libc_version = platform.libc_ver()
    return {
        "python": {
            "version": platform.python_version(),
            "implementation": sys.implementation.name,
            "executable": sys.executable,
        },
        "platform": {"machine": platform.machine(), "libc": libc, "libc_version": libc_version},
        "distributions": distributions(),
    }


def main() -> int:
    json.dump(probe(), sys.stdout, sort_keys=True)
    sys.stdout.write("\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
