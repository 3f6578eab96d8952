"""The incremental load of a buildah image (reprobuild.backends.layerload), without buildah: the
held prefix, the one-push registry spoken to over real HTTP as a push speaks it (HEAD, POST, a
chunked PATCH, PUT with the digest, the manifest), and the archive `docker load` reads. The
real push and load are in tests/engine/test_buildah.py."""

from __future__ import annotations

import contextlib
import hashlib
import http.client
import json
import tarfile
import threading
from collections.abc import Iterable, Iterator
from pathlib import Path

import pytest

from reprobuild.backends import layerload
from reprobuild.bases.refs import parse_ref
from reprobuild.errors import EngineError

A, B, C, D = (f"sha256:{c * 64}" for c in "abcd")


def test_held_prefix_is_the_longest_chain_in_order() -> None:
    assert layerload.held_prefix([A, B, C], []) == 0
    assert layerload.held_prefix([A, B, C], [[A], [A, B, D], [B, C]]) == 2
    assert layerload.held_prefix([A, B, C], [[A, B, C, D]]) == 3
    assert layerload.held_prefix([A, B], [[B, A]]) == 0  # the same layers, another order


@pytest.fixture
def registry(tmp_path: Path) -> Iterator[layerload._Registry]:
    server = layerload._Registry({A}, tmp_path)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield server
    server.shutdown()
    server.server_close()
    thread.join(5)


def _request(
    registry: layerload._Registry,
    method: str,
    path: str,
    body: bytes | None = None,
    headers: dict[str, str] | None = None,
    chunks: list[bytes] | None = None,
) -> http.client.HTTPResponse:
    connection = http.client.HTTPConnection("127.0.0.1", registry.server_address[1], timeout=10)
    if chunks is not None:
        connection.putrequest(method, path)
        connection.putheader("Transfer-Encoding", "chunked")
        connection.endheaders()
        for chunk in chunks:
            connection.send(f"{len(chunk):x}\r\n".encode() + chunk + b"\r\n")
        connection.send(b"0\r\n\r\n")
    else:
        connection.request(method, path, body=body, headers=headers or {})
    try:
        response = connection.getresponse()
        response.read()
    finally:
        connection.close()
    return response


def _upload(registry: layerload._Registry, data: bytes, digest: str) -> http.client.HTTPResponse:
    repo = f"/v2/{registry.repository}"
    started = _request(registry, "POST", f"{repo}/blobs/uploads/")
    assert started.status == 202
    where = started.getheader("Location") or ""
    assert where.startswith(f"{repo}/blobs/uploads/")
    half = len(data) // 2
    patched = _request(registry, "PATCH", where, chunks=[data[:half], data[half:]])
    assert patched.status == 202
    assert patched.getheader("Range") == f"0-{len(data) - 1}"
    return _request(registry, "PUT", f"{where}?digest={digest.replace(':', '%3A')}", body=b"")


def test_a_push_gets_only_the_layers_the_engine_lacks(registry: layerload._Registry) -> None:
    repo = f"/v2/{registry.repository}"
    assert _request(registry, "GET", "/v2/").status == 200
    assert _request(registry, "HEAD", f"{repo}/blobs/{A}").status == 200  # held: not sent
    assert _request(registry, "HEAD", f"{repo}/blobs/{B}").status == 404
    data = b"layer bytes " * 1000
    digest = f"sha256:{hashlib.sha256(data).hexdigest()}"
    done = _upload(registry, data, digest)
    assert done.status == 201 and done.getheader("Docker-Content-Digest") == digest
    assert registry.blobs[digest].read_bytes() == data
    assert _request(registry, "HEAD", f"{repo}/blobs/{digest}").status == 200
    manifest = json.dumps({"layers": [{"digest": A}, {"digest": digest}]}).encode()
    put = _request(registry, "PUT", f"{repo}/manifests/image", body=manifest)
    assert put.status == 201
    assert (
        put.getheader("Docker-Content-Digest") == f"sha256:{hashlib.sha256(manifest).hexdigest()}"
    )
    assert registry.manifest == manifest


def test_a_blob_that_is_not_its_digest_is_refused(registry: layerload._Registry) -> None:
    done = _upload(registry, b"what was sent", B)
    assert done.status == 400
    assert registry.blobs == {}
    assert list(registry.folder.iterdir()) == []  # nothing kept of it


def test_only_this_push_s_repository_answers(registry: layerload._Registry) -> None:
    for method, path in (
        ("HEAD", f"/v2/other/repo/blobs/{A}"),
        ("POST", "/v2/other/repo/blobs/uploads/"),
        ("PUT", "/v2/other/repo/manifests/image"),
        ("HEAD", f"/v2/{registry.repository}/blobs/../../etc/passwd"),
        ("PATCH", f"/v2/{registry.repository}/blobs/uploads/no-such-session"),
        ("GET", f"/v2/{registry.repository}/blobs/{A}"),
    ):
        assert _request(registry, method, path, body=b"x").status in (400, 404), (method, path)
    assert registry.manifest is None and registry.blobs == {}


def test_the_archive_leaves_out_the_held_layers(
    registry: layerload._Registry, tmp_path: Path
) -> None:
    config = json.dumps({"rootfs": {"diff_ids": [A, C]}}).encode()
    image_id = hashlib.sha256(config).hexdigest()
    layer = b"new layer"
    sent = f"sha256:{hashlib.sha256(layer).hexdigest()}"
    for data, digest in ((config, f"sha256:{image_id}"), (layer, sent)):
        assert _upload(registry, data, digest).status == 201
    registry.manifest = json.dumps({"layers": [{"digest": A}, {"digest": sent}]}).encode()
    out = tmp_path / "image.tar"
    assert layerload._archive(out, registry, image_id, "team/app:v1", [A, C], held=1) == 1
    with tarfile.open(out) as tar:
        assert sorted(tar.getnames()) == sorted(
            [f"{image_id}.json", f"{C[7:]}.tar", "manifest.json"]
        )
        index = json.loads(tar.extractfile("manifest.json").read())  # type: ignore[union-attr]
        assert index == [
            {"Config": f"{image_id}.json", "RepoTags": ["team/app:v1"],
             "Layers": [f"{A[7:]}.tar", f"{C[7:]}.tar"]}
        ]  # fmt: skip
        assert tar.extractfile(f"{C[7:]}.tar").read() == layer  # type: ignore[union-attr]
    registry.manifest = json.dumps({"layers": [{"digest": A}]}).encode()
    with pytest.raises(EngineError, match="another number of layers"):
        layerload._archive(out, registry, image_id, "team/app:v1", [A, C], held=1)


def test_nothing_held_means_the_whole_archive(tmp_path: Path) -> None:
    class NoEngine:
        def load(self, archive: Path) -> None:
            raise AssertionError("not called")

    held = layerload.held_prefix([A, B], [[C]])
    assert not layerload.load(NoEngine(), "0" * 64, "x:y", [A, B], held, print)


BASE = {"lock": "f" * 64, "base": parse_ref(f"team/base@sha256:{'e' * 64}")}


class _Engine:
    """The engine calls build._into_engine makes, recorded."""

    def __init__(self, holds: bool = False) -> None:
        self.holds = holds
        self.calls: list[tuple[str | bytes, ...]] = []

    def image_id(self, ref: str) -> str | None:
        self.calls.append(("image_id", ref))
        return ref if self.holds else None

    def tag(self, image: str, ref: str) -> None:
        self.calls.append(("tag", image, ref))

    def load(self, archive: Iterable[bytes]) -> None:
        self.calls.append(("load", b"".join(archive)))

    def untag(self, ref: str) -> None:
        self.calls.append(("untag", ref))


class _LoadingEngine(_Engine):
    """An engine whose load registers the image under its name, as docker load does."""

    def __init__(self, image: str, name: str) -> None:
        super().__init__()
        self.image, self.name, self.names = image, name, dict[str, str]()

    def image_id(self, ref: str) -> str | None:
        self.calls.append(("image_id", ref))
        return self.names.get(ref)

    def load(self, archive: Iterable[bytes]) -> None:
        super().load(archive)
        self.names[self.name] = self.image


@pytest.mark.parametrize(
    "fault", [EngineError("buildah push failed: exit 125"), KeyboardInterrupt()]
)
def test_a_push_that_fails_after_the_load_leaves_no_tag(
    monkeypatch: pytest.MonkeyPatch, fault: BaseException
) -> None:
    from reprobuild.backends import buildah
    from reprobuild.build import image as build_image

    @contextlib.contextmanager
    def archive_stream(image: str, name: str, **options: object) -> Iterator[Iterator[bytes]]:
        yield iter([b"the whole archive"])
        raise fault  # buildah's exit status, read after the engine loaded the archive

    monkeypatch.setattr(buildah, "archive_stream", archive_stream)
    monkeypatch.setattr(build_image, "_load_new_layers", lambda *a, **k: False)
    image = "1" * 64
    engine = _LoadingEngine(f"sha256:{image}", "team/app:v1")
    with pytest.raises(type(fault)):
        build_image._into_engine(engine, image, "team/app:v1", print, **BASE)  # type: ignore[arg-type]
    assert ("load", b"the whole archive") in engine.calls
    assert engine.calls[-1] == ("untag", "team/app:v1")

    # a load that failed (the name is not on this image): the tag is not touched
    engine = _LoadingEngine(f"sha256:{image}", "team/app:v1")
    engine.load = lambda archive: (_ for _ in ()).throw(EngineError("cannot load"))  # type: ignore[method-assign]
    with pytest.raises(EngineError):
        build_image._into_engine(engine, image, "team/app:v1", print, **BASE)  # type: ignore[arg-type]
    assert not any(call[0] == "untag" for call in engine.calls)


def test_a_failed_shortcut_falls_back_to_the_whole_archive(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    from reprobuild.backends import buildah
    from reprobuild.build import image as build_image

    pushed: list[tuple[str, str]] = []

    @contextlib.contextmanager
    def archive_stream(image: str, name: str, **options: object) -> Iterator[Iterator[bytes]]:
        pushed.append((image, name))
        yield iter([b"layer ", b"bytes"])

    monkeypatch.setattr(buildah, "archive_stream", archive_stream)

    def broken(*args: object, **kwargs: object) -> bool:
        raise EngineError("the engine did not get sha256:0000 under team/app:v1")

    monkeypatch.setattr(build_image, "_load_new_layers", broken)
    engine, said = _Engine(), list[str]()
    build_image._into_engine(engine, "0" * 64, "team/app:v1", said.append, **BASE)  # type: ignore[arg-type]
    assert said == [
        "loading only the new layers did not work (the engine did not get sha256:0000 under "
        "team/app:v1); loading the whole image"
    ]
    assert pushed == [("0" * 64, "team/app:v1")]
    assert ("load", b"layer bytes") in engine.calls  # the stream, as buildah writes it

    # an engine that holds the image: only the tag, nothing pushed or loaded
    pushed.clear()
    held = _Engine(holds=True)
    build_image._into_engine(held, "0" * 64, "team/app:v1", said.append, **BASE)  # type: ignore[arg-type]
    assert pushed == [] and held.calls[-1] == ("tag", "sha256:" + "0" * 64, "team/app:v1")
