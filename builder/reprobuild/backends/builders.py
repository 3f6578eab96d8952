"""The builders ``--builder`` can pick, by name (engine.py and buildah.py say what each one does).

Kept apart from engine.py so the CLI can offer the choices without loading the Docker SDK.
"""

from __future__ import annotations

from typing import Literal

Builder = Literal["auto", "buildah", "buildx", "buildkit", "classic"]
BUILDERS: tuple[Builder, ...] = ("auto", "buildah", "buildx", "buildkit", "classic")
# The builders whose output is a function of the inputs (buildah.py says how).
REPRODUCIBLE: frozenset[str] = frozenset({"buildah"})
