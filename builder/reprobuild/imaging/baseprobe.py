"""The base's own facts (its CPython, machine, glibc, distributions), read by running its
python3 once by digest, with no network and a timeout; cached by digest, as what a digest
names never changes."""

from __future__ import annotations

import contextlib
import hashlib
import json
from pathlib import Path
from typing import Any

from reprobuild._util import jsonload
from reprobuild._util.envnum import env_seconds
from reprobuild._util.fsutil import write_atomic
from reprobuild.backends.engine import Engine
from reprobuild.bases.refs import ImageRef
from reprobuild.errors import EngineError, ReprobuildError, shorten
from reprobuild.locks.wheels import cache_root

__all__ = ["PROBE_TIMEOUT", "base_probe", "cached_base_probe", "probe_timeout"]

# How long the base's python3 may take to print its facts (seconds; REPROBUILD_PROBE_TIMEOUT
# overrides): a second or two on any base, an NGC one listing some hundred distributions; a
# python3 that hangs is stopped and named.
PROBE_TIMEOUT = 60.0


def probe_timeout() -> float:
    """Seconds the base's python3 may take (``$REPROBUILD_PROBE_TIMEOUT``, default 60)."""
    return env_seconds("REPROBUILD_PROBE_TIMEOUT", PROBE_TIMEOUT, most=3600)


def base_probe(engine: Engine, base: ImageRef, *, timeout: float | None = None) -> dict[str, Any]:
    """Python version and platform of the base, read by running its own python3, with no
    network and a timeout (init reads a given base with it too).

    Cached by digest and by the probe's own source: what a digest names never changes, and a
    changed probe must run again (a cached answer hid a probe that could not run at all)."""
    source, cached = _probe_source_and_cache(base)
    data = _read_cached(cached)
    if data is not None:
        return data

    hint = "use a python:*-slim base or a Debian base with python3 and python3-venv"
    try:
        result = engine.run(
            base.by_digest(),
            [],
            entrypoint=["python3", "-c", source],
            timeout=timeout or probe_timeout(),
        )
    except EngineError as exc:  # no python3 to start, or one that hangs
        why = exc.message.replace(base.by_digest(), "the base")
        raise EngineError(f"base {base}: cannot run its python3: {why}", hint=hint) from None
    if result.exit_code != 0:
        said = [ln for ln in result.stderr.decode(errors="replace").splitlines() if ln.strip()]
        raise EngineError(
            f"base {base} has no working python3 (exit {result.exit_code})"
            + (f": it said {shorten(said[-1].strip(), 200)}" if said else ""),
            hint=hint,
        )
    what = f"the probe output of base {base} (its python3 printed something else)"
    probed = jsonload.loads(result.stdout, what, error=EngineError)
    if not isinstance(probed, dict) or not isinstance(probed.get("python"), dict):
        raise EngineError(f"{what}: not the probe's JSON object", hint=hint)
    with contextlib.suppress(OSError):  # only a cache: an unwritable one costs a probe per build
        write_atomic(cached, json.dumps(probed, sort_keys=True))
    return probed


def cached_base_probe(base: ImageRef) -> dict[str, Any] | None:
    """What :func:`base_probe` found for ``base`` when it ran before on this host (init
    --base runs it), else None: a plan reads it without an engine, so render can check
    select.python against a base given by digest."""
    if not base.digest:
        return None
    return _read_cached(_probe_source_and_cache(base)[1])


def _probe_source_and_cache(base: ImageRef) -> tuple[str, Path]:
    from reprobuild_entrypoint import probe as probe_module

    source = Path(probe_module.__file__).read_text()
    probe_sha = hashlib.sha256(source.encode()).hexdigest()[:12]
    digest = (base.digest or "").replace(":", "-")
    return source, cache_root() / "bases" / f"v3-{digest}-{probe_sha}.json"


def _read_cached(cached: Path) -> dict[str, Any] | None:
    try:
        data = jsonload.read_json_file(cached, str(cached), max_bytes=1 << 20)
    except (OSError, ReprobuildError):
        return None  # only a cache (a FIFO or garbage there is never waited on): probe again
    return data if isinstance(data, dict) else None
