"""Report what an image holds, as one JSON document on stdout.

Run by reprobuild after the build, in the process that also reads the SBOM's facts
(``reprobuild.imaging.image.PROBE``); ``python -m reprobuild_entrypoint.probe`` prints it alone.
Needs no GPU.
"""

from __future__ import annotations

import hashlib
import json
import os
import platform
import re
import sys
import sysconfig
from importlib import metadata

TYPE_CHECKING = False
if TYPE_CHECKING:
    from collections.abc import Callable
    from typing import Any


def distributions() -> list[dict[str, object]]:
    """Every importable distribution, first on sys.path wins (as import does). ``in_venv``
    tells the venv's own (what the lock installed) from the base's, which a GPU image's venv
    sees through --system-site-packages."""
    venv = (
        os.path.realpath(sysconfig.get_paths()["purelib"])
        if sys.prefix != sys.base_prefix
        else None
    )
    # The runtime's own distribution record (its MLflow entry point) is part of reprobuild,
    # not of the stack the lock installed: leave out what lives beside the runtime package.
    # Run as ``python3 -c`` on a bare base there is no file and no runtime to leave out.
    here = globals().get("__file__")
    runtime = os.path.dirname(os.path.dirname(os.path.realpath(here))) if here else None
    seen: dict[str, dict[str, object]] = {}
    for dist in metadata.distributions():
        name = dist.metadata["Name"]
        if not name:
            continue
        key = re.sub(r"[-_.]+", "-", name).lower()
        where = os.path.realpath(str(dist.locate_file("")))
        if key in seen or where == runtime:
            continue
        seen[key] = {
            "name": key,
            "version": dist.version,
            "in_venv": venv is not None and where == venv,
        }
    return [seen[k] for k in sorted(seen)]


def pip_constraint() -> dict[str, object] | None:
    """The base's pip constraint file (NGC images set PIP_CONSTRAINT from release 25.03): its
    path, sha256 and ``name==version`` pins, which a lock installed on top must respect."""
    path = os.environ.get("PIP_CONSTRAINT", "").strip()
    if not path:
        return None
    try:
        with open(path, "rb") as fh:
            raw = fh.read()
    except OSError as exc:
        return {"path": path, "error": exc.strerror}
    pins: dict[str, str] = {}
    for line in raw.decode("utf-8", "replace").splitlines():
        text = line.split("#", 1)[0].split(";", 1)[0].strip()
        name, sep, version = text.partition("==")
        if sep and name.strip() and version.strip():
            pins[re.sub(r"[-_.]+", "-", name.strip()).lower()] = version.strip()
    return {"path": path, "sha256": hashlib.sha256(raw).hexdigest(), "pins": pins}


def _guarded(call: Callable[[], object]) -> object:
    try:
        return call()
    except Exception as exc:  # a fact the library cannot give is recorded as such
        return f"unavailable: {type(exc).__name__}"


def frameworks() -> dict[str, object]:
    """What the installed frameworks were built against, as they report it (no GPU needed).
    Only for GPU images (``--stack``): importing them costs seconds."""
    import importlib
    import importlib.util

    out: dict[str, object] = {}
    if importlib.util.find_spec("torch") is not None:
        torch: Any = _guarded(lambda: importlib.import_module("torch"))
        out["torch"] = {
            "version": _guarded(lambda: str(torch.__version__)),
            "cuda": _guarded(lambda: torch.version.cuda),
            "cudnn": _guarded(lambda: torch.backends.cudnn.version()),
            "nccl": _guarded(lambda: ".".join(map(str, torch.cuda.nccl.version()))),
        }
    if importlib.util.find_spec("tensorflow") is not None:
        tf: Any = _guarded(lambda: importlib.import_module("tensorflow"))
        info = _guarded(lambda: dict(tf.sysconfig.get_build_info()))
        build = info if isinstance(info, dict) else {}
        out["tensorflow"] = {
            "version": _guarded(lambda: str(tf.__version__)),
            "cuda": build.get("cuda_version"),
            "cudnn": build.get("cudnn_version"),
        }
    return out


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
        "pip_constraint": pip_constraint(),
    }


def main() -> int:
    data = probe()
    if "--stack" in sys.argv[1:]:
        data["frameworks"] = frameworks()
    json.dump(data, sys.stdout, sort_keys=True, default=str)
    sys.stdout.write("\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
