"""Packages a lock installs from source: a git commit or a directory of the project.

Every reader (uv.lock, poetry.lock, pdm.lock, Pipfile.lock, requirements) hands what it finds
to :func:`git_pin` or :func:`path_pin`, so a source reads and is refused the same way whatever
the format. The rules:

* git: the URL is data, never code. Only ``https://``, ``ssh://`` and ``file://`` URLs (a
  ``git+`` prefix is dropped); no ``ext::`` transport, no scp-style ``host:path``, nothing
  that starts with ``-`` (it would reach git as an option), no credentials (they would be
  recorded in the manifest), only the characters a URL needs. The lock must record the full
  40-hex commit: a branch, a tag or a short hash moves, so it is refused in one line that
  names the package and the ref.
* path: a POSIX path relative to the lock's folder that stays inside it (no absolute path,
  no ``..`` that leaves it); a symlink that leads out is refused when the archive is made
  (:mod:`reprobuild.locks.sourcearchive`).
"""

from __future__ import annotations

import posixpath
import re
from pathlib import Path
from urllib.parse import parse_qsl, unquote, urlsplit

from reprobuild.errors import LockfileError
from reprobuild.locks.records import URL_CHARS_RE, SourcePin, quoted

__all__ = [
    "COMMIT_RE",
    "git_pin",
    "git_url_problem",
    "path_pin",
    "split_uv_git",
]

COMMIT_RE = re.compile(r"^[0-9a-f]{40}$")
GIT_SCHEMES = ("https", "ssh", "file")
COMMIT_HINT = (
    "lock the dependency at a commit (uv, Poetry and PDM record the resolved commit; in a "
    "requirements file write `name @ git+https://host/repo.git@<40-hex commit>`)"
)
_SUBDIR_RE = re.compile(r"^[A-Za-z0-9._+-]+(/[A-Za-z0-9._+-]+)*$")


def git_url_problem(url: str) -> str | None:
    """Why ``url`` (``git+`` prefix already dropped) is not a git URL reprobuild fetches."""
    what = f"git URL {quoted(url)}"
    if url.startswith("-"):
        return f"{what} starts with '-', which git would read as an option"
    if "::" in url.split("/", 1)[0] or url.lower().startswith("ext:"):
        return (
            f"{what} names a git transport helper ('<transport>::'): "
            "only https://, ssh:// or file://"
        )
    if not URL_CHARS_RE.fullmatch(url):
        return f"{what} holds characters that are not allowed in a URL"
    try:
        parts = urlsplit(url)
        _ = parts.port
    except ValueError:
        return f"{what} is not a valid URL"
    scheme = parts.scheme.lower()
    if scheme not in GIT_SCHEMES:
        shown = f"scheme '{parts.scheme}'" if parts.scheme else "no scheme (scp-style?)"
        return f"{what}: {shown} is not allowed, only https://, ssh:// or file://"
    if scheme == "file":
        if parts.netloc not in ("", "localhost") or not parts.path.startswith("/"):
            return f"{what}: a file URL must be absolute, 'file:///path'"
    elif not parts.hostname or parts.hostname.startswith("-"):
        return f"{what} has no valid host"
    if parts.password is not None or (scheme == "https" and parts.username is not None):
        return f"{what} embeds credentials, which would be recorded in the manifest"
    return None


def git_pin(
    name: str,
    version: str,
    url: str,
    ref: str | None,
    path: Path,
    line: int | None,
    *,
    subdirectory: str | None = None,
) -> SourcePin:
    """A checked git source: ``url`` (``git+`` dropped) at ``ref``, which must be a full
    commit; anything else is one :class:`LockfileError` at ``path:line``."""
    label = f"package {name}"
    if url.startswith("git+"):
        url = url[len("git+") :]
    problem = git_url_problem(url)
    if problem is not None:
        raise LockfileError(path, line, f"{label}: {problem}")
    commit = (ref or "").strip().lower()
    if not COMMIT_RE.fullmatch(commit):
        shown = quoted(ref) if ref else "no commit"
        raise LockfileError(
            path,
            line,
            f"{label} comes from git {quoted(url)} at {shown}: a full 40-hex commit is "
            "required (a branch, a tag or a short hash moves)",
            hint=COMMIT_HINT,
        )
    if subdirectory is not None:
        subdirectory = _relative(subdirectory, f"{label}: subdirectory", path, line)
    return SourcePin(
        name=name,
        version=version,
        kind="git",
        location=url,
        commit=commit,
        subdirectory=subdirectory,
        line=line or 0,
    )


def split_uv_git(source: str) -> tuple[str, str | None, str | None, str | None]:
    """uv's ``git = "https://host/repo?rev=main&subdirectory=x#<commit>"`` as (URL, commit,
    the ref asked for, subdirectory). uv writes the resolved commit as the fragment."""
    base, _, fragment = source.partition("#")
    url, _, query = base.partition("?")
    params = dict(parse_qsl(query, keep_blank_values=True))
    asked = params.get("rev") or params.get("tag") or params.get("branch")
    subdirectory = params.get("subdirectory")
    return url, (unquote(fragment) or None), asked, subdirectory


def path_pin(
    name: str,
    version: str,
    where: str,
    path: Path,
    line: int | None,
    *,
    editable: bool = False,
) -> SourcePin:
    """A checked project directory: ``where`` relative to the lock's folder, inside it."""
    location = _relative(where, f"package {name}: path", path, line)
    return SourcePin(
        name=name,
        version=version,
        kind="path",
        location=location,
        editable=editable,
        line=line or 0,
    )


def _relative(where: str, label: str, path: Path, line: int | None) -> str:
    """``where`` as a normalized relative POSIX path that stays inside its folder."""
    text = where.replace("\\", "/") if isinstance(where, str) else ""
    if text.startswith("file://"):
        text = unquote(urlsplit(text).path)
    normal = posixpath.normpath(text) if text else ""
    if (
        not text
        or text.startswith("/")
        or re.match(r"^[A-Za-z]:", text)
        or normal == ".."
        or normal.startswith("../")
    ):
        raise LockfileError(
            path,
            line,
            f"{label} {quoted(str(where))} leaves the project: only a relative path inside "
            "the lock's folder",
            hint="move the package into the project (a workspace member) or publish it",
        )
    if normal != "." and not _SUBDIR_RE.fullmatch(normal):
        raise LockfileError(
            path,
            line,
            f"{label} {quoted(str(where))} holds characters that are not allowed in a path "
            "(letters, digits, '.', '_', '+', '-' and '/')",
        )
    return normal
