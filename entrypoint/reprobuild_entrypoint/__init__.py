"""reprobuild's in-image runtime. Standard library only; never imports ``reprobuild``.

Copied into every image under /opt/reprobuild/runtime and put on the image venv's path.
"""

MANIFEST_PATH = "/opt/reprobuild/manifest.json"

__version__ = "0.1.0"
"""The runtime's version: reprobuild's (a unit test keeps them equal). RNG states saved by
another version are refused (:mod:`~reprobuild_entrypoint.rngstate`)."""

__all__ = ["RngStateError", "__version__", "capture_rng_state", "restore_rng_state"]


def __getattr__(name: str) -> object:
    """``from reprobuild_entrypoint import capture_rng_state``, loaded on first use only (this
    package is imported at every interpreter start and must stay cheap)."""
    if name in ("capture_rng_state", "restore_rng_state", "RngStateError"):
        from reprobuild_entrypoint import rngstate

        return getattr(rngstate, name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
