"""rtoml (the fast path of reprobuild._util.tomlload) against tomllib: the same values on every
TOML file the tests hold, the same verdict and the same one-line file:line error on bad TOML,
and tomllib alone when rtoml cannot be imported."""

from __future__ import annotations

import datetime
import math
import tomllib
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import rtoml

from reprobuild._util import tomlload
from reprobuild.errors import LockfileError
from reprobuild.locks.lockfile import load_lock
from reprobuild.locks.records import load_toml

DATA = Path(__file__).resolve().parents[1] / "data"


def _toml_files() -> list[Path]:
    """Every TOML file under tests/data: pylock files, the TOML native locks, pyproject.toml."""
    names = ("*.toml", "uv.lock", "poetry.lock", "pdm.lock")
    return sorted({p for name in names for p in DATA.rglob(name) if p.is_file()})


def _same(a: Any, b: Any) -> Iterator[str]:
    """Where ``a`` and ``b`` differ, type for type (``==`` alone takes 1 == 1.0 == True):
    floats by bits (-0.0, NaN), aware datetimes by their UTC offset (rtoml has its own tzinfo)."""
    if type(a) is not type(b):
        yield f"{type(a).__name__} {a!r} != {type(b).__name__} {b!r}"
    elif isinstance(a, dict):
        if list(a) != list(b):
            yield f"keys {list(a)} != {list(b)}"
        for key in a:
            yield from (f"{key}: {d}" for d in _same(a[key], b.get(key)))
    elif isinstance(a, list):
        if len(a) != len(b):
            yield f"length {len(a)} != {len(b)}"
        for i, (x, y) in enumerate(zip(a, b, strict=False)):
            yield from (f"[{i}]: {d}" for d in _same(x, y))
    elif isinstance(a, float):
        if not (math.isnan(a) and math.isnan(b)) and (a, math.copysign(1, a)) != (
            b,
            math.copysign(1, b),
        ):
            yield f"{a!r} != {b!r}"
    elif isinstance(a, datetime.datetime | datetime.time):
        if (
            a != b
            or a.utcoffset() != b.utcoffset()
            or a.replace(tzinfo=None) != b.replace(tzinfo=None)
        ):
            yield f"{a!r} != {b!r}"
    elif a != b:
        yield f"{a!r} != {b!r}"


def test_the_data_holds_the_native_locks() -> None:
    names = {p.name for p in _toml_files()}
    assert {"uv.lock", "poetry.lock", "pdm.lock", "pylock.toml", "pyproject.toml"} <= names


@pytest.mark.parametrize("path", _toml_files(), ids=lambda p: str(p.relative_to(DATA)))
def test_rtoml_and_tomllib_agree_on_every_toml_file_in_the_tests(path: Path) -> None:
    text = path.read_bytes().decode("utf-8-sig")
    try:
        expected = tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:
        with pytest.raises(tomllib.TOMLDecodeError) as caught:
            tomlload.loads(text)
        assert str(caught.value) == str(exc)
        return
    # rtoml itself takes every valid file here (so the fast path is what is compared) ...
    assert not list(_same(rtoml.loads(text), expected))
    # ... and so what load_toml returns is rtoml's result, equal to tomllib's.
    assert not list(_same(tomlload.loads(text), expected))


EDGES = """\
offset = 1979-05-27T00:32:00.999999-07:00
utc = 1979-05-27T07:32:00Z
local = 1979-05-27T07:32:00
date = 1979-05-27
time = 07:32:00.5
big = 99999999999999999999
negative = -9223372036854775808
hex = 0xDEAD_BEEF
floats = [0.1, -0.0, 1e-7, 5e+22, 6.626e-34, inf, -inf]
nan = nan
inline = { a = 1, b = { c = [1, "x", { d = true }] } }
literal = 'C:\\path'
multi = \"\"\"
one \\
  two\"\"\"
unicode = "\\u00e9\\U0001F600"
dotted.key.here = "v"
[[package]]
name = "a"
wheels = [{ url = "https://x/a-1-py3-none-any.whl", hash = "sha256:00" }]
"""


def test_rtoml_gives_tomllib_values_for_the_edges_of_toml() -> None:
    assert not list(_same(rtoml.loads(EDGES), tomllib.loads(EDGES)))
    assert not list(_same(tomlload.loads(EDGES), tomllib.loads(EDGES)))


def test_what_rtoml_refuses_and_tomllib_takes_is_parsed_by_tomllib() -> None:
    # A float past the double range (tomllib: inf), keys dotted past rtoml's recursion limit.
    deep = "[" + ".".join(["k"] * 200) + "]\nv = 1\n"
    for text in ("big = 1e400\n", deep):
        with pytest.raises(rtoml.TomlParsingError):
            rtoml.loads(text)
        assert not list(_same(tomlload.loads(text), tomllib.loads(text)))
    assert tomlload.loads("big = 1e400\n") == {"big": math.inf}


def test_tomllib_alone_when_rtoml_is_not_importable(monkeypatch: pytest.MonkeyPatch) -> None:
    lock = DATA / "lockfiles" / "native" / "uv-torch-extra" / "uv.lock"
    fast = load_lock(lock)
    monkeypatch.setattr(tomlload, "FAST", None)
    assert not list(_same(tomlload.loads(EDGES), tomllib.loads(EDGES)))
    assert load_lock(lock) == fast


BAD = [
    ("a = 1\nb = = 2\n", 2),  # rtoml and tomllib both refuse
    ("a = 1\na = 2\n", 2),  # a key given twice
    ("[t]\nx = 1\n[t]\n", 3),  # a table declared twice
    ('x = "\x7f"\n', 1),  # a control character (decode_lock refuses it in a lock file)
    ("a = 0x_1\n", 1),
]


@pytest.mark.parametrize(("text", "line"), BAD)
def test_bad_toml_is_one_line_at_the_same_place_with_or_without_rtoml(
    text: str, line: int, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    path = tmp_path / "uv.lock"
    with pytest.raises(LockfileError) as fast:
        load_toml(text, path, "relock")
    monkeypatch.setattr(tomlload, "FAST", None)
    with pytest.raises(LockfileError) as slow:
        load_toml(text, path, "relock")
    assert str(fast.value) == str(slow.value)
    assert fast.value.line == line
    assert str(fast.value).startswith(f"{path}:{line}: is not valid TOML: ")
    assert "\n" not in str(fast.value)


def test_an_integer_too_long_for_python_is_one_line_not_a_traceback(tmp_path: Path) -> None:
    path = tmp_path / "uv.lock"
    with pytest.raises(LockfileError) as caught:
        load_toml("a = " + "1" * 5000 + "\n", path, "relock")
    assert str(caught.value).startswith(f"{path}: is not valid TOML: Exceeds the limit")
    assert "\n" not in str(caught.value)


def test_rtoml_takes_toml_1_1_where_tomllib_3_11_refuses() -> None:
    """The widening the module's docstring names, pinned: a newer rtoml that changed it
    would show here."""
    for text in ("a = { x = 1, }\n", 'a = "\\x41"\n', "a = 07:32\n"):
        with pytest.raises(tomllib.TOMLDecodeError):
            tomllib.loads(text)
        tomlload.loads(text)
