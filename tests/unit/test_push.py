"""``reprobuild push``'s bookkeeping over a fake engine: which layers were sent, their bytes
from the pushed manifest, the tag it makes and takes back, and its refusals. The real push to
the loopback registry is tests/engine/test_push.py."""

from __future__ import annotations

import json
from typing import Any, cast

import pytest

from reprobuild.backends.engine import PushOutcome
from reprobuild.bases.refs import ImageRef
from reprobuild.errors import EngineError, ImageRefError, ReprobuildError
from reprobuild.imaging.push import push_image

DIFF_IDS = [f"sha256:{c * 64}" for c in "abc"]
IMAGE_ID = "sha256:" + "1" * 64
DIGEST = "sha256:" + "d" * 64


class FakeEngine:
    def __init__(self, outcome: PushOutcome | Exception, tags: dict[str, str] | None = None):
        self.outcome = outcome
        self.tags = {"proj:cpu-1": IMAGE_ID, **(tags or {})}
        self.pushed: list[tuple[str, str]] = []

    def image_id(self, ref: str) -> str | None:
        return IMAGE_ID if ref == IMAGE_ID else self.tags.get(ref)

    def inspect(self, ref: str) -> dict[str, Any]:
        return {"Id": IMAGE_ID, "RootFS": {"Layers": DIFF_IDS}}

    def tag(self, image: str, ref: str) -> None:
        self.tags[ref] = image

    def untag(self, ref: str) -> None:
        self.tags.pop(ref, None)

    def push(self, name: str, tag: str, log: Any = None) -> PushOutcome:
        self.pushed.append((name, tag))
        if isinstance(self.outcome, Exception):
            raise self.outcome
        return self.outcome


def manifest(sizes: list[int]) -> Any:
    def read(target: ImageRef, digest: str) -> bytes:
        assert digest == DIGEST
        return json.dumps({"layers": [{"size": s} for s in sizes]}).encode()

    return read


def test_only_the_layers_sent_count_and_the_tag_pins_by_digest() -> None:
    engine = FakeEngine(PushOutcome(DIGEST, {"a" * 12: "present", "b" * 12: "sent"}))
    report = push_image(
        engine, "proj:cpu-1", "127.0.0.1:5000/team/proj:v1", read_manifest=manifest([10, 20, 30])
    )
    assert engine.pushed == [("127.0.0.1:5000/team/proj", "v1")]
    assert report.reference == f"127.0.0.1:5000/team/proj@{DIGEST}"
    # a layer the engine named no last word for counts as present (it sent nothing for it)
    assert (report.layers, report.sent_layers, report.sent_bytes) == (3, 1, 20)
    assert report.present_bytes == 40
    assert "1 of 3 layers sent (20 B); the registry had the other 2" in report.summary()
    assert engine.tags["127.0.0.1:5000/team/proj:v1"] == IMAGE_ID


def test_an_unreadable_manifest_leaves_the_bytes_unknown_not_zero() -> None:
    engine = FakeEngine(PushOutcome(DIGEST, {"a" * 12: "sent"}))

    def refuse(target: ImageRef, digest: str) -> bytes:
        raise ReprobuildError("401 from the registry")

    report = push_image(engine, IMAGE_ID, "reg.example/proj", read_manifest=refuse)
    assert engine.pushed == [("reg.example/proj", "latest")]
    assert report.sent_bytes is None and report.sent_layers == 1
    assert "layers sent;" in report.summary()
    # a manifest whose layers do not match the image's is not trusted either
    report = push_image(engine, IMAGE_ID, "reg.example/proj", read_manifest=manifest([1, 2]))
    assert report.sent_bytes is None


def test_a_failed_push_takes_back_the_tag_it_made_and_keeps_one_it_found() -> None:
    engine = FakeEngine(EngineError("pushing x failed: connection refused"))
    with pytest.raises(EngineError):
        push_image(engine, "proj:cpu-1", "127.0.0.1:5999/proj:v1")
    assert "127.0.0.1:5999/proj:v1" not in engine.tags
    engine = FakeEngine(EngineError("refused"), tags={"127.0.0.1:5999/proj:v1": IMAGE_ID})
    with pytest.raises(EngineError):
        push_image(engine, "proj:cpu-1", "127.0.0.1:5999/proj:v1")
    assert engine.tags["127.0.0.1:5999/proj:v1"] == IMAGE_ID


@pytest.mark.parametrize(
    ("image", "ref", "message"),
    [
        ("proj:cpu-1", f"reg.example/proj@{DIGEST}", "names a digest"),
        ("proj:cpu-1", "reg.example/Proj:v1", "invalid"),
        ("proj:cpu-1", "reg.example/proj:bad tag", "invalid"),
        ("nothere:1", "reg.example/proj:v1", "no image nothere:1 on this engine"),
        ("proj:cpu-1", "reg.example/other:v1", "names another image"),
    ],
)
def test_refusals_are_one_line_and_push_nothing(image: str, ref: str, message: str) -> None:
    other = "sha256:" + "2" * 64
    engine = FakeEngine(PushOutcome(DIGEST, {}), tags={"reg.example/other:v1": other})
    before = dict(engine.tags)
    with pytest.raises((ImageRefError, ReprobuildError)) as info:
        push_image(engine, image, ref)
    assert message in str(info.value) and "\n" not in str(info.value)
    assert engine.pushed == [] and engine.tags == before


def test_image_push_moves_the_tag_to_this_build_and_gives_it_back_on_failure() -> None:
    """``image --push REF`` after a code change: REF's engine tag names the last build, and
    this build is what the user pushes there (``reprobuild push`` alone still refuses)."""
    old = "sha256:" + "3" * 64
    engine = FakeEngine(PushOutcome(DIGEST, {}), tags={"127.0.0.1:5000/proj:v1": old})
    report = push_image(engine, "proj:cpu-1", "127.0.0.1:5000/proj:v1", move=True)
    assert report.digest == DIGEST and engine.pushed == [("127.0.0.1:5000/proj", "v1")]
    assert engine.tags["127.0.0.1:5000/proj:v1"] == IMAGE_ID
    failing = FakeEngine(EngineError("refused"), tags={"127.0.0.1:5000/proj:v1": old})
    with pytest.raises(EngineError):
        push_image(failing, "proj:cpu-1", "127.0.0.1:5000/proj:v1", move=True)
    assert failing.tags["127.0.0.1:5000/proj:v1"] == old


@pytest.mark.parametrize("with_aux", [True, False])
def test_the_engine_s_pushed_digest_is_read_from_aux_or_its_last_status_line(
    with_aux: bool,
) -> None:
    """The graph-driver store sends the digest as ``aux``; Engine 26's containerd image store
    only in its last status line (``v1: digest: sha256:... size: 1234``, moby#48331)."""
    from types import SimpleNamespace

    from reprobuild.backends.engine import Engine

    stream: list[dict[str, Any]] = [
        {"status": "The push refers to repository [127.0.0.1:5000/proj]"},
        {"status": "Pushed", "progressDetail": {}, "id": "aaaaaaaaaaaa"},
        {"status": "Layer already exists", "progressDetail": {}, "id": "bbbbbbbbbbbb"},
        {"status": f"v1: digest: {DIGEST} size: 1234"},
    ]
    if with_aux:
        stream.append({"progressDetail": {}, "aux": {"Tag": "v1", "Digest": DIGEST, "Size": 1234}})

    def push(name: str, tag: str, stream: bool, decode: bool) -> Any:
        return iter(messages)

    messages = stream
    engine = Engine(cast(Any, SimpleNamespace(api=SimpleNamespace(push=push))))
    outcome = engine.push("127.0.0.1:5000/proj", "v1")
    assert outcome.digest == DIGEST
    assert outcome.layers == {"aaaaaaaaaaaa": "sent", "bbbbbbbbbbbb": "present"}
