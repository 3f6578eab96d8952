"""What every command shares on the way out: the exit codes and the stderr line."""

from __future__ import annotations

import sys

EXIT_OK = 0
EXIT_ERROR = 1  # a reprobuild error, printed as one `error:` line; also "they differ"
EXIT_USAGE = 2


def err(line: str) -> None:
    print(line, file=sys.stderr, flush=True)
