"""What every command shares on the way out: the exit codes and the stderr line."""

from __future__ import annotations

import sys

from reprobuild.errors import EXIT_ERROR, EXIT_OK, EXIT_USAGE

__all__ = ["EXIT_ERROR", "EXIT_OK", "EXIT_USAGE", "err"]


def err(line: str) -> None:
    print(line, file=sys.stderr, flush=True)
