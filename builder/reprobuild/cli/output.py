"""What every command shares on the way out: the exit codes and the stderr line."""

from __future__ import annotations

import sys
import threading

from reprobuild.errors import EXIT_ERROR, EXIT_OK, EXIT_USAGE

__all__ = ["EXIT_ERROR", "EXIT_OK", "EXIT_USAGE", "err"]

# The threads inside err(). A thread that finds itself here at its next err() had that write
# cut by a signal (Ctrl-C, or SIGTERM through the CLI's handler): its line may lack the
# newline, and the next line (a clean-up's note, the "error: interrupted" line) would run on
# after it instead of starting its own.
_writing: set[int] = set()


def err(line: str) -> None:
    """``line`` and its newline on stderr, in one write (print writes them in two: a signal
    between them left the line open); after a write of this thread's that a signal cut, a
    newline first (at worst an empty line, where the cut write was whole)."""
    me = threading.get_ident()
    cut = me in _writing
    _writing.add(me)
    sys.stderr.write(("\n" if cut else "") + line + "\n")
    sys.stderr.flush()
    _writing.discard(me)
