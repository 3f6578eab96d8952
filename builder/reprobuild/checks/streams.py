"""Compare what runs produced: stdout lines as they stream in, the numbers in them, JSON
documents and text. Pure: no I/O, no engine (``reprobuild verify`` does the running).

What a difference is reported as:

- a stdout or text line: its 1-based number, both lines, the 1-based column of the first
  differing character and, for the first pair of numbers that differ, how far apart they are
  (:class:`NumericDiff`: absolute and relative difference, and the distance in ulps between the
  two values as float64 and, when both are exact float32 values, as float32);
- a JSON document: the path of each differing key or index (``final.loss``,
  ``history[2].acc``), the kind of change (``changed``, ``type``, ``added``, ``removed``),
  both values, and the numeric distance when both are numbers.

Run numbers are 1-based everywhere; run 1 is the reference every other run is compared with.
"""

from __future__ import annotations

import dataclasses
import json
import math
import re
import struct
from collections import deque
from dataclasses import dataclass
from typing import Any

from reprobuild.checks.terminal import printable

_NUMBER = re.compile(
    r"""
    (?<![\w.])                                     # not glued to a word or another number
    [-+]?
    (?:
        0[xX](?:[0-9a-fA-F]+(?:\.[0-9a-fA-F]*)?|\.[0-9a-fA-F]+)[pP][-+]?\d+   # float.hex()
      | (?:\d+\.\d*|\.\d+|\d+)(?:[eE][-+]?\d+)?    # 12, -0.5, 1e-3, 3.
      | (?i:infinity|inf|nan)
    )
    (?!\w)
    """,
    re.VERBOSE,
)
_INTEGER = re.compile(r"[-+]?\d+")
_IDENTIFIER = re.compile(r"[A-Za-z_][A-Za-z0-9_-]*")
JSON_DIFF_LIMIT = 100
"""The most JSON differences kept per document pair (the first ones, in document order)."""


# ---------------------------------------------------------------------------------- numbers


@dataclass(frozen=True)
class NumericDiff:
    """How far apart two numbers are. ``abs_diff`` and ``rel_diff`` are None when not finite
    (a nan or an infinity is involved); ``rel_diff`` is relative to the larger magnitude."""

    a: str
    b: str
    abs_diff: int | float | None
    rel_diff: float | None
    ulps: int | None = None
    """Distance between the two values as float64, in units in the last place: 1 means
    neighbouring doubles. None for two integers or a non-finite value."""
    ulps_f32: int | None = None
    """The same in float32, when both values are exactly float32 values (what a float32 tensor's
    ``.item()`` prints)."""

    def to_dict(self) -> dict[str, Any]:
        return {
            "a": self.a,
            "b": self.b,
            "abs_diff": self.abs_diff,
            "rel_diff": self.rel_diff,
            "ulps": self.ulps,
            "ulps_f32": self.ulps_f32,
        }

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> NumericDiff:
        return cls(
            a=str(data["a"]),
            b=str(data["b"]),
            abs_diff=data.get("abs_diff"),
            rel_diff=data.get("rel_diff"),
            ulps=data.get("ulps"),
            ulps_f32=data.get("ulps_f32"),
        )

    def describe(self) -> str:
        parts = [f"{self.a} vs {self.b}"]
        if self.abs_diff is not None:
            parts.append(f"abs {_g(self.abs_diff)}")
        if self.rel_diff is not None:
            parts.append(f"rel {_g(self.rel_diff)}")
        if self.ulps_f32 is not None:
            parts.append(f"{self.ulps_f32} ulps (float32)")
        if self.ulps is not None:
            parts.append(f"{self.ulps} ulps (float64)")
        return ", ".join(parts)


def _g(value: int | float) -> str:
    return str(value) if isinstance(value, int) else f"{value:.6g}"


def is_number(token: str) -> bool:
    return _NUMBER.fullmatch(token) is not None


def _parse_number(token: str) -> int | float:
    if _INTEGER.fullmatch(token):
        return int(token)
    if "x" in token.lower():
        return float.fromhex(token)
    return float(token)


def _ordered(bits: int, sign: int) -> int:
    """IEEE 754 bit patterns mapped onto integers that count ulps across zero."""
    return -(bits & ~sign) if bits & sign else bits


def _ulps64(a: float, b: float) -> int:
    sign = 1 << 63
    (ia,) = struct.unpack("<Q", struct.pack("<d", a))
    (ib,) = struct.unpack("<Q", struct.pack("<d", b))
    return abs(_ordered(ia, sign) - _ordered(ib, sign))


def _as_f32(value: float) -> int | None:
    try:
        packed = struct.pack("<f", value)
    except OverflowError:
        return None
    if struct.unpack("<f", packed)[0] != value:
        return None
    (bits,) = struct.unpack("<I", packed)
    return int(bits)


def _ulps32(a: float, b: float) -> int | None:
    ia, ib = _as_f32(a), _as_f32(b)
    if ia is None or ib is None:
        return None
    sign = 1 << 31
    return abs(_ordered(ia, sign) - _ordered(ib, sign))


def numeric_distance(a: str, b: str) -> NumericDiff | None:
    """The distance between two number tokens as printed; None unless both are numbers."""
    if not (is_number(a) and is_number(b)):
        return None
    try:
        va, vb = _parse_number(a), _parse_number(b)
    except (ValueError, OverflowError):
        return None
    return _distance(a, b, va, vb)


def _distance(a: str, b: str, va: int | float, vb: int | float) -> NumericDiff:
    if isinstance(va, int) and isinstance(vb, int):
        diff = abs(va - vb)
        scale = max(abs(va), abs(vb))
        return NumericDiff(a, b, diff, 0.0 if scale == 0 else diff / scale)
    try:
        fa, fb = float(va), float(vb)
    except OverflowError:
        return NumericDiff(a, b, None, None)
    if not (math.isfinite(fa) and math.isfinite(fb)):
        return NumericDiff(a, b, None, None)
    diff_f = abs(fa - fb)
    scale_f = max(abs(fa), abs(fb))
    return NumericDiff(
        a,
        b,
        diff_f if math.isfinite(diff_f) else None,
        0.0 if scale_f == 0 else diff_f / scale_f if math.isfinite(diff_f) else None,
        _ulps64(fa, fb),
        _ulps32(fa, fb),
    )


# ------------------------------------------------------------------------------------ lines


def tokenize(line: str) -> list[str]:
    """Split a line into alternating text and number tokens (empty text tokens dropped);
    ``"".join(tokenize(line)) == line``."""
    tokens: list[str] = []
    pos = 0
    for match in _NUMBER.finditer(line):
        if match.start() > pos:
            tokens.append(line[pos : match.start()])
        tokens.append(match.group())
        pos = match.end()
    if pos < len(line):
        tokens.append(line[pos:])
    return tokens


def first_column(a: str, b: str) -> int:
    """1-based column of the first character where two different strings differ."""
    for index, (ca, cb) in enumerate(zip(a, b, strict=False)):
        if ca != cb:
            return index + 1
    return min(len(a), len(b)) + 1


def line_numeric_diff(a: str, b: str) -> NumericDiff | None:
    """The first pair of numbers that differ, scanning both lines token by token while their
    shapes agree (text against text, a number against a number); None when there is none."""
    for ta, tb in zip(tokenize(a), tokenize(b), strict=False):
        na, nb = is_number(ta), is_number(tb)
        if na != nb:
            return None
        if na and ta != tb:
            return numeric_distance(ta, tb)
    return None


@dataclass(frozen=True)
class Divergence:
    """The first certain difference between the reference run and another run."""

    where: str
    """``stdout``, or ``output`` (a declared output file)."""
    runs: tuple[int, int]
    """(reference run, diverging run), 1-based."""
    detail: str
    """One sentence saying what differs."""
    line: int | None = None
    """1-based line of stdout or of a text output file."""
    column: int | None = None
    file: str | None = None
    """The output file, relative to the run's output directory."""
    key: str | None = None
    """The JSON path inside a JSON output file (``final.loss``, ``history[2]``)."""
    offset: int | None = None
    """First differing byte of a binary output file."""
    a: str | None = None
    """The reference run's value (a line, or a JSON value as JSON text); None when absent."""
    b: str | None = None
    numeric: NumericDiff | None = None
    json_differences: tuple[JsonDifference, ...] = ()
    """Every difference in a JSON output file (the first :data:`JSON_DIFF_LIMIT`)."""
    epoch: str | None = None
    """Where run 1 was at a stdout divergence: the last ``epoch N`` it printed."""
    value: str | None = None
    """The name printed before the first differing number (``loss``)."""
    a_compared: str | None = None
    """Run 1's line as compared (wall-clock fields masked) when that differs from ``a``;
    ``column`` counts in this form then."""
    b_compared: str | None = None

    def to_dict(self) -> dict[str, Any]:
        return {
            "where": self.where,
            "runs": list(self.runs),
            "detail": self.detail,
            "line": self.line,
            "column": self.column,
            "file": self.file,
            "key": self.key,
            "offset": self.offset,
            "a": self.a,
            "b": self.b,
            "numeric": None if self.numeric is None else self.numeric.to_dict(),
            "json_differences": [d.to_dict() for d in self.json_differences],
            "epoch": self.epoch,
            "value": self.value,
            "a_compared": self.a_compared,
            "b_compared": self.b_compared,
        }

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> Divergence:
        first, second = data["runs"]
        numeric = data.get("numeric")
        return cls(
            where=str(data["where"]),
            runs=(int(first), int(second)),
            detail=str(data["detail"]),
            line=data.get("line"),
            column=data.get("column"),
            file=data.get("file"),
            key=data.get("key"),
            offset=data.get("offset"),
            a=data.get("a"),
            b=data.get("b"),
            numeric=None if numeric is None else NumericDiff.from_dict(numeric),
            json_differences=tuple(
                JsonDifference.from_dict(d) for d in data.get("json_differences") or ()
            ),
            epoch=data.get("epoch"),
            value=data.get("value"),
            a_compared=data.get("a_compared"),
            b_compared=data.get("b_compared"),
        )


def line_divergence(
    where: str, runs: tuple[int, int], line: int, a: str | None, b: str | None, **extra: Any
) -> Divergence:
    """A divergence at 1-based ``line``; ``a``/``b`` None when that run has no such line."""
    other = runs[1]
    if a is None:
        detail = f"run {other} printed line {line}, run {runs[0]} ended after {line - 1} lines"
    elif b is None:
        detail = f"run {other} ended after {line - 1} lines, run {runs[0]} printed line {line}"
    else:
        detail = f"line {line} differs between run {runs[0]} and run {other}"
    return Divergence(
        where=where,
        runs=runs,
        detail=detail,
        line=line,
        column=first_column(a, b) if a is not None and b is not None else None,
        a=a,
        b=b,
        numeric=line_numeric_diff(a, b) if a is not None and b is not None else None,
        **extra,
    )


def first_line_difference(a: list[str], b: list[str]) -> tuple[int, str | None, str | None]:
    """(1-based line, line of a, line of b) of the first difference; (0, None, None) when the
    two are equal. A line past the end of one side is None."""
    for index in range(max(len(a), len(b))):
        la = a[index] if index < len(a) else None
        lb = b[index] if index < len(b) else None
        if la != lb:
            return index + 1, la, lb
    return 0, None, None


@dataclass(frozen=True)
class StdoutLine:
    """One line of a run's stdout: as shown (what a reader sees, see
    :mod:`reprobuild.checks.terminal`) and as compared (``key``: the shown text with wall-clock
    fields masked, see :mod:`reprobuild.checks.volatile`)."""

    shown: str
    key: str

    @classmethod
    def plain(cls, text: str) -> StdoutLine:
        return cls(text, text)


_EPOCH = re.compile(r"(?i)(?<![\w])epoch\s*[:#=]?\s*(\d+)(?!\d)")
_NOT_NAMES = frozenset(
    {"a", "an", "and", "are", "after", "at", "before", "by", "for", "from", "in", "is"}
    | {"of", "on", "or", "the", "to", "took", "was", "were", "with"}
)
"""Words that stand before a number without naming it (``step 2 at 1700000000.25``)."""
_VALUE_NAME = re.compile(r"([A-Za-z_][\w.]*)\s*[:=]?\s*$")


def epoch_of(text: str) -> str | None:
    """The last ``epoch N`` a line names (``Epoch 2/5``, ``epoch=3``), as ``epoch N``."""
    found = _EPOCH.findall(text)
    return f"epoch {found[-1]}" if found else None


def value_name(a: str, b: str) -> str | None:
    """The name printed before the first differing number of two lines (``loss`` for
    ``- loss: 0.4123``), when the text before it is the same in both."""
    previous = ""
    for ta, tb in zip(tokenize(a), tokenize(b), strict=False):
        if is_number(ta) != is_number(tb):
            return None
        if not is_number(ta):
            previous = ta
        elif ta != tb:
            match = _VALUE_NAME.search(previous)
            if match is None or match.group(1).lower() in _NOT_NAMES:
                return None
            return match.group(1)
    return None


# ----------------------------------------------------------------------------- series


STEP_NAMES = ("step", "iteration", "iter", "it", "batch", "epoch")
"""Names of the counter a line's other numbers are plotted against, most specific first
(``epoch 2 step 300 loss 0.4``: step 300)."""
MAX_SERIES = 12
"""The most named series kept per run (the first names seen)."""
MAX_POINTS = 50_000
"""The most points kept per run, all series together: a report stays a few MB at most."""
MAX_LINES = 200_000
"""The most stdout lines read for series per run (about 15 us each for a line of 5 numbers):
what reading costs a run that prints millions of lines stays bounded."""


def named_numbers(text: str) -> list[tuple[str, str]]:
    """``(name, number)`` for every number that a name stands right before (``loss 0.41``,
    ``- acc: 0.9``, ``lr=1e-3``), in line order; the names are :func:`value_name`'s."""
    return _named(tokenize(text))


def _named(tokens: list[str]) -> list[tuple[str, str]]:
    found: list[tuple[str, str]] = []
    previous = ""
    for token in tokens:
        if not is_number(token):
            previous = token
            continue
        match = _VALUE_NAME.search(previous)
        previous = ""
        if match is not None and match.group(1).lower() not in _NOT_NAMES:
            found.append((match.group(1), token))
    return found


_COLUMN_GAP = re.compile(r"\s+|\s*[,;|]\s*")
"""What stands between two bare numbers: blanks, or one comma, semicolon or bar."""


def number_columns(text: str) -> list[tuple[int, str]]:
    """``(column, number)`` for a line of bare numbers (``99 8.376``, ``3, 0.5, -1e-3``,
    ``7\tnan``): numbers and nothing else but blanks, commas, semicolons or bars between them;
    ``column`` is the number's 1-based place in the line. Empty for any other line (a word, a
    unit, ``2.13.0``, ``10/100``, a date, a bracket: nothing is taken from it)."""
    return _columns(tokenize(text))


def _columns(tokens: list[str]) -> list[tuple[int, str]]:
    found: list[tuple[int, str]] = []
    after_number = False
    last = len(tokens) - 1
    for index, token in enumerate(tokens):
        if is_number(token):
            if after_number:  # ``2.13`` then ``.0``: one word, not two numbers
                return []
            found.append((len(found) + 1, token))
            after_number = True
            continue
        gap = _COLUMN_GAP.fullmatch(token) is not None
        if not (token.isspace() if index in (0, last) else gap):
            return []
        after_number = False
    return found


Number = int | float


@dataclass(frozen=True)
class MetricSeries:
    """One named number of one run's stdout (or one column of its lines of bare numbers,
    ``column 2``), in order: the step it was printed at (the line's ``step``/``epoch`` counter,
    or its first integer on a line of bare numbers; else its 1-based count) and its value
    (None: nan or infinite)."""

    steps: tuple[Number, ...]
    values: tuple[Number | None, ...]

    def to_dict(self) -> dict[str, Any]:
        return {"steps": list(self.steps), "values": list(self.values)}

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> MetricSeries:
        steps, values = tuple(data["steps"]), tuple(data["values"])
        if len(steps) != len(values):
            raise ValueError("a series has as many steps as values")
        if not all(is_json_number(s) for s in steps):
            raise ValueError("a series' steps are numbers")
        if not all(v is None or is_json_number(v) for v in values):
            raise ValueError("a series' values are numbers or null")
        return cls(steps, values)


def is_json_number(value: object) -> bool:
    """A finite int or float, not a bool."""
    if isinstance(value, bool):
        return False
    return isinstance(value, int) or (isinstance(value, float) and math.isfinite(value))


class SeriesCollector:
    """The named numbers of one run's stdout lines (their compared form: wall-clock fields are
    masked out before they get here), as :class:`MetricSeries`, bounded by
    :data:`MAX_SERIES`, :data:`MAX_POINTS` and :data:`MAX_LINES`; the numbers are read by
    :func:`tokenize`, as the comparison reads them.

    A line that names no number but is bare numbers (:func:`number_columns`, ``99 8.376``, as
    PyTorch's tutorial prints ``t, loss.item()``) gives one point to ``column N`` for each of
    its numbers but the first integer, which is their step. A line that names a number is read
    for its named numbers only (``5 loss 0.2``: loss, the 5 is not a column)."""

    def __init__(self) -> None:
        self._steps: dict[str, list[Number]] = {}
        self._values: dict[str, list[Number | None]] = {}
        self._lines: dict[str, list[int]] = {}
        self._points = 0
        self._lines_read = 0
        self.truncated = False
        """Some numbers were left out (more names or points than the bounds)."""

    def feed(self, line: int, text: str) -> None:
        """One stdout line, by its 1-based number."""
        self._lines_read += 1
        if self._points >= MAX_POINTS or self._lines_read > MAX_LINES:
            # full: the line is not even read, only looked at for a digit
            self.truncated = self.truncated or any(c.isdigit() for c in text)
            return
        tokens = tokenize(text)
        pairs = _named(tokens)
        if pairs:
            self._add(line, _named_step(pairs), _named_points(pairs))
        else:
            self._add(line, *_column_points(_columns(tokens)))

    def _add(self, line: int, step: Number | None, points: list[tuple[str, str]]) -> None:
        """``points``: (series name, number) printed on ``line`` at ``step`` (None: each
        series' count)."""
        for name, token in points:
            if name not in self._values and len(self._values) >= MAX_SERIES:
                self.truncated = True
                continue
            if self._points >= MAX_POINTS:
                self.truncated = True
                return
            values = self._values.setdefault(name, [])
            steps = self._steps.setdefault(name, [])
            self._lines.setdefault(name, []).append(line)
            steps.append(step if step is not None else len(values) + 1)
            values.append(_finite(token))
            self._points += 1

    def series(self) -> dict[str, MetricSeries]:
        """A consistent copy, even while another thread still feeds lines (a run whose stdout
        verify stopped waiting for): each series cut to its points complete in both lists."""
        out: dict[str, MetricSeries] = {}
        for name, values in list(self._values.items()):
            steps = self._steps.get(name, [])
            n = min(len(steps), len(values))
            out[name] = MetricSeries(tuple(steps[:n]), tuple(values[:n]))
        return out

    def steps_at(self, line: int) -> dict[str, Number]:
        """Per series, the step of its first point printed on ``line`` or after it: where a
        divergence at that stdout line shows in each plot."""
        out: dict[str, Number] = {}
        for name, lines in list(self._lines.items()):
            steps = self._steps.get(name, [])
            for index, number in enumerate(lines[: len(steps)]):
                if number >= line:
                    out[name] = steps[index]
                    break
        return out


def _named_step(pairs: list[tuple[str, str]]) -> Number | None:
    """The step counter among a line's named numbers, the most specific of
    :data:`STEP_NAMES` (the first of that name)."""
    step: Number | None = None
    rank = len(STEP_NAMES)
    for name, token in pairs:
        lowered = name.lower()
        if lowered in STEP_NAMES and STEP_NAMES.index(lowered) < rank:
            rank, step = STEP_NAMES.index(lowered), _finite(token)
    return step


def _named_points(pairs: list[tuple[str, str]]) -> list[tuple[str, str]]:
    return [(name, token) for name, token in pairs if name.lower() not in STEP_NAMES]


def differing_column(a: str, b: str) -> str | None:
    """The series (``column 2``) of the first differing number of two lines of bare numbers
    (:func:`number_columns`) with as many columns; None for any other pair."""
    ca, cb = number_columns(a), number_columns(b)
    if not ca or len(ca) != len(cb):
        return None
    return next((column_name(c) for (c, ta), (_, tb) in zip(ca, cb, strict=True) if ta != tb), None)


def column_name(column: int) -> str:
    """The series of a line's bare number in ``column`` (1-based): ``column 2``."""
    return f"column {column}"


def _column_points(
    columns: list[tuple[int, str]],
) -> tuple[Number | None, list[tuple[str, str]]]:
    """A line of bare numbers as (step, points): its first integer is the step, every other
    number a point of ``column N``; no integer, no step (each series counts its points)."""
    step_column = next((c for c, token in columns if _INTEGER.fullmatch(token)), None)
    step = next((_finite(token) for c, token in columns if c == step_column), None)
    points = [(column_name(c), token) for c, token in columns if c != step_column]
    return step, points


def _finite(token: str) -> Number | None:
    try:
        value = _parse_number(token)
    except (ValueError, OverflowError):
        return None
    if isinstance(value, float) and not math.isfinite(value):
        return None
    if isinstance(value, int) and abs(value) > 2**53:
        return float(value)  # a JSON reader takes a number of at most 100 characters
    return value


class StreamComparator:
    """Compare the stdout lines of N runs with run 1's as they arrive, in any interleaving.

    :meth:`feed` takes one line of one run (0-based run index, lines in order), :meth:`end`
    says a run's stdout is complete. Lines are equal when their ``key`` is. Each call returns
    the first :class:`Divergence` as soon as it is certain: line *k* of both runs is known and
    differs, or one run ended and the other has a line past its end. Memory: run 1's lines are
    kept only until every run has passed them, another run's only until run 1 reaches them.
    The divergence names the epoch run 1 was in (the last ``epoch N`` it printed up to that
    line) and the name of the differing value.
    """

    def __init__(self, runs: int) -> None:
        if runs < 2:
            raise ValueError("comparing needs at least two runs")
        self._runs = runs
        self._ref: deque[tuple[StdoutLine, str | None]] = deque()
        self._ref_start = 0
        self._ahead: list[deque[StdoutLine]] = [deque() for _ in range(runs)]
        self._count = [0] * runs
        self._ended = [False] * runs
        self._epoch: str | None = None
        self.divergence: Divergence | None = None

    @property
    def counts(self) -> tuple[int, ...]:
        """Lines received per run."""
        return tuple(self._count)

    @property
    def lines_compared(self) -> int:
        """Lines known to be equal in every run."""
        if self.divergence is not None and self.divergence.line is not None:
            return min(min(self._count), self.divergence.line - 1)
        return min(self._count)

    @property
    def finished(self) -> bool:
        """Every run ended and no line differed."""
        return self.divergence is None and all(self._ended)

    def feed(self, run: int, line: StdoutLine | bytes | str) -> Divergence | None:
        if self.divergence is not None:
            return self.divergence
        if self._ended[run]:
            raise ValueError(f"run {run + 1} already ended")
        if not isinstance(line, StdoutLine):
            line = StdoutLine.plain(
                line.decode("utf-8", "surrogateescape") if isinstance(line, bytes) else line
            )
        index = self._count[run]
        self._count[run] += 1
        if run == 0:
            self._epoch = epoch_of(line.shown) or self._epoch
            self._ref.append((line, self._epoch))
            for other in range(1, self._runs):
                if self._ahead[other]:
                    theirs = self._ahead[other].popleft()
                    if theirs.key != line.key:
                        return self._found(other, index, line, theirs)
        elif index < self._count[0]:
            ours, _ = self._ref[index - self._ref_start]
            if line.key != ours.key:
                return self._found(run, index, ours, line)
        else:
            self._ahead[run].append(line)
        self._prune()
        return self._check_lengths()

    def end(self, run: int) -> Divergence | None:
        if self.divergence is not None:
            return self.divergence
        self._ended[run] = True
        return self._check_lengths()

    def _prune(self) -> None:
        keep_from = min(self._count[1:])
        while self._ref and self._ref_start < keep_from:
            self._ref.popleft()
            self._ref_start += 1

    def _check_lengths(self) -> Divergence | None:
        ref_count = self._count[0]
        for other in range(1, self._runs):
            count = self._count[other]
            if self._ended[other] and ref_count > count:
                ours, _ = self._ref[count - self._ref_start]
                return self._found(other, count, ours, None)
            if self._ended[0] and count > ref_count:
                return self._found(other, ref_count, None, self._ahead[other][0])
        return None

    def _context(self, index: int) -> str | None:
        offset = index - self._ref_start
        if 0 <= offset < len(self._ref):
            return self._ref[offset][1]
        return self._epoch

    def _found(
        self, other: int, index: int, ours: StdoutLine | None, theirs: StdoutLine | None
    ) -> Divergence:
        self.divergence = stdout_divergence(
            (1, other + 1), index + 1, ours, theirs, self._context(index)
        )
        return self.divergence


def stdout_divergence(
    runs: tuple[int, int],
    line: int,
    ours: StdoutLine | None,
    theirs: StdoutLine | None,
    epoch: str | None = None,
) -> Divergence:
    """The divergence at stdout ``line``: both lines as shown, the numbers compared in their
    compared form (wall-clock fields masked), where run 1 was (``epoch``)."""
    a = None if ours is None else printable(ours.shown)
    b = None if theirs is None else printable(theirs.shown)
    base = line_divergence("stdout", runs, line, a, b)
    if ours is None or theirs is None:
        return dataclasses.replace(base, epoch=epoch)
    masked = ours.key != ours.shown or theirs.key != theirs.shown
    key_a, key_b = printable(ours.key), printable(theirs.key)
    numeric = line_numeric_diff(key_a, key_b)
    name = None
    if numeric is not None:
        name = value_name(key_a, key_b) or differing_column(key_a, key_b)
    detail = base.detail
    where = ", ".join(x for x in (epoch, name) if x)
    if where:
        detail += f" ({where})"
    return dataclasses.replace(
        base,
        detail=detail,
        column=first_column(key_a, key_b),
        numeric=numeric,
        epoch=epoch,
        value=name,
        a_compared=key_a if masked else None,
        b_compared=key_b if masked else None,
    )


# ------------------------------------------------------------------------------------- JSON


@dataclass(frozen=True)
class JsonDifference:
    """One difference between two JSON documents, from document ``a`` to document ``b``."""

    path: tuple[str | int, ...]
    kind: str
    """``changed`` (same type, other value), ``type`` (another JSON type: ``1`` vs ``1.0``
    counts), ``added`` (only in b), ``removed`` (only in a)."""
    a: Any = None
    """The value in a; None when absent (``added``): ``kind`` tells absent from null."""
    b: Any = None
    numeric: NumericDiff | None = None

    @property
    def where(self) -> str:
        return format_path(self.path)

    def to_dict(self) -> dict[str, Any]:
        return {
            "path": list(self.path),
            "where": self.where,
            "kind": self.kind,
            "a": self.a,
            "b": self.b,
            "numeric": None if self.numeric is None else self.numeric.to_dict(),
        }

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> JsonDifference:
        numeric = data.get("numeric")
        return cls(
            path=tuple(data["path"]),
            kind=str(data["kind"]),
            a=data.get("a"),
            b=data.get("b"),
            numeric=None if numeric is None else NumericDiff.from_dict(numeric),
        )


def format_path(path: tuple[str | int, ...]) -> str:
    """``("history", 2, "loss")`` -> ``history[2].loss``; keys that are not identifiers are
    quoted (``["a b"]``); the empty path (the whole document) is ``$``."""
    out = ""
    for part in path:
        if isinstance(part, int):
            out += f"[{part}]"
        elif _IDENTIFIER.fullmatch(part):
            out += f".{part}" if out else part
        else:
            out += f"[{json.dumps(part)}]"
    return out or "$"


def json_type(value: Any) -> str:
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "boolean"
    if isinstance(value, int):
        return "integer"
    if isinstance(value, float):
        return "number"
    if isinstance(value, str):
        return "string"
    if isinstance(value, list):
        return "array"
    if isinstance(value, dict):
        return "object"
    raise TypeError(f"not a JSON value: {type(value).__name__}")


def _json_numeric(a: Any, b: Any) -> NumericDiff | None:
    numbers = ("integer", "number")
    if json_type(a) not in numbers or json_type(b) not in numbers:
        return None
    return _distance(json.dumps(a), json.dumps(b), a, b)


def diff_json(a: Any, b: Any, *, limit: int = JSON_DIFF_LIMIT) -> list[JsonDifference]:
    """Every difference between two parsed JSON documents (the first ``limit``), in the order
    of document ``a`` (keys only in ``b`` after a's keys). Types are strict: ``true`` is not
    ``1`` and ``1`` is not ``1.0``; two NaNs are equal."""
    out: list[JsonDifference] = []
    _walk(a, b, (), out, limit)
    return out


def _walk(
    a: Any, b: Any, path: tuple[str | int, ...], out: list[JsonDifference], limit: int
) -> None:
    if len(out) >= limit:
        return
    ta, tb = json_type(a), json_type(b)
    if ta != tb:
        out.append(JsonDifference(path, "type", a, b, _json_numeric(a, b)))
        return
    if ta == "object":
        for key, value in a.items():
            if key in b:
                _walk(value, b[key], (*path, key), out, limit)
            elif len(out) < limit:
                out.append(JsonDifference((*path, key), "removed", value, None))
        for key, value in b.items():
            if key not in a and len(out) < limit:
                out.append(JsonDifference((*path, key), "added", None, value))
        return
    if ta == "array":
        for index in range(max(len(a), len(b))):
            if index >= len(b):
                if len(out) < limit:
                    out.append(JsonDifference((*path, index), "removed", a[index], None))
            elif index >= len(a):
                if len(out) < limit:
                    out.append(JsonDifference((*path, index), "added", None, b[index]))
            else:
                _walk(a[index], b[index], (*path, index), out, limit)
        return
    if a == b or (ta == "number" and math.isnan(a) and math.isnan(b)):
        return
    out.append(JsonDifference(path, "changed", a, b, _json_numeric(a, b)))


def json_text(value: Any) -> str:
    """A JSON value as compact JSON text (what reports show for a or b)."""
    return json.dumps(value, sort_keys=True, ensure_ascii=False)
