"""Numbers read from an environment variable: seconds (the probes' and asks' time limits) and
counts (the fetch's threads, buildah's jobs). One reader of each kind, so that every such
variable refuses the same bad values in the same one line."""

from __future__ import annotations

import os
from collections.abc import Mapping

from reprobuild.errors import ReprobuildError


def env_seconds(
    var: str,
    default: float,
    *,
    most: float,
    error: type[ReprobuildError] = ReprobuildError,
    environ: Mapping[str, str] | None = None,
) -> float:
    """``var``'s value in seconds (``default`` when unset or empty); anything but a number
    above 0 and at most ``most`` (text, nan, inf, 0, negative) is ``error`` naming it."""
    raw = (os.environ if environ is None else environ).get(var, "").strip()
    if not raw:
        return default
    try:
        value = float(raw)
    except ValueError:
        value = -1.0
    if not 0 < value <= most:
        raise error(f"{var}={raw[:40]!r} is not a number of seconds between 0 and {most:g}")
    return value


def env_count(
    var: str,
    default: int,
    *,
    most: int,
    error: type[ReprobuildError] = ReprobuildError,
    environ: Mapping[str, str] | None = None,
) -> int:
    """``var``'s value as a count (``default`` when unset or empty); anything but a whole
    number from 1 to ``most`` is ``error`` naming it."""
    raw = (os.environ if environ is None else environ).get(var, "").strip()
    if not raw:
        return default
    if not raw.isdigit() or not 1 <= int(raw) <= most:
        raise error(
            f"{var}={raw[:40]!r} is not a whole number from 1 to {most}",
            hint=f"fix or unset {var}",
        )
    return int(raw)
