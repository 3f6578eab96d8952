"""What the pinned resolver (uv) said when it failed, as the clause of one error line."""

from __future__ import annotations


def failure_reason(stderr: str, returncode: int, *, limit: int = 300) -> str:
    """uv's own reason: its first ``error:`` line with its root cause (the last ``Caused
    by:``), else its "No solution" line, else its last line that is not a warning, else the
    exit status; at most ``limit`` characters. A warning is never quoted as the reason."""
    lines = [ln.strip() for ln in stderr.splitlines() if ln.strip()]
    if not any(ln.startswith(("error:", "ERROR:")) for ln in lines):
        solution = next((ln for ln in lines if "No solution" in ln), None)
        if solution is not None:
            return solution[:limit]
    return tool_error(stderr, f"exit status {returncode}")[:limit]


# pip's notes at its error level that say what it left out, not what failed: "ERROR: Ignored
# the following versions that require a different python version: ..." (then the real error).
_PIP_NOTE = "ERROR: Ignored the following"


def tool_error(stderr: str, fallback: str) -> str:
    """The line of pip's or uv's ``stderr`` that says what failed: its first ``ERROR:`` (pip)
    or ``error:`` (uv) line, with uv's last ``Caused by:`` (the root cause) after it; else
    its last line that is not a warning; else ``fallback``. Never a warning line."""
    lines = [ln.strip() for ln in stderr.splitlines() if ln.strip()]
    first = next(
        (
            i
            for i, ln in enumerate(lines)
            if ln.startswith(("ERROR:", "error:")) and not ln.startswith(_PIP_NOTE)
        ),
        None,
    )
    if first is None:
        plain = [ln for ln in lines if not ln.lower().startswith(("warning:", "warn:"))]
        return plain[-1] if plain else fallback
    said = lines[first]
    causes = [ln for ln in lines[first + 1 :] if ln.startswith("Caused by:") and ln not in said]
    return f"{said} ({causes[-1]})" if causes else said
