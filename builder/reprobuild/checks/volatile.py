"""Wall-clock fields in a run's output: found, counted, and left out of the comparison.

Training code prints how long things took next to what it computed: Keras' ``3s 2ms/step``,
tqdm's ``[00:03<00:00, 12.34it/s]``, ``epoch took 3.2 s``, a log line's timestamp. Those
figures measure the machine, not the training, and no two runs print the same ones.
:class:`Masker` replaces each such field with a placeholder (``<duration>``, ``<rate>``...) in
the form that is compared, and leaves every other character alone but the spaces that pad a
masked field to its column (one space is kept): a loss, an accuracy, a step count is compared
to the last digit even on a line that also holds a timing.

The built-in rules (:data:`DEFAULT_RULES`) are deliberately narrow: a number is taken for a
time only by its unit (``3s``, ``2ms/step``, ``12it/s``), its shape (``12:03:55``,
``2026-11-23T12:00:00Z``, tqdm's ``00:03<00:12``) or the word before it (``took 3.2``,
``elapsed: 41``, ``epoch_time=3.2``). Users add their own (``--ignore REGEX``) and can turn
the built-in ones off. Every field left out is counted per rule with its first example, so a
report shows exactly what was not compared.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

MAX_PATTERN_CHARS = 1000
MAX_PATTERNS = 64
EXAMPLE_CHARS = 200
"""A rule's example line is kept cut to this many characters."""

_UNIT_TIME = r"(?:ns|us|µs|ms|s|sec|secs|seconds?|min|mins|minutes?|h|hrs?|hours?)"
_NUM = r"\d+(?:\.\d+)?"
_CLOCK = r"(?:\d+:)?\d{1,2}:\d{2}"


@dataclass(frozen=True)
class Rule:
    """One kind of wall-clock field: every match of ``pattern`` (or of its group ``value``,
    when it has one) is replaced by ``<name>``."""

    name: str
    pattern: re.Pattern[str]
    builtin: bool = True

    @property
    def placeholder(self) -> str:
        return f"<{self.name}>"


def _rule(name: str, pattern: str) -> Rule:
    return Rule(name, re.compile(pattern, re.VERBOSE))


DEFAULT_RULES: tuple[Rule, ...] = (
    # tqdm's "[00:03<00:12, ...]": time elapsed and time left.
    _rule("elapsed<left", rf"(?<![\w:]){_CLOCK}<(?:{_CLOCK}|\?)"),
    _rule("eta", rf"(?i)(?<![\w])ETA:?\s*(?P<value>{_CLOCK}|{_NUM}\s?{_UNIT_TIME}?)(?!\w)"),
    # 2026-11-23 12:00:01,123 / 2026-11-23T12:00:01.5Z / 12:00:01 (a clock, or h:mm:ss).
    _rule(
        "timestamp",
        r"""(?<![\w:.])
        (?:\d{4}-\d{2}-\d{2}[T\ ])?\d{1,2}:\d{2}:\d{2}(?:[.,]\d+)?(?:Z|[+-]\d{2}:?\d{2})?
        (?![\w:])""",
    ),
    # Keras' "2ms/step", tqdm's "1.23s/it".
    _rule(
        "time-per-step",
        rf"""(?<![\w.]){_NUM}\s?(?:ns|us|µs|ms|s)/
        (?:step|sample|epoch|batch|it|iter|iteration|image|img|token|example)(?!\w)""",
    ),
    # tqdm's "12.34it/s", "512 samples/s", "3.2k tokens/sec", "?it/s".
    _rule(
        "rate",
        rf"""(?:(?<![\w.]){_NUM}|\?)\s?[kMG]?\s?
        (?:it|its|steps?|samples?|examples?|batch(?:es)?|images?|img|tokens?|tok|B|iters?)
        /(?:s|sec|second)(?!\w)""",
    ),
    # "1h 2m 3s", "1m5s", "3s", "3.2 s", "41 ms", "2 min".
    _rule(
        "duration",
        rf"""(?<![\w.])(?:\d+h\s?\d+m(?:\s?\d+s)?|\d+m\s?{_NUM}s|{_NUM}\s?{_UNIT_TIME})
        (?![\w/])""",
    ),
    # A number after a word that says it is a time: "took 3.2", "elapsed: 41",
    # "epoch_time=3.2", "time: 12.5".
    _rule(
        "timed",
        rf"""(?i)(?<![\w])\w*(?:took|elapsed|duration|runtime|walltime|wall[\ _-]time|time)
        \s*[:=]?\s*(?P<value>{_NUM})(?![\w.])""",
    ),
)


class PatternError(ValueError):
    """A user pattern that cannot be used; the message names it and says why."""


def user_rule(pattern: str, number: int = 1) -> Rule:
    """The ``number``-th ``--ignore REGEX``: every match (or its group ``value``) is left
    out, as ``<ignore-N>``.
    Refused: a regex that does not compile, is longer than :data:`MAX_PATTERN_CHARS`, or
    matches the empty string (it would match everywhere and hide nothing useful)."""
    if len(pattern) > MAX_PATTERN_CHARS:
        raise PatternError(f"--ignore: a pattern longer than {MAX_PATTERN_CHARS} characters")
    try:
        compiled = re.compile(pattern)
    except re.error as exc:
        raise PatternError(f"--ignore {pattern!r} is not a regular expression: {exc}") from None
    if compiled.fullmatch("") is not None:
        raise PatternError(
            f"--ignore {pattern!r} matches the empty string: it must match some text"
        )
    return Rule(f"ignore-{number}", compiled, builtin=False)


def rules_for(patterns: Sequence[str], *, defaults: bool = True) -> tuple[Rule, ...]:
    if len(patterns) > MAX_PATTERNS:
        raise PatternError(f"--ignore: at most {MAX_PATTERNS} patterns")
    user = tuple(user_rule(p, n) for n, p in enumerate(patterns, start=1))
    return (DEFAULT_RULES if defaults else ()) + user


@dataclass
class RuleCount:
    """What one rule left out of one run's stdout."""

    rule: str
    pattern: str
    fields: int = 0
    lines: int = 0
    example_line: int | None = None
    example_text: str | None = None
    example_field: str | None = None

    def to_dict(self) -> dict[str, Any]:
        return {
            "rule": self.rule,
            "pattern": self.pattern,
            "fields": self.fields,
            "lines": self.lines,
            "example": None
            if self.example_line is None
            else {
                "line": self.example_line,
                "text": self.example_text,
                "field": self.example_field,
            },
        }

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> RuleCount:
        example = data.get("example") or {}
        return cls(
            rule=str(data["rule"]),
            pattern=str(data["pattern"]),
            fields=int(data["fields"]),
            lines=int(data["lines"]),
            example_line=example.get("line"),
            example_text=example.get("text"),
            example_field=example.get("field"),
        )


@dataclass
class Ignored:
    """Everything one run's stdout had that was not compared."""

    redraws: int = 0
    """Progress-line frames overwritten (only each line's last state is compared)."""
    redrawn_lines: int = 0
    lines: int = 0
    """Lines with at least one field left out."""
    rules: list[RuleCount] = field(default_factory=list)

    @property
    def fields(self) -> int:
        return sum(r.fields for r in self.rules)

    def to_dict(self) -> dict[str, Any]:
        return {
            "redraws": self.redraws,
            "redrawn_lines": self.redrawn_lines,
            "lines": self.lines,
            "fields": self.fields,
            "rules": [r.to_dict() for r in self.rules if r.fields],
        }

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> Ignored:
        return cls(
            redraws=int(data.get("redraws", 0)),
            redrawn_lines=int(data.get("redrawn_lines", 0)),
            lines=int(data.get("lines", 0)),
            rules=[RuleCount.from_dict(r) for r in data.get("rules") or ()],
        )

    def describe(self) -> str | None:
        """One sentence for people; None when nothing was left out."""
        parts: list[str] = []
        if self.redraws:
            parts.append(
                f"{self.redraws} progress-bar redraw(s) on {self.redrawn_lines} line(s) "
                "(each line's final state was compared)"
            )
        counted = [r for r in self.rules if r.fields]
        if counted:
            kinds = ", ".join(f"{r.rule} {r.fields}" for r in counted)
            first = counted[0]
            parts.append(
                f"{self.fields} wall-clock field(s) on {self.lines} line(s) ({kinds}); "
                f"e.g. line {first.example_line}: {first.example_field!r} in "
                f"{first.example_text!r}"
            )
        return "; ".join(parts) if parts else None


class Masker:
    """The form of each line that is compared, and the count of what it left out."""

    def __init__(self, rules: Sequence[Rule]) -> None:
        self.rules = tuple(rules)
        self.ignored = Ignored(
            rules=[RuleCount(r.name, r.pattern.pattern) for r in self.rules],
        )

    def note_redraws(self, redraws: int) -> None:
        if redraws:
            self.ignored.redraws += redraws
            self.ignored.redrawn_lines += 1

    def key(self, line_number: int, text: str) -> str:
        """``text`` with every wall-clock field replaced by its rule's placeholder."""
        masked = text
        hit = False
        for rule, count in zip(self.rules, self.ignored.rules, strict=True):
            found: list[str] = []

            def replace(match: re.Match[str], rule: Rule = rule, found: list[str] = found) -> str:
                if "value" in rule.pattern.groupindex and match.group("value") is not None:
                    start = match.start("value") - match.start()
                    end = match.end("value") - match.start()
                    whole = match.group()
                    found.append(match.group("value"))
                    return whole[:start] + rule.placeholder + whole[end:]
                found.append(match.group())
                return rule.placeholder

            masked = rule.pattern.sub(replace, masked)
            if found:
                hit = True
                count.fields += len(found)
                count.lines += 1
                if count.example_line is None:
                    count.example_line = line_number
                    count.example_text = _cut(text)
                    count.example_field = found[0]
        if hit:
            self.ignored.lines += 1
            masked = _unpad(masked, [r.placeholder for r in self.rules])
            masked = _BANNER_FILL.sub(lambda m: (m.group(1) or m.group(2)) * 3, masked)
        return masked


# A banner centred in a fill (pytest's "=== 1 passed in 8.80s ===") fills its ends to a width
# that depends on the value left out: on a masked line, each end's run of one fill character
# counts as three of it.
_BANNER_FILL = re.compile(r"^([=\-*#~_])\1{2,}(?= )|(?<= )([=\-*#~_])\2{2,}$")


_BLANK = " \t"


def _unpad(masked: str, placeholders: Sequence[str]) -> str:
    """Each run of spaces and tabs beside a placeholder as one space. A field printed in a
    fixed-width column (``"{}: {:<8.3g}".format(tag, seconds)``, a right-aligned table cell)
    is padded to a width that depends on the value left out: ``time: 9.9     `` and ``time:
    8.59    ``. Linear: the line is split at the placeholders, each piece trimmed once."""
    pieces = re.split("(" + "|".join(re.escape(p) for p in placeholders) + ")", masked)
    out: list[str] = []
    for i, piece in enumerate(pieces):
        if i % 2:  # a placeholder
            out.append(piece)
            continue
        after, before = i > 0, i < len(pieces) - 1  # beside a placeholder on its left, right
        core = piece
        if after:
            core = core.lstrip(_BLANK)
        if before:
            core = core.rstrip(_BLANK)
        if not core:
            out.append(" " if piece else "")
            continue
        lead = " " if after and core[0] != piece[0] else ""
        trail = " " if before and core[-1] != piece[-1] else ""
        out.append(lead + core + trail)
    return "".join(out)


def _cut(text: str) -> str:
    return text if len(text) <= EXAMPLE_CHARS else text[: EXAMPLE_CHARS - 3] + "..."
