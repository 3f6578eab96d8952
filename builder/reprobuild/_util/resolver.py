"""What the pinned resolver (uv) said when it failed, as the clause of one error line."""

from __future__ import annotations


def failure_reason(stderr: str, returncode: int, *, limit: int = 300) -> str:
    """uv's own reason: its "No solution" or first error line, else its first line, else the
    exit status; at most ``limit`` characters."""
    lines = [ln.strip() for ln in stderr.splitlines() if ln.strip()]
    reason = next((ln for ln in lines if "No solution" in ln or "error" in ln), None)
    reason = reason or (lines[0] if lines else f"exit status {returncode}")
    return reason[:limit]
