"""The shortcuts taken to read a native lock fast (issue 27) against the plain code they
replace, kept here as the reference: the same refusals at the same lines, the same header and
needle lines, the same pruned text. Random texts from a fixed seed, plus every lock under
tests/data."""

from __future__ import annotations

import random
import re
from collections.abc import Callable
from pathlib import Path

import pytest
from packaging.version import Version

from reprobuild.errors import LockfileError
from reprobuild.locks import native
from reprobuild.locks.native import LockLines, Selection
from reprobuild.locks.records import CONTROL_RE, decode_lock, physical_lines

DATA = Path(__file__).resolve().parents[1] / "data"
LOCKS = sorted(
    p
    for pattern in ("*.lock", "*.toml", "*.txt")
    for p in (DATA / "lockfiles").rglob(pattern)
    if p.is_file()
)


def _texts(pieces: list[str], count: int, seed: int) -> list[str]:
    rng = random.Random(seed)
    return ["".join(rng.choice(pieces) for _ in range(rng.randint(0, 10))) for _ in range(count)]


def _refused_line(text: str) -> int | None:
    """decode_lock's check, line by line, as it was."""
    for number, line in enumerate(physical_lines(text), start=1):
        if CONTROL_RE.search(line):
            return number
    return None


def _decode_line(text: str) -> int | None:
    try:
        decode_lock(text.encode(), Path("x.lock"))
    except LockfileError as exc:
        return exc.line
    return None


def test_decode_lock_refuses_what_the_line_check_refuses() -> None:
    pieces = ["a", "\n", "\r", "\r\n", "\t", " ", "\x00", "\x0b", "\x1f", "\x7f", "\x85", "é"]
    pieces += ["\u2028", "\u202e", "\u2066"]
    for text in _texts(pieces, 20000, seed=27):
        assert _decode_line(text) == _refused_line(text), repr(text)
    for code in [*range(0x00, 0x200), *range(0x2000, 0x2100), 0xFEFF, 0x10FFFF]:
        text = f"a = 1\n{chr(code)}\n"
        assert _decode_line(text) == _refused_line(text), hex(code)


def _headers(text: str, header: str) -> list[int]:
    pattern = re.compile(r"\s*\[\[\s*" + re.escape(header) + r"\s*\]\]\s*(#.*)?$")
    lines = physical_lines(text)
    return [n for n, line in enumerate(lines, start=1) if "[[" in line and pattern.match(line)]


def _find(text: str, needle: str, start: int) -> int | None:
    lines = physical_lines(text)
    for number in range(max(start, 1), len(lines) + 1):
        if needle in lines[number - 1]:
            return number
    return None


def test_lock_lines_headers_and_find_match_a_line_by_line_scan() -> None:
    pieces = ["[[package]]", "  [[ package ]] # c", "[[package]]\r", "x [[package]]", "\n"]
    pieces += ["\n", "\r\n", "[[packages]]", "a = [[1]]", "\t", "\u3000", "name = ", "ab"]
    needles = ["a", "b", "ab", "", "name = ", "[[package]]", " ", "b\n"]
    rng = random.Random(27)
    texts = _texts(pieces, 5000, seed=27)
    texts += [p.read_bytes().decode("utf-8-sig", "replace") for p in LOCKS]
    for text in texts:
        lines = LockLines(text)
        assert lines.headers == _headers(text, "package"), repr(text)
        assert LockLines(text, "\0").headers == []
        for needle in needles:
            start = rng.choice([-1, 1, 2, 3, 7, 40, 10**6])
            assert lines.find(needle, start) == _find(text, needle, start), (text, needle, start)


def _pruned(selection: Selection, text: str) -> str:
    """prune_foreign_wheels as it was: wheel_fits on every wheel line."""
    wheels = text.count('.whl"')
    handled = 0

    def uv_line(match: re.Match[str]) -> str:
        nonlocal handled
        handled += 1
        fits = selection.wheel_fits(match.group(1).rsplit("/", 1)[-1])
        return match.group(0) if fits else "\n"

    text = native._UV_WHEEL_LINE_RE.sub(uv_line, text)
    if handled == wheels:
        return text
    fits: Callable[[re.Match[str]], str] = lambda m: (  # noqa: E731
        m.group(0) if selection.wheel_fits(m.group(2).rsplit("/", 1)[-1]) else ""
    )
    return native._WHEEL_LINE_RE.sub(fits, text)


URLS = [
    "https://h/a/pkg-1.0-cp311-cp311-win_amd64.whl",
    "https://h/a-b/cp311-cp311-win_amd64.whl",  # too few fields after the last '/'
    "cp311-cp311-win_amd64.whl",
    "x-cp311-cp311-win_amd64.whl",
    "https://h/pkg-1.0-cp311-cp311-manylinux_2_17_x86_64.manylinux2014_x86_64.whl",
    "https://h/cp311-cp311-manylinux_2_17_x86_64.whl",
    "https://h/p-1-py3-none-any.whl",
    "https://h/-py3-none-any.whl",
    "a.whl",
    "https://h/q-2-1-py3-none-any.whl",
    "https://h/p-1-x/y-z.whl",
]


@pytest.mark.parametrize("selection", [Selection(), Selection(python="3.12", machine="aarch64")])
def test_pruning_keeps_what_wheel_fits_keeps(selection: Selection) -> None:
    rng = random.Random(27)
    texts = [p.read_bytes().decode("utf-8-sig", "replace") for p in LOCKS]
    for _ in range(3000):
        lines = [
            f'    {{ url = "{rng.choice(URLS)}", hash = "sha256:00" }},'
            for _ in range(rng.randint(1, 8))
        ]
        texts.append("wheels = [\n" + "\n".join(lines) + "\n]\n")
    for text in texts:
        reference = _pruned(Selection(selection.python, selection.machine), text)
        # Twice on one selection: the second run finds the tags cached by the first.
        assert selection.prune_foreign_wheels(text) == reference, text
        assert selection.prune_foreign_wheels(text) == reference, text


def test_is_wheel_of_answers_as_parsing_the_name_and_version_does() -> None:
    names = ["pkg", "Pkg", "pkg_a", "pkg-a", "pkg.a", "other", "_pkg"]
    versions = ["1.0", "1.0.0", "1", "01.0", "1.0a1", "1.0.post1", "x"]
    builds = ["", "-1", "-a"]
    for name in names:
        for version in versions:
            for build in builds:
                filename = f"{name}-{version}{build}-py3-none-any.whl"
                for want_name, want_version in [("pkg", "1.0"), ("pkg-a", "1.0"), ("pkg", "1")]:
                    got_name, got_version = native._wheel_name_version(filename)
                    expected = got_name == want_name and got_version == Version(want_version)
                    assert native._is_wheel_of(filename, want_name, want_version) == expected, (
                        filename,
                        want_name,
                        want_version,
                    )
