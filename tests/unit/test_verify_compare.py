"""The pure comparison under ``reprobuild verify``: tokens, numeric distance, lines as they
stream in (any interleaving), JSON structured diffs. No engine, no I/O."""

from __future__ import annotations

import itertools
import json
import random
import struct

import pytest

from reprobuild.checks.streams import (
    Divergence,
    JsonDifference,
    NumericDiff,
    StreamComparator,
    diff_json,
    first_column,
    first_line_difference,
    format_path,
    line_numeric_diff,
    numeric_distance,
    tokenize,
)
from reprobuild.checks.terminal import TerminalLines

# ------------------------------------------------------------------------------- numbers


@pytest.mark.parametrize(
    ("line", "tokens"),
    [
        ("epoch 3 loss 0.25", ["epoch ", "3", " loss ", "0.25"]),
        ("loss=-1.5e-03,acc=0.9", ["loss=", "-1.5e-03", ",acc=", "0.9"]),
        ("tensor([0.1, -2.])", ["tensor([", "0.1", ", ", "-2.", "])"]),
        ("hex 0x1.8000000000000p-3 done", ["hex ", "0x1.8000000000000p-3", " done"]),
        ("val nan inf -inf", ["val ", "nan", " ", "inf", " ", "-inf"]),
        ("epoch1 v1.2 info 12abc", ["epoch1 v1.2 info 12abc"]),
        ("", []),
    ],
)
def test_tokenize_splits_numbers_from_text(line: str, tokens: list[str]) -> None:
    assert tokenize(line) == tokens
    assert "".join(tokenize(line)) == line


def test_integers_are_exact() -> None:
    diff = numeric_distance("123456789012345678901", "123456789012345678900")
    assert diff is not None
    assert diff == NumericDiff("123456789012345678901", "123456789012345678900", 1, diff.rel_diff)
    assert diff.ulps is None and diff.ulps_f32 is None
    assert diff.rel_diff == pytest.approx(1 / 123456789012345678901)


def test_neighbouring_doubles_are_one_ulp_apart() -> None:
    a = 0.1
    b = struct.unpack("<d", struct.pack("<Q", struct.unpack("<Q", struct.pack("<d", a))[0] + 1))[0]
    diff = numeric_distance(repr(a), repr(b))
    assert diff is not None
    assert diff.ulps == 1
    assert diff.abs_diff == pytest.approx(b - a)
    assert diff.ulps_f32 is None  # 0.1 is no float32 value


def test_float32_values_get_float32_ulps() -> None:
    a = struct.unpack("<f", struct.pack("<f", 0.3))[0]
    b = struct.unpack("<f", struct.pack("<I", struct.unpack("<I", struct.pack("<f", a))[0] + 3))[0]
    diff = numeric_distance(repr(a), repr(b))
    assert diff is not None
    assert diff.ulps_f32 == 3
    assert diff.ulps == 3 * 2**29


def test_ulps_count_across_zero() -> None:
    diff = numeric_distance("-5e-324", "5e-324")
    assert diff is not None and diff.ulps == 2


def test_hex_floats_and_non_finite() -> None:
    diff = numeric_distance((0.5).hex(), (0.75).hex())
    assert diff is not None and diff.abs_diff == 0.25 and diff.rel_diff == pytest.approx(1 / 3)
    nan = numeric_distance("nan", "0.5")
    assert nan is not None and (nan.abs_diff, nan.rel_diff, nan.ulps) == (None, None, None)
    assert numeric_distance("loss", "0.5") is None


def test_describe_numbers() -> None:
    diff = numeric_distance("1.0", "1.5")
    assert diff is not None
    assert diff.describe() == (
        "1.0 vs 1.5, abs 0.5, rel 0.333333, 4194304 ulps (float32), 2251799813685248 ulps (float64)"
    )
    diff = numeric_distance("3", "5")
    assert diff is not None
    assert diff.describe() == "3 vs 5, abs 2, rel 0.4"


# --------------------------------------------------------------------------------- lines


def test_line_numeric_diff_finds_the_first_differing_number() -> None:
    diff = line_numeric_diff("epoch 3 loss 0.25 acc 0.5", "epoch 3 loss 0.26 acc 0.6")
    assert diff is not None and (diff.a, diff.b) == ("0.25", "0.26")
    # text that differs in the same shape does not stop the scan
    diff = line_numeric_diff("step A loss 1.0", "step B loss 2.0")
    assert diff is not None and (diff.a, diff.b) == ("1.0", "2.0")
    # a number against text: the lines do not line up
    assert line_numeric_diff("loss 0.5", "loss nanx") is None
    assert line_numeric_diff("same 1", "same 1") is None


def test_first_column_and_first_line_difference() -> None:
    assert first_column("abcd", "abXd") == 3
    assert first_column("abc", "abcd") == 4
    assert first_line_difference(["a", "b"], ["a", "b"]) == (0, None, None)
    assert first_line_difference(["a", "b"], ["a", "c"]) == (2, "b", "c")
    assert first_line_difference(["a"], ["a", "extra"]) == (2, None, "extra")


@pytest.mark.parametrize("fold", [True, False])
def test_terminal_lines_rebuild_lines_from_any_chunks(fold: bool) -> None:
    data = "one\ntwo\n\nthré€ without newline".encode()
    for cut in range(len(data) + 1):
        for second in range(cut, len(data) + 1):
            lines = TerminalLines(fold=fold)
            out = [
                *lines.feed(data[:cut]),
                *lines.feed(data[cut:second]),
                *lines.feed(data[second:]),
                *lines.close(),
            ]
            assert [line.text for line in out] == ["one", "two", "", "thré€ without newline"]


def _feed_all(
    comparator: StreamComparator, events: list[tuple[int, bytes | None]]
) -> Divergence | None:
    for run, line in events:
        found = comparator.end(run) if line is None else comparator.feed(run, line)
        if found is not None:
            return found
    return None


def _interleavings(
    a: list[bytes], b: list[bytes], limit: int = 200
) -> list[list[tuple[int, bytes | None]]]:
    """Merges of run 0's and run 1's streams (each ending with an end marker) that keep each
    run's own order: a sample of all of them."""
    first: list[tuple[int, bytes | None]] = [(0, line) for line in a] + [(0, None)]
    second: list[tuple[int, bytes | None]] = [(1, line) for line in b] + [(1, None)]
    total = len(first) + len(second)
    out = []
    for positions in itertools.islice(itertools.combinations(range(total), len(first)), limit):
        chosen = set(positions)
        it_a, it_b = iter(first), iter(second)
        out.append([next(it_a) if i in chosen else next(it_b) for i in range(total)])
    return out


def test_identical_streams_in_any_interleaving() -> None:
    lines = [b"epoch 1 loss 0.5", b"epoch 2 loss 0.25", b"done"]
    for events in _interleavings(lines, lines):
        comparator = StreamComparator(2)
        assert _feed_all(comparator, events) is None
        assert comparator.finished
        assert comparator.lines_compared == 3


def test_first_differing_line_in_any_interleaving() -> None:
    a = [b"start", b"same", b"at 1700000000.25", b"later a"]
    b = [b"start", b"same", b"at 1700000000.5", b"later b"]
    for events in _interleavings(a, b):
        found = _feed_all(StreamComparator(2), events)
        assert found is not None
        assert (found.where, found.runs, found.line) == ("stdout", (1, 2), 3)
        assert (found.a, found.b, found.column) == ("at 1700000000.25", "at 1700000000.5", 15)
        assert found.numeric is not None and found.numeric.abs_diff == 0.25


def test_divergence_is_reported_as_soon_as_both_lines_exist() -> None:
    comparator = StreamComparator(2)
    assert comparator.feed(1, b"B first") is None  # run 2 is ahead: nothing to compare yet
    found = comparator.feed(0, b"A first")
    assert found is not None and found.line == 1
    assert comparator.feed(0, b"anything") is found  # sticky


@pytest.mark.parametrize("short_run", [0, 1])
def test_a_run_that_ends_early_diverges_once_certain(short_run: int) -> None:
    comparator = StreamComparator(2)
    long_run = 1 - short_run
    for line in (b"a", b"b"):
        assert comparator.feed(short_run, line) is None
        assert comparator.feed(long_run, line) is None
    assert comparator.feed(long_run, b"c") is None  # not certain: the other may print it too
    found = comparator.end(short_run)
    assert found is not None and found.line == 3
    present, absent = ("c", None) if long_run == 0 else (None, "c")
    assert (found.a, found.b) == (present, absent)
    assert "ended after 2 lines" in found.detail


def test_three_runs_each_compared_with_the_first() -> None:
    comparator = StreamComparator(3)
    for run in (0, 1, 2):
        assert comparator.feed(run, b"same") is None
    assert comparator.feed(2, b"three") is None
    assert comparator.feed(1, b"two") is None
    found = comparator.feed(0, b"two")
    assert found is not None and (found.runs, found.line, found.b) == ((1, 3), 2, "three")


def test_memory_is_bounded_by_the_lag() -> None:
    comparator = StreamComparator(2)
    for i in range(10_000):
        line = f"line {i}".encode()
        comparator.feed(0, line)
        comparator.feed(1, line)
    assert len(comparator._ref) == 0 and not any(comparator._ahead)
    assert comparator.lines_compared == 10_000


def test_random_streams_agree_with_a_plain_diff() -> None:
    rng = random.Random(1)
    for _ in range(200):
        a = [rng.choice([b"x", b"y", b"1.5"]) for _ in range(rng.randrange(0, 6))]
        b = [rng.choice([b"x", b"y", b"1.5"]) for _ in range(rng.randrange(0, 6))]
        expect, _, _ = first_line_difference([s.decode() for s in a], [s.decode() for s in b])
        events = rng.choice(_interleavings(a, b, limit=50))
        found = _feed_all(StreamComparator(2), events)
        assert (found.line if found else 0) == expect


# ---------------------------------------------------------------------------------- JSON


def test_json_equal_documents() -> None:
    doc = {"a": [1, 2.5, {"b": None}], "nan": float("nan")}
    assert diff_json(doc, json.loads(json.dumps(doc))) == []


def test_json_nested_keys_and_list_indexes() -> None:
    a = {"config": {"lr": 0.001}, "history": [{"loss": 0.5}, {"loss": 0.25}]}
    b = {"config": {"lr": 0.001}, "history": [{"loss": 0.5}, {"loss": 0.3}]}
    (diff,) = diff_json(a, b)
    assert diff.path == ("history", 1, "loss")
    assert diff.where == "history[1].loss"
    assert (diff.kind, diff.a, diff.b) == ("changed", 0.25, 0.3)
    assert diff.numeric is not None and diff.numeric.abs_diff == pytest.approx(0.05)


def test_json_added_removed_and_list_lengths() -> None:
    a = {"keep": 1, "gone": True, "list": [1, 2, 3]}
    b = {"keep": 1, "list": [1, 2], "new": "x"}
    diffs = diff_json(a, b)
    assert [(d.where, d.kind, d.a, d.b) for d in diffs] == [
        ("gone", "removed", True, None),
        ("list[2]", "removed", 3, None),
        ("new", "added", None, "x"),
    ]


def test_json_type_changes_are_strict() -> None:
    diffs = diff_json({"n": 1, "b": True, "s": "1", "o": {}}, {"n": 1.0, "b": 1, "s": 1, "o": []})
    assert [(d.where, d.kind) for d in diffs] == [
        ("n", "type"),
        ("b", "type"),
        ("s", "type"),
        ("o", "type"),
    ]
    assert diffs[0].numeric is not None and diffs[0].numeric.abs_diff == 0.0
    assert diffs[1].numeric is None  # a boolean is not a number


def test_json_root_and_odd_keys() -> None:
    (diff,) = diff_json(1, 2)
    assert diff.where == "$"
    assert format_path(("a b", 0, "x.y", "ok_1")) == '["a b"][0]["x.y"].ok_1'


def test_json_difference_limit() -> None:
    diffs = diff_json(list(range(500)), [i + 1 for i in range(500)], limit=10)
    assert len(diffs) == 10 and diffs[-1].where == "[9]"


def test_records_round_trip() -> None:
    numeric = numeric_distance("0.5", "0.75")
    assert numeric is not None
    jd = JsonDifference(("history", 2, "loss"), "changed", 0.5, 0.75, numeric)
    div = Divergence(
        where="output",
        runs=(1, 3),
        detail="metrics.json: history[2].loss differs",
        file="metrics.json",
        key="history[2].loss",
        offset=40,
        a="0.5",
        b="0.75",
        numeric=numeric,
        json_differences=(jd,),
    )
    assert Divergence.from_dict(json.loads(json.dumps(div.to_dict()))) == div
    assert NumericDiff.from_dict(numeric.to_dict()) == numeric
