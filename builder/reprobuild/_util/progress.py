"""Progress of a batch of file transfers, as people expect it: per file and in total, bytes and
rate.

On a terminal (the ``bar`` stream is a TTY) it is a live bar drawn by ``rich`` (the library
pip's own bars come from): one row for the file in flight, one for the total, and a line above
them for each file as it finishes. Anywhere else (CI logs, a pipe, a file) it is plain lines
through ``log``, never a carriage return: one line per finished file, and a total line every
``every`` seconds while the transfer runs. A quiet ``log`` and no ``bar`` say nothing at all.
"""

from __future__ import annotations

import contextlib
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from types import TracebackType
from typing import TYPE_CHECKING, TextIO

if TYPE_CHECKING:
    from rich.progress import Progress, TaskID

Log = Callable[[str], None]
Clock = Callable[[], float]


def size(n: float) -> str:
    """``n`` bytes in decimal units, as pip and rich write them (``3.7 GB``, ``512 bytes``)."""
    from rich.filesize import decimal

    return decimal(int(n))


def rate(n: float, seconds: float) -> str:
    return f"{size(n / seconds)}/s" if seconds > 0 else "-"


@contextlib.contextmanager
def timed(log: Log, doing: str, *, clock: Clock = time.monotonic) -> Iterator[None]:
    """Say ``doing`` as a long step begins, and how long it took once it worked (a step that
    fails says its error instead)."""
    log(doing)
    started = clock()
    yield
    log(f"{doing}: done in {clock() - started:.1f} s")


class Transfers:
    """Files fetched one after another; the caller says when one starts, how far it is and
    when it is done. Use as a context manager: leaving it draws the last total."""

    def __init__(
        self,
        log: Log,
        *,
        count: int,
        what: str = "fetched",
        bar: TextIO | None = None,
        every: float = 10.0,
        clock: Clock = time.monotonic,
    ) -> None:
        self._log = log
        self._count = count
        self._what = what
        self._every = every
        self._clock = clock
        self._started = clock()
        self._last_total = self._started
        self._done_files = 0
        self._done_bytes = 0
        # the file in flight: name, bytes so far, its total (None: not said), when it began
        self._name: str | None = None
        self._bytes = 0
        self._total: int | None = None
        self._began = self._started
        self._live: Progress | None = None
        self._file_task: TaskID | None = None
        self._all_task: TaskID | None = None
        if bar is not None:
            self._live = _live_bar(bar)
        if self._live is not None:
            self._all_task = self._live.add_task(self._files_text(), total=None)

    # ------------------------------------------------------------------ what the caller says

    def start(self, name: str, total: int | None) -> None:
        """A new file begins (the previous one, if any, is done)."""
        self.finish()
        self._name, self._bytes, self._total, self._began = name, 0, total, self._clock()
        if self._live is not None:
            self._file_task = self._live.add_task(name, total=total)
        self.tick()

    def update(self, done: int, total: int | None = None) -> None:
        """The file in flight has ``done`` bytes (of ``total``, when said)."""
        if self._name is None:
            return
        self._bytes = max(done, 0)
        if total:
            self._total = total
        if self._live is not None and self._file_task is not None:
            self._live.update(self._file_task, completed=self._bytes, total=self._total)
        self.tick()

    def finish(self) -> None:
        """The file in flight is complete (a no-op when none is)."""
        if self._name is None:
            return
        got = max(self._bytes, self._total or 0)
        took = self._clock() - self._began
        self._done_files += 1
        self._done_bytes += got
        line = (
            f"{self._what} {self._name}: {size(got)} in {took:.1f} s ({rate(got, took)}); "
            f"{self._files_text()}, {size(self._done_bytes)}"
        )
        if self._live is not None and self._file_task is not None:
            self._live.remove_task(self._file_task)
            self._file_task = None
            self._live.console.print(line, markup=False, highlight=False)
        else:
            self._log(line)
        self._name, self._bytes, self._total = None, 0, None
        self.tick()

    def drop(self) -> None:
        """The file in flight did not arrive (its transfer failed): not counted, not said."""
        if self._live is not None and self._file_task is not None:
            self._live.remove_task(self._file_task)
            self._file_task = None
        self._name, self._bytes, self._total = None, 0, None

    def tick(self) -> None:
        """Refresh the total: the bar's row, or a plain line when ``every`` seconds passed."""
        now = self._clock()
        so_far = self._done_bytes + self._bytes
        if self._live is not None and self._all_task is not None:
            self._live.update(self._all_task, description=self._files_text(), completed=so_far)
            return
        if now - self._last_total < self._every:
            return
        self._last_total = now
        current = ""
        if self._name is not None:
            of = f" of {size(self._total)}" if self._total else ""
            current = f"; {self._name}: {size(self._bytes)}{of}"
        self._log(
            f"{self._what} so far: {self._files_text()}, {size(so_far)} in "
            f"{now - self._started:.0f} s ({rate(so_far, now - self._started)}){current}"
        )

    # ------------------------------------------------------------------ context manager

    def __enter__(self) -> Transfers:
        if self._live is not None:
            self._live.start()
        return self

    def __exit__(
        self,
        kind: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        if kind is None:
            self.finish()
        if self._live is not None:
            self._live.stop()

    def summary(self, files: int, nbytes: int) -> str:
        """The closing line: ``files`` files of ``nbytes`` in all (the caller's exact count)."""
        took = self._clock() - self._started
        return f"{self._what} {files} files, {size(nbytes)} in {took:.1f} s ({rate(nbytes, took)})"

    def _files_text(self) -> str:
        return f"{self._done_files}/{self._count} files"


@dataclass
class _Flying:
    """A file in flight: its name, when it began, its bar row; bytes so far."""

    name: str
    began: float
    row: TaskID | None
    got: int = 0
    total: int | None = None


class Parallel:
    """Files fetched side by side (threads): each says when it starts, each block it got and
    when it is done, by a key of its own. The same lines and bar as :class:`Transfers`: one
    line per finished file, a total every ``every`` seconds (or the bar's total row, and one
    row per file in flight). Thread-safe; use as a context manager."""

    def __init__(
        self,
        log: Log,
        *,
        count: int,
        what: str = "fetched",
        bar: TextIO | None = None,
        every: float = 10.0,
        clock: Clock = time.monotonic,
    ) -> None:
        self._log, self._count, self._what = log, count, what
        self._every, self._clock = every, clock
        self._started = self._last_total = clock()
        self._done_files = self._done_bytes = 0
        self._flying: dict[str, _Flying] = {}
        self._mutex = threading.RLock()
        self._live = _live_bar(bar) if bar is not None else None
        self._all_task = None if self._live is None else self._live.add_task(self._text())

    def start(self, key: str, name: str, total: int | None) -> None:
        with self._mutex:
            row = None if self._live is None else self._live.add_task(name, total=total)
            self._flying[key] = _Flying(name, self._clock(), row)
        self.tick()

    def add(self, key: str, nbytes: int) -> None:
        with self._mutex:
            entry = self._flying.get(key)
            if entry is None:
                return
            entry.got += nbytes
            if self._live is not None and entry.row is not None:
                self._live.update(entry.row, completed=entry.got)
        self.tick()

    def expect(self, key: str, total: int) -> None:
        """The file's whole size is now known (the server said it)."""
        with self._mutex:
            entry = self._flying.get(key)
            if entry is None:
                return
            entry.total = total
            if self._live is not None and entry.row is not None:
                self._live.update(entry.row, total=total)
        self.tick()

    def restart(self, key: str) -> None:
        """The file's bytes so far are dropped (the server sent it again from its start)."""
        with self._mutex:
            if key in self._flying:
                self._flying[key].got = 0

    def finish(self, key: str) -> None:
        with self._mutex:
            entry = self._flying.pop(key, None)
            if entry is None:
                return
            took = self._clock() - entry.began
            self._done_files += 1
            self._done_bytes += entry.got
            line = (
                f"{self._what} {entry.name}: {size(entry.got)} in {took:.1f} s "
                f"({rate(entry.got, took)}); {self._text()}, {size(self._done_bytes)}"
            )
            if self._live is not None and entry.row is not None:
                self._live.remove_task(entry.row)
                self._live.console.print(line, markup=False, highlight=False)
            else:
                self._log(line)
        self.tick()

    def drop(self, key: str) -> None:
        """The file did not arrive: not counted, not said."""
        with self._mutex:
            entry = self._flying.pop(key, None)
            if entry is not None and self._live is not None and entry.row is not None:
                self._live.remove_task(entry.row)

    def tick(self) -> None:
        with self._mutex:
            now = self._clock()
            so_far = self._done_bytes + sum(e.got for e in self._flying.values())
            if self._live is not None and self._all_task is not None:
                known = self._done_bytes + sum(e.total or e.got for e in self._flying.values())
                self._live.update(
                    self._all_task, description=self._text(), completed=so_far, total=known
                )
                return
            if now - self._last_total < self._every:
                return
            self._last_total = now
            took = now - self._started
            self._log(
                f"{self._what} so far: {self._text()}, {size(so_far)} in {took:.0f} s "
                f"({rate(so_far, took)}); {len(self._flying)} in flight"
            )

    def __enter__(self) -> Parallel:
        if self._live is not None:
            self._live.start()
        return self

    def __exit__(self, *exc: object) -> None:
        if self._live is not None:
            self._live.stop()

    def summary(self, files: int, nbytes: int) -> str:
        took = self._clock() - self._started
        return f"{self._what} {files} files, {size(nbytes)} in {took:.1f} s ({rate(nbytes, took)})"

    def _text(self) -> str:
        return f"{self._done_files}/{self._count} files"


def _live_bar(stream: TextIO) -> Progress | None:
    """A rich progress display on ``stream`` where it is a terminal that can redraw a line
    (not ``TERM=dumb``); None elsewhere (then the caller writes plain lines)."""
    from rich.console import Console
    from rich.progress import (
        BarColumn,
        DownloadColumn,
        Progress,
        TextColumn,
        TimeRemainingColumn,
        TransferSpeedColumn,
    )

    console = Console(file=stream)
    if not console.is_terminal or console.is_dumb_terminal:
        return None
    return Progress(
        TextColumn("{task.description}"),
        BarColumn(),
        DownloadColumn(),
        TransferSpeedColumn(),
        TimeRemainingColumn(),
        console=console,
        transient=True,
    )
