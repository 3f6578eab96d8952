"""verify's watching loop, event by event: a run whose stdout ends early and which then exits
non-zero is that run's failure, not "a different number of lines" (issue 31: under ``--cpu`` an
emulated leg refused at start-up while the native leg had already printed). A pump thread
always sends a run's ``eof`` before its ``exit``, so that order is the one tested."""

from __future__ import annotations

from pathlib import Path

from reprobuild.checks.streams import StdoutLine, StreamComparator
from reprobuild.checks.verify.watcher import _RunState, _Watcher


class _Handle:
    def __init__(self) -> None:
        self.kills = 0

    def kill(self) -> None:
        self.kills += 1


def _watcher(tmp_path: Path, runs: int = 2) -> tuple[_Watcher, list[_RunState]]:
    states = [
        _RunState(i, _Handle(), tmp_path, tmp_path, started=0.0)  # type: ignore[arg-type]
        for i in range(runs)
    ]
    return _Watcher(states, StreamComparator(runs), lambda _: None), states


def _line(text: str) -> StdoutLine:
    return StdoutLine(text, text)


def test_a_run_that_ends_early_and_fails_is_a_failure(tmp_path: Path) -> None:
    watcher, states = _watcher(tmp_path)
    watcher.on_line(0, _line("loss 0.5"))
    watcher.on_eof(1, None)  # the refused leg: no line at all
    watcher.on_exit(1, 3)
    assert watcher.watch.failed == 1
    assert watcher.watch.divergence is None
    assert states[0].killed and not states[1].killed


def test_a_run_that_ends_early_and_exits_zero_diverged(tmp_path: Path) -> None:
    watcher, _ = _watcher(tmp_path)
    watcher.on_line(0, _line("loss 0.5"))
    watcher.on_eof(1, None)
    watcher.on_exit(1, 0)
    assert watcher.watch.failed is None
    divergence = watcher.watch.divergence
    assert divergence is not None and divergence.runs[1] == 2


def test_runs_that_agree_to_the_end_are_neither(tmp_path: Path) -> None:
    watcher, states = _watcher(tmp_path)
    for index in (0, 1):
        watcher.on_line(index, _line("loss 0.5"))
    for index in (0, 1):
        watcher.on_eof(index, None)
        watcher.on_exit(index, 0)
    assert watcher.watch.failed is None and watcher.watch.divergence is None
    assert not watcher.running and not any(s.killed for s in states)
