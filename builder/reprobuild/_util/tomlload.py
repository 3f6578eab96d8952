"""TOML parsing for the lock readers: rtoml's speed, tomllib's verdict on anything it rejects.

Parsing is most of the time spent reading a native lock (a 300-package ``uv.lock`` is
~650 KB; ``tomllib`` takes ~10x as long on it as rtoml, a Rust parser). :func:`loads` returns
rtoml's dict when rtoml is importable and accepts the text. When rtoml refuses it, or is not
installed, ``tomllib`` parses the text instead, so its verdict and its error (``TOMLDecodeError``
naming ``(at line N, column M)``) are the ones callers see, exactly as before rtoml was used.
That fallback also covers what rtoml refuses and ``tomllib`` accepts (a float literal past
1e308, keys dotted more than rtoml's recursion limit allows): the result is ``tomllib``'s.

The two give equal values on every TOML file under ``tests/data`` (``tests/unit/test_tomlload.py``;
rtoml's offset datetimes carry its own ``TzInfo``, equal to ``datetime.timezone``'s). rtoml
follows TOML 1.1, so it also accepts the few things 1.1 adds to 1.0 (newlines and a trailing
comma inside an inline table, ``\\e`` and ``\\xHH`` escapes, times without seconds), which
``tomllib`` in Python 3.11 refuses; none of them can change a pin, a hash or a URL.
"""

from __future__ import annotations

import tomllib
from types import ModuleType
from typing import Any

__all__ = ["FAST", "loads"]

FAST: ModuleType | None
try:
    import rtoml as FAST
except ImportError:  # pragma: no cover - rtoml is a dependency; tomllib alone still works
    FAST = None


def loads(text: str) -> dict[str, Any]:
    """``text`` parsed; raises ``tomllib.TOMLDecodeError`` (or ``RecursionError``/``ValueError``,
    as ``tomllib`` does) when ``tomllib`` refuses it."""
    if FAST is not None:
        try:
            result: dict[str, Any] = FAST.loads(text)
            return result
        except ValueError:  # rtoml.TomlParsingError: tomllib decides, and words the error
            pass
    return tomllib.loads(text)
