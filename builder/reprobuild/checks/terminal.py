"""A program's output as a terminal would show it, line by line, with bounded memory.

Training code redraws its progress line: Keras' ``fit(verbose=1)`` writes ``\\b`` times the
last frame's width, then ``\\r`` and the next frame; tqdm writes ``\\r`` and the next frame.
How many frames a line gets depends on the speed of the machine, so the bytes of two
bit-identical runs differ while what a reader sees at the end of the line does not.
:class:`TerminalLines` turns the bytes a program writes into the lines a terminal shows:

- ``\\r`` goes back to column 0 and ``\\b`` one column back; what is written next overwrites
  what was there (``\\r\\n`` is a plain line end);
- ``ESC [ K`` erases to the end of the line, ``ESC [ 1 K`` up to the cursor, ``ESC [ 2 K``
  the whole line; every other ANSI control sequence (colours, bold, cursor moves between
  lines) is dropped: it is not text;
- trailing blanks of a line that was redrawn are dropped (progress bars pad a shorter frame
  with spaces to wipe the longer one before it);
- bytes that are not UTF-8 are kept, each as its own character (``surrogateescape``), so two
  different invalid bytes never compare equal.

With ``fold=False`` only newlines split: each line is kept as written (``\\r`` and all).

Memory is bounded: a line keeps at most :data:`MAX_LINE_CHARS` characters; past that the
rest is counted, not kept, and the line ends with ``[... N more characters]``.
"""

from __future__ import annotations

import codecs
import re
from dataclasses import dataclass

MAX_LINE_CHARS = 1 << 20
"""The most characters kept of one line (a program that never writes a newline cannot make
verify hold its whole output)."""

_CONTROL = re.compile(
    r"""
      \r\n | \n | \r | \x08
    | \x1b\[ (?P<params>[0-9;?]*) [ -/]* (?P<final>[@-~])   # CSI: colours, erase, moves
    | \x1b\] [^\x07\x1b]* (?:\x07|\x1b\\)                   # OSC: window titles, links
    | \x1b [@-Z\\-_]                                        # other two-byte escapes
    """,
    re.VERBOSE,
)
_PARTIAL_ESCAPE = re.compile(r"\x1b(?:\[[0-9;?]*[ -/]*|\][^\x07\x1b]*)?\Z")
"""An escape sequence cut by the end of a chunk: held until the next chunk completes it."""


@dataclass(frozen=True)
class ShownLine:
    """One line as a reader sees it."""

    text: str
    """The line; may hold ``surrogateescape`` characters (see :func:`printable`)."""
    redraws: int = 0
    """How many times part of the line was overwritten (progress-bar frames folded away)."""
    dropped: int = 0
    """Characters past :data:`MAX_LINE_CHARS`, counted and not kept."""


def printable(text: str) -> str:
    """``text`` with invalid bytes shown as U+FFFD, safe to print or write as UTF-8."""
    return text.encode("utf-8", "surrogateescape").decode("utf-8", "replace")


class TerminalLines:
    """Bytes in as a program writes them, finished lines out (:meth:`feed`, :meth:`close`)."""

    def __init__(self, *, fold: bool = True, max_chars: int = MAX_LINE_CHARS) -> None:
        self.fold = fold
        self._max = max_chars
        self._decoder = codecs.getincrementaldecoder("utf-8")("surrogateescape")
        self._held = ""
        self._cells: list[str] = []
        self._col = 0
        self._redraws = 0
        self._dropped = 0
        self._moved = False

    # ------------------------------------------------------------------------------ input
    def feed(self, chunk: bytes) -> list[ShownLine]:
        text = self._held + self._decoder.decode(chunk)
        self._held = ""
        if self.fold:
            partial = _PARTIAL_ESCAPE.search(text)
            if partial is not None:
                self._held = text[partial.start() :]
                text = text[: partial.start()]
        return self._consume(text)

    def close(self) -> list[ShownLine]:
        """The last line when the output did not end with a newline."""
        text = self._held + self._decoder.decode(b"", final=True)
        self._held = ""
        lines = self._consume(text)
        if self._cells or self._dropped or self._redraws:
            lines.append(self._finish())
        return lines

    def _consume(self, text: str) -> list[ShownLine]:
        if not self.fold:
            return self._split(text)
        lines: list[ShownLine] = []
        pos = 0
        for match in _CONTROL.finditer(text):
            if match.start() > pos:
                self._write(text[pos : match.start()])
            pos = match.end()
            token = match.group()
            if token in ("\n", "\r\n"):
                lines.append(self._finish())
            elif token == "\r":
                self._col = 0
                self._moved = True
            elif token == "\x08":
                self._col = max(0, self._col - 1)
                self._moved = True
            elif match.group("final") == "K":
                self._erase(match.group("params"))
        if pos < len(text):
            self._write(text[pos:])
        return lines

    def _split(self, text: str) -> list[ShownLine]:
        *done, rest = text.split("\n")
        lines: list[ShownLine] = []
        for piece in done:
            self._write(piece)
            lines.append(self._finish())
        if rest:
            self._write(rest)
        return lines

    # ---------------------------------------------------------------------------- the line
    def _write(self, text: str) -> None:
        col = self._col
        if col < len(self._cells) and self._moved:
            self._redraws += 1
        self._moved = False
        room = self._max - col
        if len(text) > room:
            self._dropped += len(text) - max(room, 0)
            text = text[: max(room, 0)]
        if col == len(self._cells):
            self._cells.extend(text)
        else:
            self._cells[col : col + len(text)] = text
        self._col = col + len(text)

    def _erase(self, params: str) -> None:
        if params in ("", "0"):
            del self._cells[self._col :]
        elif params == "1":
            self._cells[: self._col] = " " * min(self._col, len(self._cells))
        elif params == "2":
            self._cells[:] = " " * len(self._cells)
        self._moved = True

    def _finish(self) -> ShownLine:
        text = "".join(self._cells)
        if self._redraws:
            text = text.rstrip(" ")
        if self._dropped:
            text += f"[... {self._dropped} more characters]"
        line = ShownLine(text, self._redraws, self._dropped)
        self._cells = []
        self._col = 0
        self._redraws = 0
        self._dropped = 0
        self._moved = False
        return line
