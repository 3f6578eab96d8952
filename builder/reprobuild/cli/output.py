"""What every command shares on the way out: the exit codes and the stderr line."""

from __future__ import annotations

import sys

from reprobuild.errors import EXIT_ERROR, EXIT_OK, EXIT_USAGE

__all__ = ["EXIT_ERROR", "EXIT_OK", "EXIT_USAGE", "end_cut_line", "err"]

# True while err() writes: a signal raised inside it (Ctrl-C, or SIGTERM through the handler)
# may leave a line without its newline, and the next line (the "error: interrupted" one) would
# run on after it instead of starting its own.
_writing = False


def err(line: str) -> None:
    """``line`` and its newline on stderr, in one write (print writes them in two: a signal
    between them left the line open)."""
    global _writing
    _writing = True
    sys.stderr.write(line + "\n")
    sys.stderr.flush()
    _writing = False


def end_cut_line() -> None:
    """After a signal: end the line err() was writing when it came, if it was writing one (at
    worst an empty line, where the write was done and only the flag was left to clear)."""
    global _writing
    if _writing:
        _writing = False
        err("")
