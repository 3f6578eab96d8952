"""Owned resources: every scratch tag, probe container and temp dir a run makes carries its
owner (``<pid>-<process start time>``), so that what a killed run left behind can be found
and removed by the next run, and only once its owner is certainly gone.

A pid alone is not enough (pids are reused); the pair of pid and start time (clock ticks
since boot, field 22 of ``/proc/<pid>/stat``) names one process for the life of the machine.
This module decides *what* is a leftover; the engine (the only module that talks to Docker)
lists and removes images and containers.
"""

from __future__ import annotations

import contextlib
import os
import re
import shutil
import subprocess
import tempfile
import threading
from collections.abc import Callable, Sequence
from functools import cache
from pathlib import Path
from typing import Protocol

from reprobuild._util.threads import start as start_thread
from reprobuild_entrypoint.contract import LABEL_PREFIX

OWNER_LABEL = f"{LABEL_PREFIX}owner"
SCRATCH_REPO = "reprobuild-scratch/"
# Temp dirs a run makes: reprobuild-<kind>-<pid>-<start>-<random>
TEMP_KINDS = ("ctx", "iid", "lock", "verify", "layers", "buildah", "pull")
_TOKEN = r"(?P<pid>\d+)-(?P<start>\d+)"
_TEMP_RE = re.compile(rf"^reprobuild-(?:{'|'.join(TEMP_KINDS)})-{_TOKEN}-")
_SCRATCH_RE = re.compile(rf"^{re.escape(SCRATCH_REPO)}[^:]+:{_TOKEN}-[0-9a-f]+$")
_OWNER_RE = re.compile(rf"^{_TOKEN}$")
# buildah working containers this run names (the image probe's): reprobuild-<owner>-<random>
CONTAINER_PREFIX = "reprobuild-"
_CONTAINER_RE = re.compile(rf"^{CONTAINER_PREFIX}{_TOKEN}-[0-9a-f]+$")


def _start_time(pid: int) -> int | None:
    """The process's start time in clock ticks since boot; None when it does not exist."""
    try:
        text = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    # comm (field 2) is in parentheses and may hold spaces: split after the last ')'
    fields = text.rsplit(")", 1)[-1].split()
    try:
        return int(fields[19])  # field 22 overall
    except (IndexError, ValueError):
        return None


@cache
def owner() -> str:
    """This process's owner token: ``<pid>-<start time>``."""
    pid = os.getpid()
    return f"{pid}-{_start_time(pid) or 0}"


def is_alive(token: str) -> bool:
    """Whether the process that wrote ``token`` still runs (a malformed token counts as alive:
    what cannot be read is never removed)."""
    match = _OWNER_RE.match(token)
    if match is None:
        return True
    pid, start = int(match["pid"]), int(match["start"])
    if pid == os.getpid():
        return token == owner()
    now = _start_time(pid)
    if now is None:
        return not Path("/proc/self/stat").exists()  # no /proc: cannot tell, keep it
    return start == 0 or now == start


def temp_prefix(kind: str) -> str:
    """The prefix of a temp dir this run makes (``tempfile.mkdtemp(prefix=...)``)."""
    return f"reprobuild-{kind}-{owner()}-"


def scratch_tag(name: str, suffix: str) -> str:
    """A scratch tag that names its owner: ``reprobuild-scratch/<name>:<owner>-<suffix>``."""
    return f"{SCRATCH_REPO}{name.replace('/', '-')}:{owner()}-{suffix}"


def labels() -> dict[str, str]:
    """Labels for the containers this run creates."""
    return {OWNER_LABEL: owner()}


def container_name(suffix: str) -> str:
    """A name for a container this run creates that names its owner (buildah has no labels
    on working containers): ``reprobuild-<owner>-<suffix>``."""
    return f"{CONTAINER_PREFIX}{owner()}-{suffix}"


def container_owner(name: str) -> str | None:
    match = _CONTAINER_RE.match(name)
    return f"{match['pid']}-{match['start']}" if match else None


def dead_temp_dirs(kind: str) -> list[tuple[Path, str]]:
    """This machine's ``reprobuild-<kind>-<owner>-*`` temp dirs with their owner tokens (the
    caller decides with :func:`is_alive`)."""
    pattern = re.compile(rf"^reprobuild-{re.escape(kind)}-{_TOKEN}-")
    try:
        entries = list(Path(tempfile.gettempdir()).iterdir())
    except OSError:
        return []
    found = []
    for path in entries:
        match = pattern.match(path.name)
        if match is not None:
            found.append((path, f"{match['pid']}-{match['start']}"))
    return found


def scratch_owner(tag: str) -> str | None:
    match = _SCRATCH_RE.match(tag)
    return f"{match['pid']}-{match['start']}" if match else None


def unmount_under(folder: Path) -> None:
    """Lazily unmount whatever is mounted under ``folder``, deepest first, so that the folder
    can be removed: the bind mounts a RUN step had in buildah's TMPDIR when buildah was
    stopped (buildah 1.39 leaves them). Only paths strictly under ``folder``. Never fails."""
    root = str(folder.resolve()) + "/"
    try:
        lines = Path("/proc/self/mountinfo").read_text().splitlines()
    except OSError:
        return
    points = []
    for line in lines:
        fields = line.split()
        if len(fields) > 4:
            # mountinfo writes a space, a tab, a newline and a backslash as octal escapes
            point = re.sub(r"\\([0-7]{3})", lambda m: chr(int(m[1], 8)), fields[4])
            if point.startswith(root):
                points.append(point)
    for point in sorted(points, key=len, reverse=True):
        with contextlib.suppress(OSError, subprocess.SubprocessError):
            subprocess.run(["umount", "-l", point], capture_output=True, check=False, timeout=10)


def reap_dir(folder: Path, prefix: str) -> None:
    """Remove ``<prefix><owner>-*`` entries in ``folder`` whose owner is gone (e.g. a killed
    run's half-downloaded wheels in the cache). Never fails."""
    pattern = re.compile(rf"^{re.escape(prefix)}{_TOKEN}-")
    try:
        entries = list(folder.iterdir())
    except OSError:
        return
    for path in entries:
        match = pattern.match(path.name)
        if match and not is_alive(f"{match['pid']}-{match['start']}"):
            shutil.rmtree(path, ignore_errors=True)


class OwnedEngine(Protocol):
    def owned_containers(self) -> list[tuple[str, str]]: ...
    def remove_container(self, container_id: str) -> bool: ...
    def tags_under(self, prefix: str) -> list[str]: ...
    def untag(self, ref: str) -> None: ...


def reap(
    engine: OwnedEngine | None,
    note: Callable[[str], None],
    *,
    mine: bool = False,
    also: Sequence[OwnedEngine] = (),
) -> int:
    """Remove what runs that are gone left behind (scratch tags, probe containers, temp
    dirs); say so in one note line. ``engine`` None: temp dirs only; ``also``: more stores
    (buildah's), reaped first (what they find may be recorded in a dead run's temp dir).
    ``mine``: remove only this run's own (its last act when interrupted), silently. Never
    fails."""

    def is_gone(token: str) -> bool:
        return token == owner() if mine else not is_alive(token)

    removed = 0
    dead: set[str] = set()
    for store in also:
        count, tokens = _reap_store(store, is_gone)
        removed += count
        dead |= tokens
    tmp = Path(tempfile.gettempdir())
    try:
        entries = list(tmp.iterdir())
    except OSError:
        entries = []
    for path in entries:
        match = _TEMP_RE.match(path.name)
        if match is None:
            continue
        token = f"{match['pid']}-{match['start']}"
        if is_gone(token):
            unmount_under(path)  # a killed buildah's RUN mounts would keep the folder
            shutil.rmtree(path, ignore_errors=True)
            if not path.exists():
                removed += 1
                dead.add(token)
    if engine is not None:
        count, tokens = _reap_store(engine, is_gone)
        removed += count
        dead |= tokens
    if removed and not mine:
        pids = ", ".join(sorted({t.split("-", 1)[0] for t in dead}, key=int))
        what = "leftover" if removed == 1 else "leftovers"
        runs = "an earlier run that was" if len(dead) == 1 else "earlier runs that were"
        note(f"note: removed {removed} {what} of {runs} killed (pid {pids})")
    return removed


def reap_soon(
    engine: OwnedEngine | None,
    note: Callable[[str], None],
    *,
    also: Sequence[OwnedEngine] = (),
) -> Callable[[], None]:
    """:func:`reap` in a thread of its own, while the caller goes on with work that touches
    none of it (a build's plan, its probes and its wheel checks: the listings of buildah's
    storage and the engine's take a few tenths of a second); return what waits for it. The
    thread is not a daemon: a run that fails before it waits still reaps everything before it
    exits."""
    thread = threading.Thread(
        target=reap, args=(engine, note), kwargs={"also": also}, name="reprobuild-reap"
    )
    start_thread(thread)
    return thread.join


def _reap_store(store: OwnedEngine, is_gone: Callable[[str], bool]) -> tuple[int, set[str]]:
    removed = 0
    dead: set[str] = set()
    try:
        for container_id, token in store.owned_containers():
            if is_gone(token) and store.remove_container(container_id):
                removed += 1
                dead.add(token)
        for tag in store.tags_under(SCRATCH_REPO):
            token = scratch_owner(tag) or ""
            if token and is_gone(token):
                store.untag(tag)
                removed += 1
                dead.add(token)
    except Exception:
        pass
    return removed, dead
