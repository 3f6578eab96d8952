"""The image probe's cache (imaging.image.ProbeCache): a code-only rebuild probes nothing, any
other change probes again. The engine tests check the result: a cached build gives the same
image ID as a --no-cache one (tests/engine/test_buildah.py)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from reprobuild.backends.engine import RunResult
from reprobuild.imaging.imageprobe import ProbeCache

APP = {"created_by": "/bin/sh -c #(nop) COPY dir:0123abcd in /app/ "}
RUN = {"created_by": "/bin/sh -c python -m compileall /opt/reprobuild/runtime"}


class Inner:
    """A prober that counts its runs (the real one runs a container in buildah)."""

    def __init__(self, code: int = 0) -> None:
        self.runs = 0
        self.code = code

    def run(
        self,
        image: str,
        command: list[str],
        *,
        entrypoint: list[str] | None = None,
        environment: dict[str, str] | None = None,
    ) -> RunResult:
        self.runs += 1
        return RunResult(self.code, b'{"probe": {}, "sbom": {}, "n": %d}' % self.runs, b"")

    def inspect(self, image: str) -> dict[str, Any]:
        raise AssertionError("the config is the one given")


def config(
    *layers: str, last: dict[str, str] = APP, env: str = "PATH=/opt/venv/bin"
) -> dict[str, Any]:
    return {
        "rootfs": {"diff_ids": list(layers)},
        "history": [{"created_by": "base"}, {"created_by": "x", "empty_layer": True}, last],
        "config": {"Env": [env], "Labels": {"a": "b"}},
    }


@pytest.fixture(autouse=True)
def cache(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.setenv("REPROBUILD_CACHE_DIR", str(tmp_path))
    return tmp_path


def probe(inner: Inner, conf: dict[str, Any], *, app: bool = True, env: str = "off") -> bytes:
    cache = ProbeCache(inner, conf, app=app)
    return cache.run(
        "img", ["facts"], entrypoint=["python", "-I"], environment={"MODE": env}
    ).stdout


def test_a_code_only_change_probes_nothing() -> None:
    inner = Inner()
    first = probe(inner, config("sha256:base", "sha256:venv", "sha256:app1"))
    again = probe(inner, config("sha256:base", "sha256:venv", "sha256:app2"))
    assert inner.runs == 1 and again == first


@pytest.mark.parametrize(
    "other",
    [
        config("sha256:base", "sha256:venv2", "sha256:app1"),  # another lock's install
        config("sha256:base", "sha256:venv", "sha256:app1", env="PATH=/elsewhere"),
        config("sha256:base", "sha256:venv", "sha256:app1", last=RUN),  # no code layer last
    ],
)
def test_anything_else_probes_again(other: dict[str, Any]) -> None:
    inner = Inner()
    probe(inner, config("sha256:base", "sha256:venv", "sha256:app1"))
    probe(inner, other)
    assert inner.runs == 2


def test_without_code_every_layer_counts_and_the_environment_too() -> None:
    inner = Inner()
    probe(inner, config("sha256:base", "sha256:venv", last=RUN), app=False)
    probe(inner, config("sha256:base", "sha256:venv2", last=RUN), app=False)
    probe(inner, config("sha256:base", "sha256:venv", last=RUN), app=False, env="strict")
    assert inner.runs == 3


def test_a_failed_probe_is_not_kept(cache: Path) -> None:
    inner = Inner(code=1)
    probe(inner, config("sha256:base", "sha256:venv", "sha256:app1"))
    probe(inner, config("sha256:base", "sha256:venv", "sha256:app1"))
    assert inner.runs == 2
    assert not list(cache.rglob("*.json"))


def test_inspect_reads_the_given_config() -> None:
    cache = ProbeCache(Inner(), config("sha256:base"), app=False)
    assert cache.inspect("img") == {"Config": {"Env": ["PATH=/opt/venv/bin"], "Labels": {"a": "b"}}}
