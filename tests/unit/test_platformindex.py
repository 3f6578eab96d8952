"""``reprobuild image --platform linux/amd64,linux/arm64 --push REF`` (issue 53), without an
engine or a registry: the index's bytes, the order of the work (every platform built and
pushed, then one index put), what is refused before any build, and the engine tags given back
after a failure. The real thing (an arm64 image under qemu, a real registry) is in
tests/engine/test_arm64.py; an index put into the loopback registry and pulled by its digest
in tests/engine/test_push.py."""

from __future__ import annotations

import hashlib
import json
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any, cast

import pytest

from reprobuild.bases.oci import OCI_INDEX, OCI_MANIFEST
from reprobuild.bases.refs import ImageRef
from reprobuild.errors import ReprobuildError
from reprobuild.imaging import image as image_mod
from reprobuild.imaging import platformindex
from reprobuild.imaging.manifest import Manifest
from reprobuild.imaging.platformindex import build_index, index_document, platform_ref
from reprobuild.imaging.platforms import BuildPlatform
from reprobuild.imaging.push import PushReport
from reprobuild.imaging.result import ImageResult

ARM = BuildPlatform("linux/arm64", "aarch64")
AMD = BuildPlatform("linux/amd64", "x86_64")
PUSH = "127.0.0.1:5000/team/proj:v1"


def digest_of(data: bytes) -> str:
    return "sha256:" + hashlib.sha256(data).hexdigest()


class StubManifest:
    def to_dict(self) -> dict[str, Any]:
        return {"machine": "stub"}


class FakeEngine:
    def __init__(self, arches: dict[str, tuple[str, str]]) -> None:
        self.arches = arches  # image ID -> (architecture, variant)
        self.tags: dict[str, str] = {}

    def image_id(self, ref: str) -> str | None:
        return self.tags.get(ref)

    def inspect(self, ref: str) -> dict[str, Any]:
        arch, variant = self.arches[ref]
        return {"Os": "linux", "Architecture": arch, **({"Variant": variant} if variant else {})}

    def tag(self, image: str, ref: str) -> None:
        self.tags[ref] = image

    def untag(self, ref: str) -> None:
        self.tags.pop(ref, None)


class FakeRegistry:
    def __init__(self) -> None:
        self.manifests: dict[str, bytes] = {}
        self.put: list[tuple[str, str, bytes, str]] = []
        self.opened = 0

    def get_manifest(self, ref: ImageRef, reference: str) -> tuple[bytes, str, str]:
        return self.manifests[reference], OCI_MANIFEST, reference

    def put_manifest(self, ref: ImageRef, reference: str, body: bytes, media_type: str) -> str:
        self.put.append((ref.name, reference, body, media_type))
        return digest_of(body)

    @contextmanager
    def client(self) -> Iterator[FakeRegistry]:
        self.opened += 1
        yield self


def builder(engine: FakeEngine, registry: FakeRegistry, fail: str | None = None):  # type: ignore[no-untyped-def]
    """A build_one that "builds" an image per platform and "pushes" it: the registry then
    holds a manifest for it, of a size of its own."""
    done: list[tuple[str, str]] = []

    def build_one(wanted: BuildPlatform, ref: str) -> ImageResult:
        if wanted.name == fail:
            raise ReprobuildError(f"the {wanted.arch} build failed")
        image_id = f"sha256:{wanted.arch:0<64}"
        engine.arches[image_id] = (wanted.arch, "v8" if wanted.arch == "arm64" else "")
        body = json.dumps({"for": wanted.arch, "pad": "x" * len(done)}).encode()
        registry.manifests[digest_of(body)] = body
        engine.tag(image_id, ref)
        done.append((wanted.name, ref))
        push = PushReport(image_id, f"{ref}@{digest_of(body)}", digest_of(body), 3, 3, 30, 0)
        return ImageResult(ref, image_id, cast(Manifest, StubManifest()), ref, push)

    return build_one, done


def test_each_platform_is_pushed_then_one_index_names_them_in_order() -> None:
    engine, registry = FakeEngine({}), FakeRegistry()
    build_one, done = builder(engine, registry)
    result = build_index((AMD, ARM), PUSH, build_one, engine=engine, registry=registry.client)
    assert done == [
        ("linux/amd64", "127.0.0.1:5000/team/proj:v1-amd64"),
        ("linux/arm64", "127.0.0.1:5000/team/proj:v1-arm64"),
    ]
    assert registry.opened == 1  # once the builds are done: a client's deadline starts with it
    [(name, tag, body, media_type)] = registry.put
    assert (name, tag, media_type) == ("127.0.0.1:5000/team/proj", "v1", OCI_INDEX)
    document = json.loads(body)
    assert document["mediaType"] == OCI_INDEX and document["schemaVersion"] == 2
    assert set(document) == {"schemaVersion", "mediaType", "manifests"}  # no annotation, no time
    entries = document["manifests"]
    assert [e["platform"] for e in entries] == [
        {"architecture": "amd64", "os": "linux"},
        {"architecture": "arm64", "os": "linux", "variant": "v8"},
    ]
    for entry, built in zip(entries, result.entries, strict=True):
        assert entry["digest"] == built.push.digest
        assert entry["size"] == len(registry.manifests[entry["digest"]])
        assert entry["mediaType"] == OCI_MANIFEST
    assert result.digest == digest_of(body)
    assert result.reference == f"127.0.0.1:5000/team/proj@{result.digest}" == result.image
    data = result.to_dict()
    assert data["image"] == result.reference and data["pushed"] == PUSH
    assert [p["platform"] for p in data["platforms"]] == ["linux/amd64", "linux/arm64"]
    assert data["platforms"][1]["push"]["digest"] == entries[1]["digest"]
    assert result.summary().startswith(f"pushed the index {result.reference} at {PUSH}: ")


def test_the_same_images_give_the_same_index_bytes() -> None:
    entries = [
        (OCI_MANIFEST, "sha256:" + "a" * 64, 500, {"architecture": "amd64", "os": "linux"}),
        (OCI_MANIFEST, "sha256:" + "b" * 64, 501, {"architecture": "arm64", "os": "linux"}),
    ]
    first = index_document(entries)
    assert first == index_document(list(entries))
    assert first == (
        b'{"manifests":[{"digest":"sha256:' + b"a" * 64 + b'","mediaType":"'
        + OCI_MANIFEST.encode() + b'","platform":{"architecture":"amd64","os":"linux"},'
        b'"size":500},{"digest":"sha256:' + b"b" * 64 + b'","mediaType":"'
        + OCI_MANIFEST.encode() + b'","platform":{"architecture":"arm64","os":"linux"},'
        b'"size":501}],"mediaType":"' + OCI_INDEX.encode() + b'","schemaVersion":2}'
    )  # fmt: skip
    assert index_document(entries[::-1]) != first  # --platform's order is the index's


def test_a_failed_platform_puts_no_index() -> None:
    engine, registry = FakeEngine({}), FakeRegistry()
    build_one, done = builder(engine, registry, fail="linux/arm64")
    with pytest.raises(ReprobuildError, match="the arm64 build failed"):
        build_index((AMD, ARM), PUSH, build_one, engine=engine, registry=registry.client)
    assert [name for name, _ in done] == ["linux/amd64"]
    assert registry.put == [] and registry.opened == 0


def test_an_image_of_another_platform_than_asked_is_refused() -> None:
    engine = FakeEngine({"sha256:x": ("amd64", "")})
    with pytest.raises(ReprobuildError, match="--platform linux/arm64: the built image"):
        platformindex.platform_of_image(engine, "sha256:x", ARM)


def test_platform_tags_sit_beside_the_index_tag() -> None:
    assert platform_ref(PUSH, ARM) == "127.0.0.1:5000/team/proj:v1-arm64"
    assert platform_ref("127.0.0.1:5000/proj", AMD) == "127.0.0.1:5000/proj:latest-amd64"


class Refuses:
    """An engine that fails the test if anything asks it anything."""

    def __getattr__(self, name: str) -> Any:
        raise AssertionError(f"the engine was asked for {name}")


def test_several_platforms_without_push_are_one_error_before_any_work() -> None:
    calls: list[str] = []
    with pytest.raises(ReprobuildError) as info:
        image_mod._build_index(
            cast(Any, lambda **_: calls.append("build")),
            cast(Any, lambda *_: calls.append("check")),
            (AMD, ARM),
            push=None, engine=cast(Any, Refuses()), log=lambda _: None,
        )  # fmt: skip
    assert "an image index of several platforms lives in a registry" in info.value.message
    assert "--push REGISTRY/NAME[:TAG]" in str(info.value.hint)
    assert calls == []


def test_every_platform_is_checked_before_the_first_build(monkeypatch: pytest.MonkeyPatch) -> None:
    calls: list[str] = []

    def check(wanted: BuildPlatform, push: str) -> tuple[str, Any]:
        calls.append(f"check {wanted.arch}")
        if wanted is ARM:
            raise ReprobuildError("requirements.lock has no wheel of torch for aarch64")
        return "proj:v1", None

    with pytest.raises(ReprobuildError, match="no wheel of torch for aarch64"):
        image_mod._build_index(
            cast(Any, lambda **_: calls.append("build")), check, (AMD, ARM),
            push=PUSH, engine=cast(Any, Refuses()), log=lambda _: None,
        )  # fmt: skip
    assert calls == ["check amd64", "check arm64"]


def test_a_failure_gives_back_the_engine_tags_this_run_moved(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    engine, registry = FakeEngine({}), FakeRegistry()
    engine.tags["proj:v2"] = "sha256:old"  # the amd64 tag named an older image
    build, _ = builder(engine, registry, fail="linux/arm64")

    def one(*, tag: str, push: str, wanted: BuildPlatform, checked_plan: Any) -> ImageResult:
        assert checked_plan == f"the plan for {wanted.arch}"  # planned once, by the check
        result: ImageResult = build(wanted, push)
        engine.tag(result.id, tag)
        return result

    def check(wanted: BuildPlatform, push: str) -> tuple[str, Any]:
        return "proj:v2" if wanted is AMD else "proj:v2-arm64", f"the plan for {wanted.arch}"

    monkeypatch.setattr(image_mod, "RegistryClient", registry.client)
    with pytest.raises(ReprobuildError, match="the arm64 build failed"):
        image_mod._build_index(
            one, check, (AMD, ARM), push=PUSH, engine=cast(Any, engine), log=lambda _: None
        )
    assert engine.tags == {"proj:v2": "sha256:old"}  # the old image keeps it; -amd64 is gone
    assert registry.put == []


def test_the_cli_says_so_in_one_line(tmp_path: Path) -> None:
    from helpers import run_cli

    proc = run_cli("image", str(tmp_path), "--platform", "linux/amd64,linux/amd64")
    assert proc.returncode != 0
    errors = [line for line in proc.stderr.splitlines() if line.startswith("error:")]
    assert errors == ["error: --platform 'linux/amd64,linux/amd64' names linux/amd64 twice"]
