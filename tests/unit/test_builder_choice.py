"""``--builder auto`` (issues 11, 29): buildah where it works, else the engine's BuildKit where
it builds reproducibly, else what the engine offers, and the choice said in one line; a named
builder is taken as it is."""

from __future__ import annotations

import os
import stat
from pathlib import Path
from typing import Any

import pytest

from reprobuild.backends import buildah
from reprobuild.imaging.image import choose_builder


class FakeEngine:
    def __init__(self, offers: str, buildkit: tuple[bool, str] | None = None) -> None:
        self.offers = offers
        self.asked: list[str] = []
        self.buildkit = buildkit or (False, "Engine 20.10.24 vendors a BuildKit older than 0.13")

    def buildkit_reproducible(self) -> tuple[bool, str]:
        return self.buildkit

    def resolve_builder(self, builder: str) -> str:
        self.asked.append(builder)
        return self.offers if builder == "auto" else builder


def _choose(builder: str, offers: str = "classic") -> tuple[str, list[str]]:
    said: list[str] = []
    engine: Any = FakeEngine(offers)
    return choose_builder(engine, builder, said.append), said  # type: ignore[arg-type]


def test_auto_picks_buildah_where_it_works(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(buildah, "usable", lambda: True)
    assert _choose("auto") == (
        "buildah",
        [
            "builder: buildah (auto: reproducible, the same inputs give the same image ID)",
            "builder: not the engine's BuildKit, though faster: Engine 20.10.24 vendors a "
            "BuildKit older than 0.13",
        ],
    )


def test_auto_keeps_buildah_where_buildkit_is_reproducible_too(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Issue 29: the fastest reproducible builder. On Engine 26 with the containerd store the
    engine's BuildKit is reproducible too, but its clamped archive made it the slower one
    (docs: Benchmarks), so buildah stays, and the second line says why."""
    monkeypatch.setattr(buildah, "usable", lambda: True)
    said: list[str] = []
    engine: Any = FakeEngine("buildx", (True, "Engine 26.1.5 with the containerd image store"))
    assert choose_builder(engine, "auto", said.append) == "buildah"
    assert said == [
        "builder: buildah (auto: reproducible, the same inputs give the same image ID)",
        "builder: not the engine's BuildKit, though reproducible here too: buildah builds the "
        "same inputs faster (docs: Benchmarks, Engine 26)",
    ]
    assert engine.asked == []


def test_auto_without_buildah_takes_the_engines_reproducible_buildkit(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """No buildah, but the engine's BuildKit builds reproducibly: that, not buildx's
    non-reproducible build; with --push it falls to what the engine offers (and build.py
    then refuses: --push needs buildah)."""
    monkeypatch.setattr(buildah, "usable", lambda: False)
    said: list[str] = []
    engine: Any = FakeEngine("buildx", (True, "Engine 26.1.5 with the containerd image store"))
    assert choose_builder(engine, "auto", said.append) == "buildkit"
    assert said == [
        "builder: buildkit (auto: buildah is not installed or not usable here, and the "
        "engine's BuildKit is reproducible: Engine 26.1.5 with the containerd image store)"
    ]
    said.clear()
    assert choose_builder(engine, "auto", said.append, push=True) == "buildx"
    assert said[0].startswith("builder: buildx (auto: buildah is not installed or not usable")


@pytest.mark.parametrize("offers", ["classic", "buildx"])
def test_auto_without_buildah_says_the_image_is_not_reproducible(
    monkeypatch: pytest.MonkeyPatch, offers: str
) -> None:
    monkeypatch.setattr(buildah, "usable", lambda: False)
    chosen, said = _choose("auto", offers)
    assert chosen == offers
    assert len(said) == 1
    assert said[0].startswith(f"builder: {offers} (auto: buildah is not installed or not usable")
    assert "not reproducible" in said[0]


@pytest.mark.parametrize("named", ["buildah", "buildx", "buildkit", "classic"])
def test_a_named_builder_is_taken_as_it_is(monkeypatch: pytest.MonkeyPatch, named: str) -> None:
    """...and an engine builder is checked with the engine, once (buildah by build.py)."""
    monkeypatch.setattr(buildah, "usable", lambda: pytest.fail("not asked"))
    said: list[str] = []
    engine = FakeEngine("classic")
    assert choose_builder(engine, named, said.append) == named  # type: ignore[arg-type]
    assert said == []
    assert engine.asked == ([] if named == "buildah" else [named])


def _fake_buildah(folder: Path, exit_code: int) -> None:
    tool = folder / "buildah"
    tool.write_text(f"#!/bin/sh\nexit {exit_code}\n")
    tool.chmod(tool.stat().st_mode | stat.S_IXUSR)


@pytest.mark.parametrize(("exit_code", "usable"), [(0, True), (125, False)])
def test_usable_asks_buildah_for_its_storage(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, exit_code: int, usable: bool
) -> None:
    """Installed but unable to open its storage (rootless without subordinate IDs): not
    usable, so auto falls back instead of failing the build."""
    _fake_buildah(tmp_path, exit_code)
    monkeypatch.setenv("PATH", str(tmp_path))
    assert buildah.usable() is usable


def test_usable_without_buildah(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("PATH", str(tmp_path))
    assert buildah.binary() is None and buildah.usable() is False
    assert os.environ["PATH"] == str(tmp_path)
