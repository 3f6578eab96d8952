"""The in-image runtime package's files, as this reprobuild ships them. Standard library only:
``reprobuild verify --local`` copies them on hosts that lack the build's dependencies."""

from __future__ import annotations

from importlib import resources


def runtime_package() -> dict[str, tuple[bytes, int]]:
    """``reprobuild_entrypoint/<name>`` -> (content, file mode), sorted by name."""
    root = resources.files("reprobuild_entrypoint")
    out: dict[str, tuple[bytes, int]] = {}
    for entry in sorted(root.iterdir(), key=lambda e: e.name):
        if entry.is_file() and entry.name.endswith((".py", ".sh")):
            mode = 0o755 if entry.name.endswith(".sh") else 0o644
            out[f"reprobuild_entrypoint/{entry.name}"] = (entry.read_bytes(), mode)
    return out
