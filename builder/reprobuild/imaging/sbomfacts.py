"""Run inside a built image by its venv's python, in the probe's process (its source is passed
as an argument and run there: :data:`reprobuild.imaging.image.PROBE`): :func:`facts` is what the
SBOM needs that the probe does not report: dpkg's status (the Debian packages of the base),
/etc/os-release (the distribution those packages are from) and each installed Python
distribution's licence metadata. Standard library only; the host parses and judges all of it
(an image is untrusted input)."""

from __future__ import annotations

import importlib.metadata
import os

LIMIT = 32 * 1024 * 1024  # dpkg's status of a large base is a few MB


def _read(path: str) -> str:
    try:
        with open(path, encoding="utf-8", errors="replace") as fh:
            return fh.read(LIMIT)
    except OSError:
        return ""


def _dpkg() -> list[str]:
    """dpkg's status file; a distroless base keeps one file per package in status.d."""
    texts = [_read("/var/lib/dpkg/status")]
    folder = "/var/lib/dpkg/status.d"
    if os.path.isdir(folder):
        texts += [_read(os.path.join(folder, name)) for name in sorted(os.listdir(folder))]
    return [text for text in texts if text]


def _python() -> list[dict[str, object]]:
    out: list[dict[str, object]] = []
    for dist in importlib.metadata.distributions():
        meta = dist.metadata
        classifiers = meta.get_all("Classifier") or []
        out.append(
            {
                "name": meta["Name"] or "",
                "version": meta["Version"] or "",
                "license_expression": meta["License-Expression"] or "",
                "license": meta["License"] or "",
                "classifiers": [c for c in classifiers if c.startswith("License ::")],
            }
        )
    return out


def facts() -> dict[str, object]:
    os_release = _read("/etc/os-release") or _read("/usr/lib/os-release")
    return {"dpkg": _dpkg(), "os_release": os_release, "python": _python()}
