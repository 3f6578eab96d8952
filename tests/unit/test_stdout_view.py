"""What verify compares of stdout: lines as a terminal shows them (progress-bar redraws folded)
and wall-clock fields left out, counted. Pure: no engine."""

from __future__ import annotations

import random

import pytest

from reprobuild.checks.streams import StdoutLine, StreamComparator, epoch_of, value_name
from reprobuild.checks.terminal import MAX_LINE_CHARS, TerminalLines, printable
from reprobuild.checks.volatile import (
    DEFAULT_RULES,
    MAX_PATTERNS,
    Ignored,
    Masker,
    PatternError,
    Rule,
    rules_for,
    user_rule,
)

BAR = "\x1b[32m" + "━" * 20 + "\x1b[0m"


def keras_epoch(steps: int, frames: int, loss: str, secs: int, ms: int) -> bytes:
    """What Keras 3's Progbar(verbose=1) writes for one epoch on a POSIX host: each frame
    after ``\\b`` * the last width and ``\\r``, bold step count and time, padding, and a
    newline after the last frame. ``frames`` depends on the machine's speed."""
    out = f"Epoch 1/{steps}\n"
    width = 0
    for frame in range(1, frames + 1):
        step = max(1, steps * frame // frames)
        info = f" \x1b[1m{secs + frame}s\x1b[0m {ms + frame}ms/step - loss: {frame}.{frame}00"
        if frame == frames:
            info = f" \x1b[1m{secs}s\x1b[0m {ms}ms/step - loss: {loss}"
        text = f"\x1b[1m{step:2d}/{steps}\x1b[0m {BAR}{info}"
        shown = len(text) - 8 * 4 - 18
        out += "\b" * width + "\r" + text + " " * max(0, width - shown)
        width = shown
    return (out + "\n").encode()


def tqdm_loop(frames: int, loss: str, rate: str) -> bytes:
    out = ""
    for frame in range(frames):
        pct = 100 * frame // frames
        bar = "█" * (pct // 10)
        out += f"\rEpoch 2: {pct:3d}%|{bar:10s}| {frame}/50 [00:0{frame % 10}<00:09, {frame}.5it/s]"
    out += f"\rEpoch 2: 100%|██████████| 50/50 [00:01<00:00, {rate}it/s, loss={loss}]\n"
    return out.encode()


def shown_lines(data: bytes, *, fold: bool = True, chunk: int | None = None) -> list[str]:
    terminal = TerminalLines(fold=fold)
    lines = []
    step = chunk or len(data) or 1
    for start in range(0, len(data), step):
        lines.extend(terminal.feed(data[start : start + step]))
    lines.extend(terminal.close())
    return [line.text for line in lines]


def keys(data: bytes, rules: tuple[Rule, ...] = DEFAULT_RULES) -> tuple[list[str], Ignored]:
    masker = Masker(rules)
    terminal = TerminalLines()
    out = []
    for number, line in enumerate([*terminal.feed(data), *terminal.close()], start=1):
        masker.note_redraws(line.redraws)
        out.append(masker.key(number, line.text))
    return out, masker.ignored


# ------------------------------------------------------------------------------ terminal


def test_a_keras_bar_is_its_last_frame_whatever_the_chunking() -> None:
    data = keras_epoch(50, 7, "0.4123", 3, 2)
    expected = ["Epoch 1/50", f"50/50 {'━' * 20} 3s 2ms/step - loss: 0.4123"]
    for chunk in (1, 2, 3, 5, 64, None):
        assert shown_lines(data, chunk=chunk) == expected, chunk


def test_a_tqdm_bar_is_its_last_frame() -> None:
    assert shown_lines(tqdm_loop(9, "0.412", "45.21")) == [
        "Epoch 2: 100%|██████████| 50/50 [00:01<00:00, 45.21it/s, loss=0.412]"
    ]


def test_redraws_are_counted_and_plain_lines_are_untouched() -> None:
    terminal = TerminalLines()
    lines = terminal.feed(b"plain line  \n\rA\rBB\rC\n") + terminal.close()
    assert [(line.text, line.redraws) for line in lines] == [("plain line  ", 0), ("CB", 2)]


def test_erase_sequences_and_backspace() -> None:
    assert shown_lines(b"abcdef\r\x1b[Kxy\n") == ["xy"]
    assert shown_lines(b"abcdef\x08\x08\x08\x1b[0Kz\n") == ["abcz"]
    assert shown_lines(b"abcdef\r\x1b[2Kxy\n") == ["xy"]
    assert shown_lines(b"abc\x08\x08\x08\x08\x08Z\n") == ["Zbc"]
    assert shown_lines(b"crlf line\r\n") == ["crlf line"]
    assert shown_lines(b"\x1b]0;title\x07text\n") == ["text"]


def test_unfolded_lines_keep_every_byte() -> None:
    assert shown_lines(b"a\rb\x1b[1mc\n", fold=False) == ["a\rb\x1b[1mc"]


def test_invalid_utf8_bytes_stay_distinct() -> None:
    a, b = shown_lines(b"x\xff\n"), shown_lines(b"x\xfe\n")
    assert a != b
    assert printable(a[0]) == "x\ufffd"


def test_a_line_without_end_is_bounded() -> None:
    terminal = TerminalLines(max_chars=1000)
    for _ in range(100):
        assert terminal.feed(b"y" * 997) == []
    (line,) = terminal.close()
    assert line.text == "y" * 1000 + "[... 98700 more characters]"
    assert line.dropped == 98700
    assert MAX_LINE_CHARS == 1 << 20


def test_redraws_of_an_over_long_line_stay_bounded() -> None:
    terminal = TerminalLines(max_chars=100)
    terminal.feed(b"z" * 500)
    for _ in range(50):
        terminal.feed(b"\r" + b"q" * 300)
    (line,) = terminal.close()
    assert line.text.startswith("q" * 100)
    assert len(line.text) < 150


# -------------------------------------------------------------------------------- masking


def test_keras_runs_at_different_speeds_compare_equal() -> None:
    fast, ignored = keys(keras_epoch(50, 3, "0.4123", 1, 2))
    slow, _ = keys(keras_epoch(50, 40, "0.4123", 9, 31))
    assert fast == slow
    assert fast[1].endswith("<duration> <time-per-step> - loss: 0.4123")
    assert ignored.redraws == 2 and ignored.redrawn_lines == 1
    counted = {r.rule: r.fields for r in ignored.rules if r.fields}
    assert counted == {"duration": 1, "time-per-step": 1}
    first = next(r for r in ignored.rules if r.fields)
    assert first.example_line == 2 and first.example_field == "2ms/step"


def test_a_loss_digit_inside_a_keras_bar_still_differs() -> None:
    a, _ = keys(keras_epoch(50, 3, "0.4123", 1, 2))
    b, _ = keys(keras_epoch(50, 8, "0.4124", 7, 9))
    assert a[1] != b[1]
    comparator = StreamComparator(2)
    for line in a:
        comparator.feed(0, StdoutLine(line, line))
    found = comparator.feed(1, StdoutLine(b[0], b[0])) or comparator.feed(
        1, StdoutLine("shown " + b[1], b[1])
    )
    assert found is not None and found.line == 2
    assert found.epoch == "epoch 1" and found.value == "loss"
    assert found.numeric is not None and (found.numeric.a, found.numeric.b) == (
        "0.4123",
        "0.4124",
    )
    assert "(epoch 1, loss)" in found.detail


def test_tqdm_runs_compare_equal_and_postfix_loss_is_compared() -> None:
    a, ignored = keys(tqdm_loop(3, "0.412", "45.21"))
    b, _ = keys(tqdm_loop(17, "0.412", "3.02"))
    c, _ = keys(tqdm_loop(17, "0.413", "3.02"))
    assert a == b
    assert a != c
    assert a == ["Epoch 2: 100%|██████████| 50/50 [<elapsed<left>, <rate>, loss=0.412]"]
    assert {r.rule for r in ignored.rules if r.fields} == {"elapsed<left", "rate"}


@pytest.mark.parametrize(
    ("line", "masked"),
    [
        ("epoch 3 took 12.5 s, loss 0.25", "epoch 3 took <duration>, loss 0.25"),
        ("epoch 3 took 12.5, loss 0.25", "epoch 3 took <timed>, loss 0.25"),
        ("epoch_time=3.21 val_loss=0.5", "epoch_time=<timed> val_loss=0.5"),
        ("elapsed: 41 steps: 100", "elapsed: <timed> steps: 100"),
        ("2026-11-23 12:00:01,123 INFO loss=0.5", "<timestamp> INFO loss=0.5"),
        ("[2026-11-23T12:00:01.5Z] step 4", "[<timestamp>] step 4"),
        ("at 09:15:02 step 4", "at <timestamp> step 4"),
        ("ETA: 0:01:05 - loss: 0.3", "ETA: <eta> - loss: 0.3"),
        ("1h 2m 3s total", "<duration> total"),
        ("throughput 512.3 samples/s", "throughput <rate>"),
        ("2.1k tokens/sec", "<rate>"),
        ("4.12s/it", "<time-per-step>"),
        ("done in 3.2ms", "done in <duration>"),
    ],
)
def test_wall_clock_fields_are_masked(line: str, masked: str) -> None:
    assert Masker(DEFAULT_RULES).key(1, line) == masked


@pytest.mark.parametrize(
    "line",
    [
        "loss: 0.4123 - accuracy: 0.8750",
        "step 100/200 lr=1e-3 seed 42",
        "Epoch 3/10",
        "model size 12 MB, 3 layers",
        "val_loss 0.25 at step 1024",
        "ratio 1:2 of 10 images",
        "5 samples, 3 classes",
        "timestep 5 reward 1.5",
        "x=0.5s2",
    ],
)
def test_training_numbers_are_never_masked(line: str) -> None:
    masker = Masker(DEFAULT_RULES)
    assert masker.key(1, line) == line
    assert masker.ignored.fields == 0


def test_user_patterns_and_their_value_group() -> None:
    rules = rules_for([r"lr=(?P<value>\S+)", r"host \w+"], defaults=False)
    masker = Masker(rules)
    assert masker.key(1, "lr=0.01 host abc took 3s") == "lr=<ignore-1> <ignore-2> took 3s"
    assert masker.ignored.fields == 2


@pytest.mark.parametrize(
    ("a", "b", "masked"),
    [
        # rl-replicas prints "{}: {:<8.3g}": the padding after a timing tells its width
        ("time: 9.9     ", "time: 8.59    ", "time: <timed> "),
        ("time:     9.9 | loss 0.5", "time:    10.25 | loss 0.5", "time: <timed> | loss 0.5"),
        ("| fps\t  1234 |  loss   0.25 |", "| fps\t 987 |  loss   0.25 |", None),
    ],
)
def test_the_padding_of_a_masked_field_is_left_out(a: str, b: str, masked: str | None) -> None:
    rules = rules_for([r"fps\s+(?P<value>\d+)"])
    key_a, key_b = Masker(rules).key(1, a), Masker(rules).key(1, b)
    assert key_a == key_b
    if masked is not None:
        assert key_a == masked
    else:  # the padding beside the value is one space; the rest of the line as it was
        assert key_a == "| fps <ignore-1> |  loss   0.25 |"


def test_padding_away_from_a_masked_field_is_compared() -> None:
    masker = Masker(DEFAULT_RULES)
    assert masker.key(1, "loss   0.25  took 3 s") == "loss   0.25  took <duration>"
    assert masker.key(2, "loss  0.25   ") == "loss  0.25   "  # nothing masked: as it was
    assert masker.key(3, "took 3 s<duration>   x") == "took <duration><duration> x"


def test_bad_user_patterns_are_refused_in_one_line() -> None:
    with pytest.raises(PatternError, match=r"--ignore '\(' is not a regular expression"):
        user_rule("(")
    with pytest.raises(PatternError, match="matches the empty string"):
        user_rule("x*")
    with pytest.raises(PatternError, match="longer than"):
        user_rule("a" * 1001)
    with pytest.raises(PatternError, match=f"at most {MAX_PATTERNS}"):
        rules_for(["a"] * (MAX_PATTERNS + 1))


def test_ignored_round_trips_and_describes_itself() -> None:
    _, ignored = keys(keras_epoch(50, 5, "0.4123", 1, 2))
    again = Ignored.from_dict(ignored.to_dict())
    assert again.to_dict() == ignored.to_dict()
    text = ignored.describe()
    assert text is not None
    assert "4 progress-bar redraw(s) on 1 line(s)" in text
    assert "2 wall-clock field(s) on 1 line(s)" in text and "'2ms/step'" in text
    assert Ignored().describe() is None


def test_epoch_and_value_names() -> None:
    assert epoch_of("Epoch 2/5") == "epoch 2"
    assert epoch_of("epoch=3 loss 1") == "epoch 3"
    assert epoch_of("epochs 5") is None
    assert value_name("- loss: 0.41", "- loss: 0.42") == "loss"
    assert value_name("val_acc=1", "val_acc=2") == "val_acc"
    assert value_name("loss 0.5", "loss 0.6") == "loss"
    assert value_name("step 2 at 1.5", "step 2 at 1.75") is None
    assert value_name("same 1", "same 1") is None


def test_masking_is_linear_on_long_lines() -> None:
    rng = random.Random(0)
    line = " ".join(f"{rng.random():.4f}" for _ in range(50_000))
    assert Masker(DEFAULT_RULES).key(1, line) == line
