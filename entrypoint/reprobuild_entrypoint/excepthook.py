"""In strict mode, tell the user how to get past an op that has no deterministic kernel.

PyTorch raises ``RuntimeError: <op> does not have a deterministic implementation, but you set
'torch.use_deterministic_algorithms(True)'...``. Its message names torch's own switch, which an
unmodified script does not call; the one the user controls is ``REPRO_DETERMINISM``. A chained
``sys.excepthook`` prints the normal traceback first (unchanged), then one line,
``reprobuild: <op> has no deterministic implementation; run with REPRO_DETERMINISM=warn to
allow it with a warning``.

Under a launcher (torchrun) it also names the peer a rank lost: a gloo/NCCL error gives only
an address; :func:`~reprobuild_entrypoint.distinfo.lost_peer_line` adds the node's name.

The exit status (1) and the traceback stay exactly what they were.
"""

from __future__ import annotations

import sys
from types import TracebackType

MARKER = "does not have a deterministic implementation"


def hint_for(exc: BaseException | None) -> str | None:
    """The hint line for ``exc`` (or an exception in its cause/context chain), else None."""
    seen: set[int] = set()
    while exc is not None and id(exc) not in seen:
        seen.add(id(exc))
        text = str(exc)
        if isinstance(exc, RuntimeError) and MARKER in text:
            op = text.split(MARKER, 1)[0].strip() or "an operation"
            op = op.splitlines()[-1].strip() if op.splitlines() else op
            return (
                f"reprobuild: {op} has no deterministic implementation; "
                "run with REPRO_DETERMINISM=warn to allow it with a warning"
            )
        exc = exc.__cause__ or exc.__context__
    return None


def _hook(exc_type: type[BaseException], exc: BaseException, tb: TracebackType | None) -> None:
    try:
        _previous(exc_type, exc, tb)
    finally:
        line = hint_for(exc)
        if line is None and _launched:
            import os

            from reprobuild_entrypoint import distinfo

            line = distinfo.lost_peer_line(exc, os.environ)
        if line is not None:
            sys.stderr.write(line + "\n")
            sys.stderr.flush()


_previous = sys.excepthook
_launched = False


def install(*, launched: bool = False) -> None:
    """Chain in front of whatever ``sys.excepthook`` is now; installing twice is a no-op.
    ``launched``: this process is a rank under a launcher (also name lost peers)."""
    global _previous, _launched
    _launched = _launched or launched
    if sys.excepthook is _hook:
        return
    _previous = sys.excepthook
    sys.excepthook = _hook
