"""The in-image runtime package's files, as this reprobuild ships them. Standard library only:
``reprobuild verify --local`` copies them on hosts that lack the build's dependencies."""

from __future__ import annotations

from importlib import resources


def runtime_package() -> dict[str, tuple[bytes, int]]:
    """``reprobuild_entrypoint/<name>`` -> (content, file mode), sorted by name, and the
    distribution record beside it that registers the runtime's MLflow run context provider
    (:mod:`reprobuild_entrypoint.mlflowtags`): only MLflow reads it, through its entry point."""
    from reprobuild_entrypoint.mlflowtags import dist_info

    root = resources.files("reprobuild_entrypoint")
    out: dict[str, tuple[bytes, int]] = {}
    for entry in sorted(root.iterdir(), key=lambda e: e.name):
        if entry.is_file() and entry.name.endswith((".py", ".sh")):
            mode = 0o755 if entry.name.endswith(".sh") else 0o644
            out[f"reprobuild_entrypoint/{entry.name}"] = (entry.read_bytes(), mode)
    out.update((rel, (data, 0o644)) for rel, data in dist_info().items())
    return dict(sorted(out.items()))
