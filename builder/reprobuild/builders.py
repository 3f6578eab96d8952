"""The builders ``--builder`` can pick, by name (engine.py says what each one does).

Kept apart from engine.py so the CLI can offer the choices without loading the Docker SDK.
"""

from __future__ import annotations

from typing import Literal

Builder = Literal["auto", "buildx", "buildkit", "classic"]
BUILDERS: tuple[Builder, ...] = ("auto", "buildx", "buildkit", "classic")
