"""Fixtures the unit tests share."""

from __future__ import annotations

import pytest

from reprobuild.locks import wheels


@pytest.fixture
def pages_read(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """The sdist lookup on (the suite turns it off), and the projects whose simple page it
    reads, in order (the real reader, counted)."""
    monkeypatch.setenv("REPROBUILD_SDIST_LOOKUP", "1")
    read: list[str] = []
    real = wheels._index_links

    def counted(index: str, project: str) -> list[str] | None:
        read.append(project)
        return real(index, project)

    monkeypatch.setattr(wheels, "_index_links", counted)
    return read
