"""The incremental load of a buildah image (reprobuild.backends.layerload), without buildah: the
held prefix, the one-push registry spoken to over real HTTP as a push speaks it (HEAD, POST, a
chunked PATCH, PUT with the digest, the manifest), and the archive `docker load` reads. The
real push and load are in tests/engine/test_buildah.py."""

from __future__ import annotations

import contextlib
import gzip
import hashlib
import http.client
import io
import json
import tarfile
import threading
from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import Any, cast

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

    def image_store(self) -> tuple[str, bool]:
        return "overlay2", False


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
    from reprobuild.imaging import load as build_image

    @contextlib.contextmanager
    def archive_stream(image: str, name: str, **options: object) -> Iterator[Iterator[bytes]]:
        yield iter([b"the whole archive"])
        raise fault  # buildah's exit status, read after the engine loaded the archive

    monkeypatch.setattr(buildah, "archive_stream", archive_stream)
    monkeypatch.setattr(build_image, "load_new_layers", lambda *a, **k: False)
    image = "1" * 64
    engine = _LoadingEngine(f"sha256:{image}", "team/app:v1")
    with pytest.raises(type(fault)):
        build_image.into_engine(engine, image, "team/app:v1", print, **BASE)  # type: ignore[arg-type]
    assert ("load", b"the whole archive") in engine.calls
    assert engine.calls[-1] == ("untag", "team/app:v1")

    # a load that failed (the name is not on this image): the tag is not touched
    engine = _LoadingEngine(f"sha256:{image}", "team/app:v1")
    engine.load = lambda archive: (_ for _ in ()).throw(EngineError("cannot load"))  # type: ignore[method-assign]
    with pytest.raises(EngineError):
        build_image.into_engine(engine, image, "team/app:v1", print, **BASE)  # type: ignore[arg-type]
    assert not any(call[0] == "untag" for call in engine.calls)


def test_a_signal_after_the_new_layers_loaded_gives_the_name_back(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The shortcut's load (the new layers) names the image too: SIGTERM right after it
    (tests/hostile/test_signals_buildah.py, ``stamp-commit-load`` with an earlier build of
    the project in the engine) left the tag on the image. The name goes back to the image it
    named before, or away."""
    from reprobuild.imaging import load as build_image

    image = "2" * 64
    for before in (None, "sha256:" + "9" * 64):
        engine = _LoadingEngine(f"sha256:{image}", "team/app:v1")
        if before is not None:
            engine.names["team/app:v1"] = before

        def shortcut(eng: _LoadingEngine, *args: object, **kwargs: object) -> bool:
            eng.load([b"the new layers"])
            raise KeyboardInterrupt  # the signal, once the engine named the image

        monkeypatch.setattr(build_image, "load_new_layers", shortcut)
        with pytest.raises(KeyboardInterrupt):
            build_image.into_engine(engine, image, "team/app:v1", print, **BASE)  # type: ignore[arg-type]
        assert ("untag", "team/app:v1") in engine.calls
        retagged = [c for c in engine.calls if c[0] == "tag"]
        assert retagged == ([] if before is None else [("tag", before, "team/app:v1")])


def test_a_failed_shortcut_falls_back_to_the_whole_archive(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    from reprobuild.backends import buildah
    from reprobuild.imaging import load as build_image

    pushed: list[tuple[str, str]] = []

    @contextlib.contextmanager
    def archive_stream(image: str, name: str, **options: object) -> Iterator[Iterator[bytes]]:
        pushed.append((image, name))
        yield iter([b"layer ", b"bytes"])

    monkeypatch.setattr(buildah, "archive_stream", archive_stream)

    def broken(*args: object, **kwargs: object) -> bool:
        raise EngineError("the engine did not get sha256:0000 under team/app:v1")

    monkeypatch.setattr(build_image, "load_new_layers", broken)
    engine, said = _Engine(), list[str]()
    build_image.into_engine(engine, "0" * 64, "team/app:v1", said.append, **BASE)  # type: ignore[arg-type]
    assert said == [
        "loading only the new layers did not work (the engine did not get sha256:0000 under "
        "team/app:v1); loading the whole image"
    ]
    assert pushed == [("0" * 64, "team/app:v1")]
    assert ("load", b"layer bytes") in engine.calls  # the stream, as buildah writes it

    # an engine that holds the image: only the tag, nothing pushed or loaded
    pushed.clear()
    held = _Engine(holds=True)
    build_image.into_engine(held, "0" * 64, "team/app:v1", said.append, **BASE)  # type: ignore[arg-type]
    assert pushed == [] and held.calls[-1] == ("tag", "sha256:" + "0" * 64, "team/app:v1")


def _layer(n: int) -> str:
    return f"sha256:{n:064x}"


class _Held:
    """An engine holding the base (2 layers) and images by label: their layers."""

    def __init__(self, by_label: dict[tuple[str, str], list[list[str]]]) -> None:
        self.by_label = by_label

    def layer_chains(self, label: str, value: str) -> list[list[str]]:
        return [list(c) for c in self.by_label.get((label, value), [])]

    def layers(self, ref: str) -> list[str]:
        return [_layer(1), _layer(2)]


@pytest.mark.parametrize(
    ("sizes", "ships"),
    [
        # a bump high in the image: 1 MB new above a 900 MB framework layer
        ({3: 900 << 20, 4: 10 << 20, 5: 1 << 20}, True),
        # a change low in the image: most of the bytes above the base are new
        ({3: 10 << 20, 4: 900 << 20, 5: 1 << 20}, False),
    ],
)
def test_an_earlier_build_of_the_project_with_another_lock_counts(
    monkeypatch: pytest.MonkeyPatch, sizes: dict[int, int], ships: bool
) -> None:
    """A one-package bump changes the lock: the engine's earlier build of the same project
    (by its title) holds the base and the groups below the bumped one. Only the layers past
    them are shipped, where they are under half the bytes above the base."""
    from reprobuild.backends import buildah
    from reprobuild.imaging import load as build_image
    from reprobuild.imaging.render import LOCK_LABEL, TITLE_LABEL

    mine = [_layer(n) for n in (1, 2, 3, 4, 5)]  # base, base, torch, bucket, app
    earlier = [_layer(n) for n in (1, 2, 3, 9, 10)]  # the same torch, another bucket
    manifest = json.dumps(
        {"layers": [{"digest": d, "size": sizes.get(n, 50 << 20)} for n, d in enumerate(mine, 1)]}
    ).encode()
    config = {"rootfs": {"diff_ids": mine}}
    monkeypatch.setattr(buildah, "stored_manifest", lambda _: (manifest, config))
    shipped: list[int] = []

    def load(engine: object, image: str, name: str, ids: object, held: int, log: object) -> bool:
        shipped.append(held)
        return True

    monkeypatch.setattr(layerload, "load", load)
    engine = cast(Any, _Held({(TITLE_LABEL, "team/app"): [earlier]}))
    got = build_image.load_new_layers(
        engine, "0" * 64, "team/app:v2", print, project="team/app", **BASE  # type: ignore[arg-type]
    )  # fmt: skip
    assert got is ships
    assert shipped == ([3] if ships else [])
    # without the project's name (the lock's label alone), the earlier build is not seen
    shipped.clear()
    assert not build_image.load_new_layers(engine, "0" * 64, "team/app:v2", print, **BASE)  # type: ignore[arg-type]
    # an earlier build of the same lock counts as before
    same_lock = _Held({(LOCK_LABEL, "f" * 64): [earlier]})
    assert build_image.load_new_layers(same_lock, "0" * 64, "x:1", print, **BASE) is ships  # type: ignore[arg-type]


# ---- the containerd image store: an OCI layout, the manifest's digest as the image ID ----


def test_store_names_are_containerd_s() -> None:
    assert layerload.store_name("x:1") == "docker.io/library/x:1"
    assert layerload.store_name("team/app") == "docker.io/team/app:latest"
    assert layerload.store_name("127.0.0.1:5000/a/b:t") == "127.0.0.1:5000/a/b:t"
    assert layerload.store_name("localhost/x:y") == "localhost/x:y"


def _docker_archive(blobs: dict[str, bytes]) -> bytes:
    """A docker-archive as buildah writes it: ``<hex>.json`` config, ``<hex>.tar`` layers."""
    out = io.BytesIO()
    with tarfile.open(fileobj=out, mode="w") as tar:
        for digest, data in blobs.items():
            suffix = ".json" if data.startswith(b"{") else ".tar"
            info = tarfile.TarInfo(digest[7:] + suffix)
            info.size = len(data)
            tar.addfile(info, io.BytesIO(data))
        info = tarfile.TarInfo("manifest.json")
        info.size = 2
        tar.addfile(info, io.BytesIO(b"[]"))
    return out.getvalue()


def _sha(data: bytes) -> str:
    return f"sha256:{hashlib.sha256(data).hexdigest()}"


class _Image:
    """A buildah image: config, plain layers, the manifest buildah stores at commit."""

    def __init__(self, *layers: bytes, app: str = "v1") -> None:
        self.layers = list(layers)
        self.diff_ids = [_sha(layer) for layer in layers]
        self.config = json.dumps({"app": app, "rootfs": {"diff_ids": self.diff_ids}}).encode()
        self.id = _sha(self.config)
        self.manifest = json.dumps({
            "schemaVersion": 2, "mediaType": "application/vnd.oci.image.manifest.v1+json",
            "config": {"digest": self.id, "size": len(self.config)},
            "layers": [{"mediaType": "application/vnd.oci.image.layer.v1.tar", "digest": d,
                        "size": len(x)} for d, x in zip(self.diff_ids, layers, strict=True)],
        }, separators=(",", ":")).encode()  # fmt: skip

    def archive(self) -> bytes:
        return _docker_archive(
            {self.id: self.config, **dict(zip(self.diff_ids, self.layers, strict=True))}
        )


def _unpack(stream: Iterable[bytes]) -> dict[str, bytes]:
    with tarfile.open(fileobj=io.BytesIO(b"".join(stream))) as tar:
        return {m.name: tar.extractfile(m).read() for m in tar.getmembers()}  # type: ignore[union-attr]


def test_the_oci_layout_is_the_archive_s_blobs_the_manifest_and_a_named_index() -> None:
    image = _Image(b"base layer" * 100, b"app layer")
    files = _unpack(layerload.oci_layout([image.archive()], image.manifest, "team/app:v1", set()))
    mid = layerload.manifest_id(image.manifest)
    assert sorted(files) == sorted(
        [
            "oci-layout",
            "index.json",
            *(f"blobs/sha256/{d[7:]}" for d in (mid, image.id, *image.diff_ids)),
        ]
    )
    assert files[f"blobs/sha256/{mid[7:]}"] == image.manifest
    assert files[f"blobs/sha256/{image.diff_ids[0][7:]}"] == b"base layer" * 100
    (entry,) = json.loads(files["index.json"])["manifests"]
    assert entry["digest"] == mid and entry["size"] == len(image.manifest)
    assert entry["annotations"]["io.containerd.image.name"] == "docker.io/team/app:v1"

    # held layers are read past, not sent
    files = _unpack(
        layerload.oci_layout([image.archive()], image.manifest, "x:1", {image.diff_ids[0]})
    )
    assert f"blobs/sha256/{image.diff_ids[0][7:]}" not in files
    assert f"blobs/sha256/{image.diff_ids[1][7:]}" in files


def test_the_oci_layout_refuses_a_blob_that_is_not_its_digest_or_one_missing() -> None:
    image = _Image(b"base", b"app")
    forged = _docker_archive(
        {image.id: image.config, image.diff_ids[0]: b"BASE", image.diff_ids[1]: b"app"}
    )
    with pytest.raises(EngineError, match="not sha256:"):
        _unpack(layerload.oci_layout([forged], image.manifest, "x:1", set()))
    short = _docker_archive({image.id: image.config, image.diff_ids[0]: b"base"})
    with pytest.raises(EngineError, match="lacked 1 blob"):
        _unpack(layerload.oci_layout([short], image.manifest, "x:1", set()))


def test_a_manifest_with_compressed_layers_is_not_used(monkeypatch: pytest.MonkeyPatch) -> None:
    from reprobuild.backends import buildah

    image = _Image(b"base")
    pulled = image.manifest.replace(b"layer.v1.tar", b"layer.v1.tar+gzip")
    monkeypatch.setattr(buildah, "stored_manifest", lambda i: (pulled, json.loads(image.config)))
    with pytest.raises(EngineError, match="does not name its plain layers"):
        layerload.stored_manifest(image.id)


class _StoreEngine(_Engine):
    """A containerd-store engine: an OCI layout's load names the manifest's digest."""

    def __init__(self, images: dict[str, str] | None = None, fail: int = 0) -> None:
        super().__init__()
        self.names = {layerload.store_name(k): v for k, v in (images or {}).items()}
        self.fail = fail
        self.loaded: list[dict[str, bytes]] = []

    def image_store(self) -> tuple[str, bool]:
        return "overlayfs", True

    def image_id(self, ref: str) -> str | None:
        self.calls.append(("image_id", ref))
        if ref.startswith("sha256:"):
            return ref if ref in self.names.values() else None
        return self.names.get(layerload.store_name(ref))

    def tag(self, image: str, ref: str) -> None:
        super().tag(image, ref)
        self.names[layerload.store_name(ref)] = image

    def untag(self, ref: str) -> None:
        super().untag(ref)
        self.names.pop(layerload.store_name(ref), None)

    def load(self, archive: Iterable[bytes]) -> None:
        files = _unpack(archive)
        self.calls.append(("load",))
        self.loaded.append(files)
        if self.fail:
            self.fail -= 1
            raise EngineError("cannot load the image archive into the engine: not found")
        entry = json.loads(files["index.json"])["manifests"][0]
        self.names[entry["annotations"]["io.containerd.image.name"]] = entry["digest"]


def _in_buildah(monkeypatch: pytest.MonkeyPatch, *images: _Image) -> list[str]:
    """buildah's storage holding ``images``; the archives it writes, recorded."""
    from reprobuild.backends import buildah

    by_id = {key: image for image in images for key in (image.id, image.id[7:])}  # buildah: hex
    streamed: list[str] = []
    pushed = streamed  # a push into a layout is recorded as "push:ID"

    @contextlib.contextmanager
    def archive_stream(image: str, name: str, **options: object) -> Iterator[Iterator[bytes]]:
        streamed.append(image)
        yield iter([by_id[image].archive()])

    def push(image: str, destination: str, **options: object) -> str:
        """Into an OCI layout as buildah's does: a blob already there is skipped, the others
        are written gzipped."""
        layout = Path(destination.removeprefix("oci:").rsplit(":", 1)[0])
        blobs, one = layout / "blobs" / "sha256", by_id[image]
        (blobs / one.id[7:]).write_bytes(one.config)
        layers = []
        for diff_id, data in zip(one.diff_ids, one.layers, strict=True):
            if (blobs / diff_id[7:]).exists():
                layers.append({"mediaType": "application/vnd.oci.image.layer.v1.tar",
                               "digest": diff_id, "size": 0})  # fmt: skip
                continue
            packed = gzip.compress(data)
            (blobs / _sha(packed)[7:]).write_bytes(packed)
            layers.append({"mediaType": "application/vnd.oci.image.layer.v1.tar+gzip",
                           "digest": _sha(packed), "size": len(packed)})  # fmt: skip
        manifest = json.dumps({"config": {"digest": one.id}, "layers": layers}).encode()
        (blobs / _sha(manifest)[7:]).write_bytes(manifest)
        index = {"manifests": [{"digest": _sha(manifest)}]}
        (layout / "index.json").write_text(json.dumps(index))
        pushed.append(f"push:{image}")
        return _sha(manifest)

    monkeypatch.setattr(buildah, "archive_stream", archive_stream)
    monkeypatch.setattr(buildah, "push", push)
    monkeypatch.setattr(
        buildah, "stored_manifest", lambda i: (by_id[i].manifest, json.loads(by_id[i].config))
    )
    return streamed


OLD, NEW = _Image(b"base", b"wheels", b"app v1"), _Image(b"base", b"wheels", b"app v2", app="v2")


def test_containerd_first_load_sends_every_layer(monkeypatch: pytest.MonkeyPatch) -> None:
    streamed = _in_buildah(monkeypatch, NEW)
    engine, said = _StoreEngine(), list[str]()
    got = layerload.load_oci(engine, NEW.id, "team/app:v1", None, said.append)
    assert got == layerload.manifest_id(NEW.manifest) and streamed == [NEW.id]
    (files,) = engine.loaded
    assert {f"blobs/sha256/{d[7:]}" for d in NEW.diff_ids} <= set(files)
    assert engine.image_id("team/app:v1") == got and said == []


def test_containerd_rebuild_sends_only_what_the_previous_build_lacks(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    streamed = _in_buildah(monkeypatch, OLD, NEW)
    engine, said = _StoreEngine(), list[str]()
    old_id = layerload.load_oci(engine, OLD.id, "team/app:v1", None, said.append)
    got = layerload.load_oci(engine, NEW.id, "team/app:v2", OLD.id, said.append)
    # the first build: buildah's whole archive; the rebuild: a push of the new layer alone,
    # gzipped by buildah and sent to the engine unpacked, as its diff ID
    assert streamed == [OLD.id, f"push:{NEW.id}"]
    assert engine.loaded[-1][f"blobs/sha256/{NEW.diff_ids[2][7:]}"] == b"app v2"
    layers = {name for name in engine.loaded[-1] if name.startswith("blobs/")}
    assert layers == {f"blobs/sha256/{d[7:]}" for d in (got, NEW.id, NEW.diff_ids[2])}
    assert said == ["loaded 1 new layer(s) into the engine; it already held the first 2 of 3"]
    assert old_id != got

    # the same image again: only the tag, nothing streamed
    said.clear()
    loads = len(engine.loaded)
    assert layerload.load_oci(engine, NEW.id, "team/app:v3", NEW.id, said.append) == got
    assert len(engine.loaded) == loads and engine.image_id("team/app:v3") == got
    assert said == [f"the engine already holds {got[:19]}: tagging it team/app:v3"]


def test_containerd_previous_build_not_in_the_engine_counts_for_nothing(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The previous build in buildah's storage, but the engine does not hold it as load_oci
    loads it (pulled, or loaded from a docker-archive: other blob digests): every layer goes."""
    _in_buildah(monkeypatch, OLD, NEW)
    engine = _StoreEngine({"team/app:v1": "sha256:" + "9" * 64})
    layerload.load_oci(engine, NEW.id, "team/app:v2", OLD.id, print)
    assert {f"blobs/sha256/{d[7:]}" for d in NEW.diff_ids} <= set(engine.loaded[-1])


def test_containerd_failed_shortcut_loads_every_layer(monkeypatch: pytest.MonkeyPatch) -> None:
    streamed = _in_buildah(monkeypatch, OLD, NEW)
    engine, said = _StoreEngine(), list[str]()
    layerload.load_oci(engine, OLD.id, "team/app:v1", None, said.append)
    engine.fail = 1
    got = layerload.load_oci(engine, NEW.id, "team/app:v2", OLD.id, said.append)
    assert streamed == [OLD.id, f"push:{NEW.id}", NEW.id]
    assert said == [
        "loading only the new layers did not work (cannot load the image archive into the "
        "engine: not found); loading the whole image"
    ]
    assert engine.image_id("team/app:v2") == got

    engine = _StoreEngine(fail=1)  # the whole image fails: the error goes up
    with pytest.raises(EngineError, match="cannot load"):
        layerload.load_oci(engine, NEW.id, "team/app:v4", None, print)
    assert engine.image_id("team/app:v4") is None


def test_containerd_failed_load_puts_the_name_back(monkeypatch: pytest.MonkeyPatch) -> None:
    from reprobuild.imaging import load as build_image

    _in_buildah(monkeypatch, NEW)
    engine = _StoreEngine({"team/app:v1": "sha256:" + "9" * 64}, fail=1)
    with pytest.raises(EngineError):
        build_image.into_engine(engine, NEW.id[7:], "team/app:v1", print, **BASE)  # type: ignore[arg-type]
    assert engine.image_id("team/app:v1") == "sha256:" + "9" * 64


def test_containerd_rebuild_with_large_new_layers_streams_the_archive(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """New layers over SMALL_NEW_BYTES (a lock change): buildah would gzip them into a layout;
    its plain archive is streamed instead, the held layers read past and not sent."""
    streamed = _in_buildah(monkeypatch, OLD, NEW)
    monkeypatch.setattr(layerload, "SMALL_NEW_BYTES", 0)
    engine, said = _StoreEngine(), list[str]()
    layerload.load_oci(engine, OLD.id, "team/app:v1", None, said.append)
    got = layerload.load_oci(engine, NEW.id, "team/app:v2", OLD.id, said.append)
    assert streamed == [OLD.id, NEW.id]
    layers = {name for name in engine.loaded[-1] if name.startswith("blobs/")}
    assert layers == {f"blobs/sha256/{d[7:]}" for d in (got, NEW.id, NEW.diff_ids[2])}


def test_new_blobs_refuses_a_layer_that_is_not_its_diff_id(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    image = _Image(b"base", b"app")
    _in_buildah(monkeypatch, image)
    from reprobuild.backends import buildah

    real_push = buildah.push

    def tampered(image_id: str, destination: str, **options: object) -> str:
        digest = real_push(image_id, destination, **options)  # type: ignore[arg-type]
        layout = Path(destination.removeprefix("oci:").rsplit(":", 1)[0]) / "blobs" / "sha256"
        for blob in layout.iterdir():
            if blob.read_bytes()[:2] == b"\x1f\x8b":  # the gzipped new layer
                blob.write_bytes(gzip.compress(b"APP"))
        return digest

    monkeypatch.setattr(buildah, "push", tampered)
    with pytest.raises(EngineError, match="is not sha256:"):
        layerload.new_blobs(image.id, image.diff_ids, {image.diff_ids[0]}, tmp_path)
