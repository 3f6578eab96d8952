"""Is the host's NVIDIA driver new enough for the CUDA in this GPU image? Pure: no I/O.

NGC images set ``NVIDIA_REQUIRE_CUDA=cuda>=9.0``, so the container toolkit starts them on any
driver (docs/determinism.md): a driver that is too old shows up much later, as a CUDA error in
the middle of the program, or as a run that works with a reduced feature set under minor
version compatibility. The entrypoint checks before the program starts instead.

- :func:`required_driver`: the requirement for a CUDA version, from the table in
  :mod:`~reprobuild_entrypoint.cuda_drivers`.
- :func:`image_requirement`: what a GPU image asks for: its manifest's ``gpu`` section
  (``cuda``, ``driver_min``, ``driver_min_compat``, written by the builder), else the table
  for the manifest's ``gpu.cuda`` or the image's ``CUDA_VERSION``.
- :func:`check`: the verdict for a host driver and GPU count, in a determinism mode:

  ============================  ====================  ==================  ==============
  finding                       strict                warn                off
  ============================  ====================  ==================  ==============
  driver >= ``driver_min``      ok                    ok                  ok
  driver older                  refuse                warn                ok (recorded)
  no GPU visible                refuse (ok with       warn (ok with       ok (recorded)
                                ``REPRO_ALLOW_CPU``)  ``REPRO_ALLOW_CPU``)
  driver version unknown        warn                  warn                ok (recorded)
  no requirement known          warn                  warn                ok (recorded)
  ============================  ====================  ==================  ==============

Versions compare numerically, dotted field by dotted field, missing fields counting as 0
(``580`` < ``580.65.06`` < ``580.95.05``; ``560.35.3`` == ``560.35.03``). A version that is not
digits and dots is unknown: a warning, never a crash and never a refusal.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any, NamedTuple

from reprobuild_entrypoint.cuda_drivers import COMPAT_FLOORS, ROWS

_VERSION = re.compile(r"[0-9]+(?:\.[0-9]+){0,5}")

OK = "ok"
WARN = "warn"
REFUSE = "refuse"

NO_GPU_MESSAGE = (
    "no NVIDIA GPU is visible in this GPU image (was the container started with --gpus all?)"
)


class DriverRequirement(NamedTuple):
    """What an image needs of the host driver."""

    cuda: str | None
    """The image's CUDA version as given (``12.6``, ``12.6.3``), None when unknown."""
    driver_min: str | None
    """Minimum driver for the toolkit's full feature set; None when unknown (a CUDA version
    newer than the table, and no ``driver_min`` in the manifest)."""
    driver_min_compat: str | None
    """Floor of the CUDA major family under minor version compatibility, None when unknown."""
    source: str
    """Where ``driver_min`` came from: ``manifest``, a table row (``CUDA 12.6 GA``), or
    ``unknown``."""


class CheckResult(NamedTuple):
    status: str
    """``ok`` (run, say nothing), ``warn`` (run after one line), ``refuse`` (do not run)."""
    finding: str
    """``ok``, ``driver_too_old``, ``driver_below_compat``, ``no_gpu``, ``unknown_driver`` or
    ``unknown_requirement``: what was found, whatever the mode made of it."""
    message: str | None
    """One line (without the ``reprobuild:`` prefix), None when the finding is ``ok``."""

    def as_dict(self) -> dict[str, Any]:
        return dict(self._asdict())


def parse_version(text: object) -> tuple[int, ...] | None:
    """``"560.35.03"`` -> ``(560, 35, 3)``; None for anything that is not 1 to 6 dotted
    ASCII numbers (``"[N/A]"``, ``"550.54"`` is fine, ``"550..54"``, ``"v550"`` are not)."""
    if not isinstance(text, str) or not _VERSION.fullmatch(text.strip()):
        return None
    return tuple(int(part) for part in text.strip().split("."))


def compare_versions(a: tuple[int, ...], b: tuple[int, ...]) -> int:
    """-1, 0 or 1; missing trailing fields count as 0."""
    width = max(len(a), len(b))
    pa, pb = a + (0,) * (width - len(a)), b + (0,) * (width - len(b))
    return (pa > pb) - (pa < pb)


def required_driver(cuda: str | None) -> DriverRequirement | None:
    """The table's requirement for a CUDA version: ``12.6`` is 12.6 GA, ``12.6.3`` is 12.6
    Update 3, ``12.8.0.038`` (NGC's ``CUDA_VERSION``) is 12.8 GA. A release without a row of its
    own gets the newest row of its minor version below it (a later update never needs less),
    or the minor's GA row. None for a malformed version or a minor version not in the table
    (newer than the table, or never released, like 12.7)."""
    version = parse_version(cuda)
    if version is None or len(version) < 2:
        return None
    major, minor = version[0], version[1]
    patch = version[2] if len(version) > 2 else 0
    same_minor = []
    for release, driver_min, compat, label in ROWS:
        r_major, r_minor, r_patch = (int(p) for p in release.split("."))
        if (r_major, r_minor) == (major, minor):
            same_minor.append((r_patch, driver_min, compat, label))
    if not same_minor:
        return None
    same_minor.sort()
    chosen = same_minor[0]  # GA: the lowest release of the minor
    for row in same_minor:
        if row[0] <= patch:
            chosen = row
    _, driver_min, compat, label = chosen
    return DriverRequirement(
        cuda=cuda, driver_min=driver_min, driver_min_compat=compat, source=label
    )


def _text(value: object) -> str | None:
    return value.strip() if isinstance(value, str) and value.strip() else None


def major_floor(cuda: str | None) -> str | None:
    """The minor-version-compatibility floor of a CUDA version's major family, if known."""
    version = parse_version(cuda)
    floor = COMPAT_FLOORS.get(version[0]) if version else None
    return floor[0] if floor else None


def image_requirement(
    manifest: Mapping[str, Any], environ: Mapping[str, str]
) -> DriverRequirement | None:
    """The requirement of a GPU image from its manifest's ``gpu`` section, filled in from the
    table where the section lacks a usable value. None when there is nothing to go on: no
    ``driver_min`` and no CUDA version.

    ``gpu.cuda`` (else the image's ``CUDA_VERSION``) names the CUDA version. A well-formed
    ``gpu.driver_min`` wins over the table (the builder may know better: a toolkit newer than
    the table, a base with needs of its own); a malformed one is ignored. ``driver_min_compat``
    likewise, else the table's floor for the CUDA major. A CUDA version the table does not know
    gives ``driver_min`` None: only the major's floor can be checked.
    """
    section = manifest.get("gpu")
    gpu: Mapping[str, Any] = section if isinstance(section, Mapping) else {}
    cuda = _text(gpu.get("cuda")) or _text(environ.get("CUDA_VERSION"))
    compat = _text(gpu.get("driver_min_compat"))
    if compat is None or parse_version(compat) is None:
        compat = major_floor(cuda)
    driver_min = _text(gpu.get("driver_min"))
    if driver_min is not None and parse_version(driver_min) is not None:
        return DriverRequirement(cuda, driver_min, compat, "manifest")
    table = required_driver(cuda)
    if table is not None:
        return table._replace(driver_min_compat=compat)
    if cuda is None:
        return None
    return DriverRequirement(cuda, None, compat, "unknown")


def check(
    host_driver: str | None,
    requirement: DriverRequirement | None,
    *,
    gpu_count: int | None,
    mode: str,
    allow_cpu: bool,
    cpu_reason: str = "REPRO_ALLOW_CPU",
) -> CheckResult:
    """The verdict; see the module docstring. ``gpu_count`` None means unknown (the driver was
    found but not the devices): it is not taken for "no GPU". ``mode`` is the run's
    determinism mode; ``allow_cpu`` is ``REPRO_ALLOW_CPU`` (or an image whose CUDA comes from
    its wheels, which runs on CPU too), ``cpu_reason`` why it is allowed."""
    finding, problem = _finding(host_driver, requirement, gpu_count)
    if finding == OK or problem is None:
        return CheckResult(OK, OK, None)
    if mode == "off":
        return CheckResult(OK, finding, problem)
    if finding == "no_gpu":
        if allow_cpu:
            return CheckResult(OK, finding, f"{problem}; running without one ({cpu_reason})")
        if mode == "strict":
            return CheckResult(REFUSE, finding, f"{problem}; REPRO_ALLOW_CPU=1 runs it without one")
        return CheckResult(WARN, finding, f"{problem}; running without one (mode warn)")
    if finding in ("driver_too_old", "driver_below_compat"):
        if mode == "strict":
            return CheckResult(
                REFUSE, finding, f"{problem}: {FIX}; REPRO_DETERMINISM=warn runs anyway"
            )
        return CheckResult(WARN, finding, f"{problem}; running anyway (mode warn): {FIX}")
    return CheckResult(WARN, finding, problem)  # unknown: never a refusal


FIX = (
    "upgrade the driver, or use an image built on an older NGC release "
    "(reprobuild image --gpu with base.gpu set to one)"
)
"""The fix named by every driver-too-old message."""


def _finding(
    host_driver: str | None, requirement: DriverRequirement | None, gpu_count: int | None
) -> tuple[str, str | None]:
    """(finding, the problem in words)."""
    if gpu_count == 0:
        return "no_gpu", NO_GPU_MESSAGE
    host = parse_version(host_driver)
    shown = host_driver if host is not None else "(unknown)"
    if requirement is None:
        return (
            "unknown_requirement",
            f"cannot check the host driver {shown}: this GPU image names neither its CUDA "
            "version nor a minimum driver",
        )
    what = f"CUDA {requirement.cuda} in this image" if requirement.cuda else "this image"
    if host is None:
        found = "none was found" if host_driver is None else f"{host_driver!r} is not a version"
        wanted = requirement.driver_min or requirement.driver_min_compat or "a known driver"
        return "unknown_driver", f"cannot check the host driver ({found}); {what} needs {wanted}"
    compat = parse_version(requirement.driver_min_compat)
    below_compat = compat is not None and compare_versions(host, compat) < 0
    need = parse_version(requirement.driver_min)
    if need is None:
        if below_compat:
            return (
                "driver_below_compat",
                f"the host driver {host_driver} is older than {requirement.driver_min_compat}, "
                f"the least any CUDA {_major(requirement.cuda)} needs ({what})",
            )
        floor = (
            f"; it is at least {requirement.driver_min_compat}, the floor of CUDA "
            f"{_major(requirement.cuda)}"
            if compat is not None
            else ""
        )
        return (
            "unknown_requirement",
            f"cannot check the host driver {host_driver} fully: no minimum driver is known for "
            f"{what} (the manifest names none, and this runtime's table ends at CUDA "
            f"{ROWS[0][0]}){floor}",
        )
    if compare_versions(host, need) >= 0:
        return OK, None
    problem = (
        f"the host driver {host_driver} is older than {requirement.driver_min}, which {what} needs"
    )
    return ("driver_below_compat" if below_compat else "driver_too_old"), problem


def _major(cuda: str | None) -> str:
    version = parse_version(cuda)
    return f"{version[0]}.x" if version else "version"
