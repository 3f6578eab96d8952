"""Following the runs of ``reprobuild verify`` as they go: every run's stdout is streamed
into one :class:`~reprobuild.checks.streams.StreamComparator`; the first divergence or failure stops
the runs still going."""

from __future__ import annotations

import contextlib
import hashlib
import queue
import threading
import time
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from reprobuild._util.threads import start as start_thread
from reprobuild.checks.streams import Divergence, SeriesCollector, StdoutLine, StreamComparator
from reprobuild.checks.terminal import ShownLine, TerminalLines, printable
from reprobuild.checks.verify.launchers import _Run
from reprobuild.checks.volatile import Masker

STDERR_TAIL = 20
"""Lines of each run's stderr kept for the report and for the error of a failed run."""
STOP_GRACE_S = 60.0
"""How long to wait for killed runs to report their exit before giving up on them."""

Log = Callable[[str], None]


@dataclass
class _RunState:
    index: int
    handle: _Run
    out_dir: Path
    record_dir: Path
    started: float
    ended: float | None = None
    exit_code: int | None = None
    killed: bool = False
    eof: bool = False
    """Its stdout ended; the comparator hears of it at its exit (see _Watcher.on_eof)."""
    error: str | None = None
    digest: Any = field(default_factory=hashlib.sha256)
    terminal: TerminalLines = field(default_factory=TerminalLines)
    """Bytes to the lines a reader sees (progress-bar redraws folded, unless turned off)."""
    masker: Masker = field(default_factory=lambda: Masker(()))
    """Each shown line to its compared form (wall-clock fields masked), counting them."""
    stderr: deque[str] = field(default_factory=lambda: deque(maxlen=STDERR_TAIL))
    series: SeriesCollector = field(default_factory=SeriesCollector)
    """The named numbers of its stdout (compared form), for the report's plots."""
    threads: list[threading.Thread] = field(default_factory=list)


Event = tuple[str, int, Any]


def _pump_stdout(state: _RunState, events: queue.Queue[Event]) -> None:
    number = 0

    def put(shown: list[ShownLine]) -> None:
        nonlocal number
        for line in shown:
            number += 1
            state.masker.note_redraws(line.redraws)
            key = state.masker.key(number, line.text)
            state.series.feed(number, key)
            events.put(("line", state.index, StdoutLine(line.text, key)))

    try:
        for chunk in state.handle.stdout():
            state.digest.update(chunk)
            put(state.terminal.feed(chunk))
        put(state.terminal.close())
        events.put(("eof", state.index, None))
    except Exception as exc:
        events.put(("error", state.index, f"lost its stdout: {type(exc).__name__}: {exc}"))
        state.handle.kill()
    try:
        code: int | None = state.handle.wait()
    except Exception as exc:
        events.put(("error", state.index, f"lost its exit status: {type(exc).__name__}: {exc}"))
        code = None
    events.put(("exit", state.index, code))


def _pump_stderr(state: _RunState) -> None:
    lines = TerminalLines(fold=False, max_chars=2000)
    with contextlib.suppress(Exception):
        for chunk in state.handle.stderr():
            state.stderr.extend(printable(line.text) for line in lines.feed(chunk))
    state.stderr.extend(printable(line.text) for line in lines.close())


@dataclass
class _Watch:
    divergence: Divergence | None = None
    failed: int | None = None
    error: tuple[int, str] | None = None
    stopped_early: bool = False


class _Watcher:
    """The watching loop's state, one handler per kind of event."""

    def __init__(self, states: list[_RunState], comparator: StreamComparator, log: Log) -> None:
        self.states = states
        self.comparator = comparator
        self.log = log
        self.watch = _Watch()
        self.running = {state.index for state in states}
        self.stop_deadline: float | None = None

    @property
    def stopping(self) -> bool:
        return self.stop_deadline is not None

    def stop(self, reason: str) -> None:
        if self.stopping:
            return
        self.stop_deadline = time.monotonic() + STOP_GRACE_S
        still = [s for s in self.states if s.index in self.running]
        if still:
            self.watch.stopped_early = True
            shown = ", ".join(str(s.index + 1) for s in still)
            self.log(f"verify: {reason}: stopping run(s) {shown}")
        for state in still:
            state.killed = True
            state.handle.kill()

    def timeout(self) -> float | None:
        if self.stop_deadline is None:
            return None
        return max(0.0, self.stop_deadline - time.monotonic())

    def on_line(self, index: int, value: StdoutLine) -> None:
        if index == 0:
            self.log(f"[1] {printable(value.shown)}")
        if self.stopping:
            return
        found = self.comparator.feed(index, value)
        if found is not None:
            self.watch.divergence = found
            self.stop(f"stdout line {found.line} differs")

    def on_eof(self, index: int, _: Any) -> None:
        """Noted only: a run whose stdout ended early may have failed (a CPU-level refusal
        under ``--cpu``, a crash), and its exit, which always comes next, says which; judged
        here, it would read as "printed a different number of lines" whenever another run had
        printed more by then."""
        self.states[index].eof = True

    def on_error(self, index: int, value: Any) -> None:
        state = self.states[index]
        if state.error is None:
            state.error = str(value)
        if not self.stopping:
            self.watch.error = (index, str(value))
            self.stop(f"run {index + 1} {value}")

    def on_exit(self, index: int, value: Any) -> None:
        state = self.states[index]
        self.running.discard(index)
        state.exit_code = value
        state.ended = time.monotonic()
        if state.killed and value == 0:
            state.killed = False  # it ended on its own before the kill reached it
        if value != 0 and not self.stopping:
            self.watch.failed = index
            self.stop(f"run {index + 1} exited with status {value}")
        elif state.eof and not self.stopping:
            found = self.comparator.end(index)
            if found is not None:
                self.watch.divergence = found
                self.stop(f"run {found.runs[1]} printed a different number of lines")


def _watch(states: list[_RunState], comparator: StreamComparator, log: Log) -> _Watch:
    """Stream every run's stdout into the comparator until all runs exit; the first divergence
    or failure kills the runs still going."""
    events: queue.Queue[Event] = queue.Queue()
    for state in states:
        out = threading.Thread(target=_pump_stdout, args=(state, events), daemon=True)
        err = threading.Thread(target=_pump_stderr, args=(state,), daemon=True)
        state.threads = [out, err]
        start_thread(out)
        start_thread(err)
    watcher = _Watcher(states, comparator, log)
    handlers: dict[str, Callable[[int, Any], None]] = {
        "line": watcher.on_line,
        "eof": watcher.on_eof,
        "error": watcher.on_error,
        "exit": watcher.on_exit,
    }
    while watcher.running:
        try:
            kind, index, value = events.get(timeout=watcher.timeout())
        except queue.Empty:
            break  # killed runs that never reported: close() removes them
        handlers[kind](index, value)
    for state in states:
        for thread in state.threads:
            thread.join(timeout=5)
    return watcher.watch
