"""Seconds from the environment (reprobuild._util.envnum.env_seconds): the base probe's, the
index probe's and the build backends' time limits refuse the same bad values in one line."""

from __future__ import annotations

import pytest

from reprobuild._util.envnum import env_seconds
from reprobuild.errors import ReprobuildError
from reprobuild.imaging.baseprobe import PROBE_TIMEOUT, probe_timeout


@pytest.mark.parametrize("raw", ["abc", "nan", "inf", "0", "-5", "3601", "1e9", "12s"])
def test_bad_values_are_one_line_naming_the_variable(raw: str) -> None:
    with pytest.raises(ReprobuildError) as info:
        env_seconds("X_TIMEOUT", 5.0, most=3600, environ={"X_TIMEOUT": raw})
    assert info.value.message == (
        f"X_TIMEOUT={raw!r} is not a number of seconds between 0 and 3600"
    )


@pytest.mark.parametrize(("raw", "want"), [("", 5.0), ("  ", 5.0), ("8", 8.0), ("0.5", 0.5)])
def test_good_values_and_the_default(raw: str, want: float) -> None:
    assert env_seconds("X_TIMEOUT", 5.0, most=3600, environ={"X_TIMEOUT": raw}) == want
    assert env_seconds("X_TIMEOUT", 5.0, most=3600, environ={}) == 5.0


def test_the_base_probes_limit(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("REPROBUILD_PROBE_TIMEOUT", raising=False)
    assert probe_timeout() == PROBE_TIMEOUT
    monkeypatch.setenv("REPROBUILD_PROBE_TIMEOUT", "8")
    assert probe_timeout() == 8.0
    monkeypatch.setenv("REPROBUILD_PROBE_TIMEOUT", "soon")
    with pytest.raises(ReprobuildError, match="REPROBUILD_PROBE_TIMEOUT='soon' is not a number"):
        probe_timeout()
