"""``reprobuild.hashes.toml``: the sha256 of the direct-URL wheels a lock names with no hash.

Some locks carry no hash for a wheel named by its URL (a requirements line
``name @ https://host/x.whl`` with no ``--hash``, a hand-edited uv.lock). Such a lock is
refused, unless ``reprobuild init --record-hashes`` fetched each of those wheels once and
recorded its sha256 in this file beside the lock (trust on first use), which the user commits:
every later read of the lock takes the hash from here, and every build checks the wheel it
fetches against it, as it checks a hash the lock carries itself.

The file is reprobuild's own, written whole (atomically) only when ``init`` succeeds::

    [wheels]
    "https://host/x-1.0-py3-none-any.whl" = "sha256:<64 hex>"
"""

from __future__ import annotations

import re
import tomllib
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path

from reprobuild._util.boundedread import read_small_file
from reprobuild._util.fsutil import write_atomic
from reprobuild.errors import LockfileError
from reprobuild.locks.records import URL_CHARS_RE, quoted

HASHES_FILE = "reprobuild.hashes.toml"
RECORD_HINT = (
    "add its sha256 to the lock, or run `reprobuild init --record-hashes` to record it at the "
    f"first fetch in {HASHES_FILE} beside the lock (commit that file)"
)
_MAX_BYTES = 1 << 20
_SHA256_RE = re.compile(r"^sha256:[0-9a-f]{64}$")
_HEADER = (
    "# Written by `reprobuild init --record-hashes`: the sha256 of each wheel the lock beside\n"
    "# names by URL with no hash, taken at its first fetch. Commit this file: every build\n"
    "# checks those wheels against it.\n"
)


def hashes_file(lock_path: Path) -> Path:
    return Path(lock_path).parent / HASHES_FILE


def read_recorded(lock_path: Path) -> dict[str, str]:
    """URL -> sha256 hex from the hashes file beside ``lock_path`` (empty when there is none);
    a file that is not what :func:`recording` writes is one error naming it."""
    path = hashes_file(lock_path)

    def fail(problem: str) -> LockfileError:
        return LockfileError(path, None, problem, hint="delete it and run init --record-hashes")

    try:
        data = read_small_file(path, _MAX_BYTES, fail)
    except FileNotFoundError:
        return {}
    try:
        doc = tomllib.loads(data.decode("utf-8"))
    except (UnicodeDecodeError, tomllib.TOMLDecodeError) as exc:
        raise fail(f"is not valid TOML ({str(exc).splitlines()[0][:80]})") from None
    wheels = doc.get("wheels", {})
    if set(doc) - {"wheels"} or not isinstance(wheels, dict):
        raise fail('holds something other than one [wheels] table of URL = "sha256:<hex>"')
    out: dict[str, str] = {}
    for url, digest in wheels.items():
        if not URL_CHARS_RE.fullmatch(url) or not (
            isinstance(digest, str) and _SHA256_RE.fullmatch(digest)
        ):
            raise fail(f'entry {quoted(url)} is not URL = "sha256:<64 hex>"')
        out[url] = digest.split(":", 1)[1]
    return out


@dataclass
class _Recording:
    hasher: Callable[[str], str]
    memo: dict[str, str] = field(default_factory=dict)
    new: dict[Path, dict[str, str]] = field(default_factory=dict)


_active: list[_Recording] = []


def hash_for(lock_path: Path, url: str) -> str | None:
    """The sha256 hex recorded for ``url`` beside ``lock_path``; while :func:`recording`, one
    taken now at the wheel's first fetch (and recorded when the recording ends well); else
    None."""
    found = read_recorded(lock_path).get(url)
    if found is not None or not _active:
        return found
    state = _active[-1]
    if url not in state.memo:
        state.memo[url] = state.hasher(url)
    state.new.setdefault(hashes_file(lock_path), {})[url] = state.memo[url]
    return state.memo[url]


@contextmanager
def recording(hasher: Callable[[str], str], warn: Callable[[str], None]) -> Iterator[None]:
    """While inside, a direct-URL wheel with no hash is fetched once (``hasher(url)``: its
    sha256 hex) instead of refused; when the block ends without an error, each hashes file
    is written with what was recorded (its old entries kept) and one warning line says so.
    A block that fails writes nothing."""
    state = _Recording(hasher)
    _active.append(state)
    try:
        yield
    finally:
        _active.remove(state)
    for path, new in sorted(state.new.items()):
        merged = {**read_recorded(path), **new}
        entries = "".join(f'"{u}" = "sha256:{h}"\n' for u, h in sorted(merged.items()))
        write_atomic(path, f"{_HEADER}[wheels]\n{entries}", what=f"the hashes file {path}")
        warn(
            f"warning: recorded the sha256 of {len(new)} wheel(s) the lock names by URL with "
            f"no hash in {path}, as fetched now (trust on first use): commit it; every build "
            "checks those wheels against it"
        )
