"""Load a buildah image into the Docker engine shipping only the layers the engine lacks.

``buildah push IMAGE docker-archive:`` writes every layer of the image, and ``docker load``
reads all of them back: about 12 s for a 1.3 GB image, the most of a code-only rebuild (the
build steps take about 2 s). The engine keeps a layer it already has (``docker load`` skips a
layer whose chain it holds without opening its file), and buildah, pushing to a registry,
asks for each layer by its digest (a ``HEAD`` of the blob) before it reads it. So:

1. the held prefix: the longest run of the image's first layers that some image in the engine
   already has, in the same order (the base, and earlier builds of the same lock);
2. a registry on 127.0.0.1 for this one push (a random port and a random repository name),
   which says it has exactly those layers, so buildah sends only the config and the others;
3. a docker-archive of the config and the layers received, with the held ones left out,
   loaded through the engine's API; the engine must then hold the image under its own ID.

Anything unexpected (an engine that lost a layer since, a push that fails) makes the caller
fall back to the whole archive: this is a shortcut, never the only way in. The registry speaks
only the part of the distribution API a push uses, checks every blob against its digest and
writes only under its own temporary directory.

An engine with the containerd image store (Engine 26 with ``containerd-snapshotter``) keeps
images as registry content: blobs by digest and a manifest, whose digest is the image ID. Its
``docker load`` of a docker-archive needs every layer file (``failed to resolve layers``) and
gzips each layer it has not seen compressed, so the image ID depends on containerd's gzip.
There, :func:`load_oci` loads an OCI layout instead, with the manifest buildah stored when
it committed the image (layers as plain tar, by their diff IDs): the image ID is that
manifest's digest whichever way the image got in. A whole image is made on the fly from
buildah's docker-archive (plain tar: nothing compresses); for a code-only change only the
layers the content store lacks leave buildah (:func:`new_blobs`; the store keeps the others as
blobs of the previous build, loaded the same way).
"""

from __future__ import annotations

import gzip
import hashlib
import http.server
import io
import json
import re
import secrets
import tarfile
import tempfile
import threading
from collections.abc import Callable, Iterable, Iterator, Sequence
from pathlib import Path
from typing import Any

from reprobuild._util import leftovers
from reprobuild._util.threads import start as start_thread
from reprobuild.backends import buildah
from reprobuild.bases.refs import parse_ref
from reprobuild.errors import EngineError

Log = Callable[[str], None]
MAX_MANIFEST_BYTES = 4 * 1024 * 1024
MAX_CHUNK_LINE = 1024
_DIGEST = re.compile(r"sha256:[0-9a-f]{64}")


def held_prefix(layers: Sequence[str], chains: Iterable[Sequence[str]]) -> int:
    """How many of ``layers`` (diff IDs, bottom first) the engine holds as a chain: the longest
    common prefix with any of ``chains`` (the layers of images the engine has)."""
    best = 0
    for chain in chains:
        n = 0
        for mine, theirs in zip(layers, chain, strict=False):
            if mine != theirs:
                break
            n += 1
        best = max(best, n)
    return best


class _Registry(http.server.ThreadingHTTPServer):
    """The registry end of one ``buildah push``: blobs and manifests of one repository."""

    daemon_threads = True

    def handle_error(self, request: Any, client_address: Any) -> None:
        """A push that drops its connection (buildah closes idle ones) is no error of ours:
        the push's own exit status says whether it worked. No traceback on the build log."""

    def __init__(self, held: set[str], folder: Path) -> None:
        super().__init__(("127.0.0.1", 0), _Handler)
        self.repository = f"reprobuild-load/{secrets.token_hex(16)}"
        self.held = held
        self.folder = folder
        self.blobs: dict[str, Path] = {}
        self.uploads: dict[str, Path] = {}
        self.manifest: bytes | None = None
        self.lock = threading.Lock()

    @property
    def reference(self) -> str:
        return f"127.0.0.1:{self.server_address[1]}/{self.repository}:image"


class _Handler(http.server.BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    timeout = 120  # a connection that sends nothing for this long is dropped
    server: _Registry

    def log_message(self, format: str, *args: Any) -> None:
        return None

    def _reply(self, code: int, headers: dict[str, str] | None = None, body: bytes = b"") -> None:
        self.send_response(code)
        self.send_header("Docker-Distribution-API-Version", "registry/2.0")
        for name, value in (headers or {}).items():
            self.send_header(name, value)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        if self.command != "HEAD" and body:
            self.wfile.write(body)

    def _route(self) -> tuple[str, str] | None:
        """(kind, rest) for a path under this push's repository, else None."""
        path = self.path.split("?", 1)[0]
        prefix = f"/v2/{self.server.repository}/"
        if not path.startswith(prefix):
            return None
        kind, _, rest = path[len(prefix) :].partition("/")
        return kind, rest

    def _body_into(self, out: Any) -> int:
        """Copy the request body into ``out`` (chunked or sized); the bytes copied."""
        total = 0
        if self.headers.get("Transfer-Encoding", "").lower() == "chunked":
            while True:
                line = self.rfile.readline(MAX_CHUNK_LINE)
                size = int(line.split(b";", 1)[0].strip() or b"0", 16)
                if size == 0:
                    while self.rfile.readline(MAX_CHUNK_LINE).strip():
                        pass  # trailers
                    return total
                total += self._copy(out, size)
                self.rfile.readline(MAX_CHUNK_LINE)  # the CRLF after the chunk
        return self._copy(out, int(self.headers.get("Content-Length") or 0))

    def _copy(self, out: Any, size: int) -> int:
        left = size
        while left > 0:
            data = self.rfile.read(min(left, 1 << 20))
            if not data:
                raise OSError("the push closed its connection mid-blob")
            out.write(data)
            left -= len(data)
        return size

    def do_GET(self) -> None:
        if self.path.split("?", 1)[0] in ("/v2/", "/v2"):
            self._reply(200, {"Content-Type": "application/json"}, b"{}")
        else:
            self._reply(404)

    def do_HEAD(self) -> None:
        route = self._route()
        if route is None or route[0] != "blobs" or not _DIGEST.fullmatch(route[1]):
            self._reply(404)
            return
        digest = route[1]
        stored = self.server.blobs.get(digest)
        if stored is not None:
            size = stored.stat().st_size
        elif digest in self.server.held:
            size = 1  # never read: the engine has the layer, the archive leaves it out
        else:
            self._reply(404)
            return
        self.send_response(200)
        self.send_header("Docker-Content-Digest", digest)
        self.send_header("Content-Length", str(size))
        self.end_headers()

    def do_POST(self) -> None:
        route = self._route()
        if route is None or route[0] != "blobs" or route[1] not in ("uploads", "uploads/"):
            self._reply(404)
            return
        session = secrets.token_hex(16)
        path = self.server.folder / f"upload-{session}"
        path.touch()
        with self.server.lock:
            self.server.uploads[session] = path
        where = f"/v2/{self.server.repository}/blobs/uploads/{session}"
        self._reply(202, {"Location": where, "Range": "0-0", "Docker-Upload-UUID": session})

    def _session(self) -> tuple[str, Path] | None:
        route = self._route()
        if route is None or route[0] != "blobs" or not route[1].startswith("uploads/"):
            return None
        session = route[1].removeprefix("uploads/")
        path = self.server.uploads.get(session)
        return (session, path) if path is not None else None

    def do_PATCH(self) -> None:
        found = self._session()
        if found is None:
            self._reply(404)
            return
        session, path = found
        with path.open("ab") as out:
            self._body_into(out)
        size = path.stat().st_size
        where = f"/v2/{self.server.repository}/blobs/uploads/{session}"
        self._reply(
            202,
            {"Location": where, "Range": f"0-{max(size - 1, 0)}", "Docker-Upload-UUID": session},
        )

    def do_PUT(self) -> None:
        route = self._route()
        if route is not None and route[0] == "manifests":
            self._put_manifest()
            return
        found = self._session()
        query = self.path.partition("?")[2]
        wanted = dict(p.partition("=")[::2] for p in query.split("&") if p).get("digest", "")
        wanted = wanted.replace("%3A", ":").replace("%3a", ":")
        if found is None or not _DIGEST.fullmatch(wanted):
            self._reply(404 if found is None else 400)
            return
        session, path = found
        with path.open("ab") as out:
            self._body_into(out)
        digest = hashlib.sha256()
        with path.open("rb") as data:
            for block in iter(lambda: data.read(1 << 20), b""):
                digest.update(block)
        if f"sha256:{digest.hexdigest()}" != wanted:
            path.unlink(missing_ok=True)
            self._reply(400, body=b'{"errors":[{"code":"DIGEST_INVALID"}]}')
            return
        blob = self.server.folder / f"blob-{wanted.removeprefix('sha256:')}"
        path.replace(blob)
        with self.server.lock:
            self.server.uploads.pop(session, None)
            self.server.blobs[wanted] = blob
        where = f"/v2/{self.server.repository}/blobs/{wanted}"
        self._reply(201, {"Location": where, "Docker-Content-Digest": wanted})

    def _put_manifest(self) -> None:
        size = int(self.headers.get("Content-Length") or 0)
        if not 0 < size <= MAX_MANIFEST_BYTES:
            self._reply(400)
            return
        body = self.rfile.read(size)
        self.server.manifest = body
        digest = f"sha256:{hashlib.sha256(body).hexdigest()}"
        where = f"/v2/{self.server.repository}/manifests/{digest}"
        self._reply(201, {"Location": where, "Docker-Content-Digest": digest})


def _archive(
    out: Path, registry: _Registry, image_id: str, name: str, diff_ids: Sequence[str], held: int
) -> int:
    """The docker-archive ``docker load`` reads: the config, and the layers from ``held`` on
    (the blobs the push sent for them, compressed or not: the engine unpacks either)."""
    manifest = json.loads(registry.manifest or b"{}")
    digests = [layer.get("digest") for layer in manifest.get("layers") or ()]
    config = registry.blobs.get(f"sha256:{image_id}")
    if config is None or len(digests) != len(diff_ids):
        raise EngineError("the push gave no config or another number of layers")
    files = [f"{d.removeprefix('sha256:')}.tar" for d in diff_ids]
    added: set[str] = set()
    with tarfile.open(out, "w") as tar:
        tar.add(config, arcname=f"{image_id}.json")
        for index in range(held, len(diff_ids)):
            blob = registry.blobs.get(str(digests[index]))
            if blob is None:
                raise EngineError(f"the push did not send layer {index + 1}")
            if files[index] not in added:  # a layer twice in the image: one file
                tar.add(blob, arcname=files[index])
                added.add(files[index])
        index_json = json.dumps(
            [{"Config": f"{image_id}.json", "RepoTags": [name], "Layers": files}]
        )
        info = tarfile.TarInfo("manifest.json")
        data = index_json.encode()
        info.size = len(data)
        tar.addfile(info, fileobj=io.BytesIO(data))
    return len(added)


def load(
    engine: Any,
    image_id: str,
    name: str,
    diff_ids: Sequence[str],
    held: int,
    log: Log,
) -> bool:
    """Load buildah's ``image_id`` into ``engine`` as ``name`` with only the layers the engine
    lacks: it holds the first ``held`` of ``diff_ids`` as a chain (:func:`held_prefix`).
    False (the caller loads the whole image) when it holds none; EngineError or OSError when
    the shortcut failed."""
    if held <= 0:
        return False
    prefix, rest = set(diff_ids[:held]), set(diff_ids[held:])
    with tempfile.TemporaryDirectory(prefix=leftovers.temp_prefix("layers")) as tmp:
        registry = _Registry(prefix - rest, Path(tmp))
        # Polled every 50 ms, not socketserver's 500: shutdown() waits for the next poll,
        # and every build that loads layers waited for it.
        server = threading.Thread(
            target=registry.serve_forever, args=(0.05,), name="reprobuild-registry"
        )
        server.daemon = True
        start_thread(server)
        try:
            buildah.push(
                image_id, f"docker://{registry.reference}", tls_verify=False, compress=False
            )
        finally:
            registry.shutdown()
            registry.server_close()
            server.join(10)
        archive = Path(tmp) / "image.tar"
        sent = _archive(archive, registry, image_id, name, diff_ids, held)
        engine.load(archive)
    if engine.image_id(name) != f"sha256:{image_id}":
        raise EngineError(f"the engine did not get sha256:{image_id[:12]} under {name}")
    log(
        f"loaded {sent} new layer(s) into the engine; it already held the first {held} of "
        f"{len(diff_ids)}"
    )
    return True


_PLAIN_LAYERS = (
    "application/vnd.oci.image.layer.v1.tar",
    "application/vnd.docker.image.rootfs.diff.tar",
)
# New layers up to this size leave buildah alone (new_blobs); above it, the archive stream
# is the faster way: buildah gzips what it pushes into a layout (a 462 MB layer: 20 s here),
# and writes its archive uncompressed (1.3 GB: about 6 s).
SMALL_NEW_BYTES = 64 << 20
_ARCHIVE_BLOB = re.compile(r"([0-9a-f]{64})(?:\.tar|\.json|/layer\.tar)")


def stored_manifest(image_id: str) -> tuple[bytes, list[str]]:
    """The manifest buildah wrote when it committed ``image_id`` (layers as plain tar, each
    by its diff ID) and the layers' diff IDs in order. EngineError for anything else (an
    image pulled into buildah keeps its registry's compressed manifest)."""
    manifest, image_config = buildah.stored_manifest(image_id)
    try:
        doc = json.loads(manifest)
        config = doc["config"]["digest"]
        layers = [(str(layer["mediaType"]), str(layer["digest"])) for layer in doc["layers"]]
    except (ValueError, KeyError, TypeError):
        raise EngineError(f"cannot read buildah's manifest of {image_id[:12]}") from None
    diff_ids = [str(d) for d in (image_config.get("rootfs") or {}).get("diff_ids") or []]
    if (
        config != f"sha256:{image_id.removeprefix('sha256:')}"
        or [digest for _, digest in layers] != diff_ids
        or any(media not in _PLAIN_LAYERS for media, _ in layers)
    ):
        raise EngineError(f"buildah's manifest of {image_id[:12]} does not name its plain layers")
    return manifest, diff_ids


def manifest_id(manifest: bytes) -> str:
    """The image ID the containerd store gives an image loaded with this manifest."""
    return f"sha256:{hashlib.sha256(manifest).hexdigest()}"


def store_name(name: str) -> str:
    """``name`` as the containerd store keeps it (``x:1`` is ``docker.io/library/x:1``)."""
    ref = parse_ref(name)
    return f"{ref.registry}/{ref.repository}:{ref.tag or 'latest'}"


def _entry(arcname: str, size: int) -> bytes:
    info = tarfile.TarInfo(arcname)
    info.size, info.mode = size, 0o644
    return info.tobuf(format=tarfile.USTAR_FORMAT)


def _pad(size: int) -> bytes:
    return bytes(-size % tarfile.BLOCKSIZE)


class Chunks(io.RawIOBase):
    """A file over chunks of bytes (the archive buildah writes into a pipe)."""

    def __init__(self, chunks: Iterable[bytes]) -> None:
        self._chunks, self._left = iter(chunks), b""

    def readable(self) -> bool:
        return True

    def readinto(self, out: Any) -> int:
        while not self._left:
            try:
                self._left = next(self._chunks)
            except StopIteration:
                return 0
        n = min(len(out), len(self._left))
        out[:n], self._left = self._left[:n], self._left[n:]
        return n


def oci_layout(
    archive: Iterable[bytes], manifest: bytes, name: str, held: set[str], chunk: int = 1 << 20
) -> Iterator[bytes]:
    """The OCI layout ``docker load`` reads into the containerd store, as chunks, from the
    docker-archive buildah writes (``archive``): its config and layers as blobs, each checked
    against its digest as it passes, the ``held`` layers left out (read past, not sent), then
    ``manifest`` and an index naming it ``name``. EngineError, ending the stream, when a blob
    is not its digest or a layer the manifest names did not come."""
    doc = json.loads(manifest)
    wanted = {doc["config"]["digest"]} | {str(layer["digest"]) for layer in doc["layers"]}
    sent: set[str] = set()
    stream = io.BufferedReader(Chunks(archive), chunk)
    with tarfile.open(fileobj=stream, mode="r|") as tar:
        for member in tar:
            found = _ARCHIVE_BLOB.fullmatch(member.name)
            if not member.isfile() or found is None:
                continue
            digest = f"sha256:{found.group(1)}"
            if digest in held or digest in sent or digest not in wanted:
                continue
            data = tar.extractfile(member)
            assert data is not None
            yield _entry(f"blobs/sha256/{found.group(1)}", member.size)
            hasher = hashlib.sha256()
            while block := data.read(chunk):
                hasher.update(block)
                yield block
            if f"sha256:{hasher.hexdigest()}" != digest:
                raise EngineError(f"buildah's archive gave a blob that is not {digest[:19]}")
            yield _pad(member.size)
            sent.add(digest)
    missing = wanted - held - sent
    if missing:
        raise EngineError(f"buildah's archive lacked {len(missing)} blob(s) of the image")
    yield from _layout_end(manifest, name)


def _layout_end(manifest: bytes, name: str) -> Iterator[bytes]:
    """The end of an OCI layout: ``manifest``, an index naming it ``name``, the layout file."""
    doc = json.loads(manifest)
    full = store_name(name)
    index = {
        "schemaVersion": 2,
        "manifests": [
            {
                "mediaType": doc.get("mediaType") or "application/vnd.oci.image.manifest.v1+json",
                "digest": manifest_id(manifest),
                "size": len(manifest),
                "annotations": {
                    "io.containerd.image.name": full,
                    "org.opencontainers.image.ref.name": full.rsplit(":", 1)[1],
                },
            }
        ],
    }
    small = [
        (f"blobs/sha256/{manifest_id(manifest).removeprefix('sha256:')}", manifest),
        ("index.json", json.dumps(index).encode()),
        ("oci-layout", b'{"imageLayoutVersion":"1.0.0"}'),
    ]
    for arcname, body in small:
        yield _entry(arcname, len(body)) + body + _pad(len(body))
    yield bytes(2 * tarfile.BLOCKSIZE)


def _files_layout(
    blobs: Sequence[tuple[str, Path]], manifest: bytes, name: str, chunk: int = 1 << 20
) -> Iterator[bytes]:
    """An OCI layout of ``blobs`` (digest, file) and ``manifest``, as chunks."""
    for digest, path in blobs:
        size = path.stat().st_size
        yield _entry(f"blobs/sha256/{digest.removeprefix('sha256:')}", size)
        with path.open("rb") as data:
            while block := data.read(chunk):
                yield block
        yield _pad(size)
    yield from _layout_end(manifest, name)


def _plain_bytes(manifest: bytes, held: set[str]) -> int:
    """The bytes of the layers of ``manifest`` that are not ``held``."""
    layers = json.loads(manifest).get("layers") or []
    return sum(int(layer.get("size") or 0) for layer in layers if layer.get("digest") not in held)


def new_blobs(
    image_id: str, diff_ids: Sequence[str], held: set[str], folder: Path
) -> list[tuple[str, Path]]:
    """The config and the layers of ``image_id`` that are not ``held``, as plain files under
    ``folder``, without buildah writing the held ones: ``buildah push`` into an OCI layout
    where each held layer is already there (an empty file under its diff ID, which buildah's
    OCI destination takes as present and skips). buildah gzips what it writes there, so each
    layer is unpacked here and checked against its diff ID. EngineError when one is not."""
    layout = folder / "oci"
    blobs = layout / "blobs" / "sha256"
    blobs.mkdir(parents=True)
    (layout / "oci-layout").write_text('{"imageLayoutVersion": "1.0.0"}')
    (layout / "index.json").write_text('{"schemaVersion": 2, "manifests": []}')
    for digest in held:
        (blobs / digest.removeprefix("sha256:")).touch()
    buildah.push(image_id, f"oci:{layout}:image", compress=False)
    try:
        index = json.loads((layout / "index.json").read_text())
        pushed = json.loads((blobs / index["manifests"][-1]["digest"][7:]).read_text())
        config = str(pushed["config"]["digest"])
        layers = [(str(layer["digest"]), str(layer["mediaType"])) for layer in pushed["layers"]]
    except (OSError, ValueError, KeyError, IndexError, TypeError):
        raise EngineError("buildah's push into an OCI layout left no readable manifest") from None
    if len(layers) != len(diff_ids) or not _DIGEST.fullmatch(config):
        raise EngineError("buildah's OCI manifest does not match the image's layers")
    out = [(config, blobs / config[7:])]
    seen: set[str] = set()
    for (digest, media), diff_id in zip(layers, diff_ids, strict=True):
        if diff_id in held or diff_id in seen or not _DIGEST.fullmatch(digest):
            continue
        seen.add(diff_id)
        plain = folder / f"plain-{diff_id[7:]}"
        hasher = hashlib.sha256()
        source = blobs / digest[7:]
        if not media.endswith("+gzip") and media not in _PLAIN_LAYERS:
            raise EngineError(f"buildah wrote a layer as {media}, which this load does not read")
        opener = gzip.open if media.endswith("+gzip") else open
        with opener(source, "rb") as data, plain.open("wb") as write:
            while block := data.read(1 << 20):
                hasher.update(block)
                write.write(block)
        if f"sha256:{hasher.hexdigest()}" != diff_id:
            raise EngineError(f"the layer buildah wrote is not {diff_id[:19]}")
        out.append((diff_id, plain))
    return out


def _manifest_held(engine: Any, previous: str | None) -> set[str]:
    """The layers (diff IDs) the containerd store holds as plain-tar blobs: those of the
    previous build (``previous``, in buildah's storage) when the engine holds it as loaded
    by :func:`load_oci` (its ID is the digest of buildah's manifest of it). An image pulled
    from a registry or loaded from a docker-archive keeps its layers under other digests,
    and a manifest naming blobs the store lacks would give an image that runs but cannot be
    saved or pushed; so nothing else counts."""
    if not previous:
        return set()
    manifest, diff_ids = stored_manifest(previous)
    return set(diff_ids) if engine.image_id(manifest_id(manifest)) else set()


def load_oci(engine: Any, image_id: str, name: str, previous: str | None, log: Log) -> str:
    """Load buildah's ``image_id`` into an engine with the containerd image store as ``name``;
    the image ID it gets there: the digest of buildah's own manifest of it (layers as plain
    tar), so the same inputs give the same ID however the image got in. An image the store
    holds only gets the tag; else only the layers the store lacks travel
    (:func:`_manifest_held`), and when that fails, every layer. EngineError or OSError when
    the load failed."""
    manifest, diff_ids = stored_manifest(image_id)
    wanted = manifest_id(manifest)
    if engine.image_id(wanted) is not None:
        log(f"the engine already holds {wanted[:19]}: tagging it {name}")
        engine.tag(wanted, name)
        return wanted
    try:
        held = _manifest_held(engine, previous) & set(diff_ids)
    except (EngineError, OSError) as exc:
        log(f"cannot tell which layers the engine holds ({exc}); loading them all")
        held = set()
    for attempt in (held, set()) if held else (held,):
        try:
            if attempt and _plain_bytes(manifest, attempt) <= SMALL_NEW_BYTES:
                # only the new layers leave buildah (gzipped by it, unpacked here: cheap when
                # they are small, as after a code-only change)
                with tempfile.TemporaryDirectory(prefix=leftovers.temp_prefix("layers")) as tmp:
                    blobs = new_blobs(image_id, diff_ids, attempt, Path(tmp))
                    engine.load(_files_layout(blobs, manifest, name))
            else:  # buildah's archive streamed as it is written, the held layers read past
                with buildah.archive_stream(image_id, name) as chunks:
                    engine.load(oci_layout(chunks, manifest, name, attempt))
            got = engine.image_id(name)
            if got != wanted:
                raise EngineError(f"the engine did not get {wanted[:19]} under {name} ({got})")
        except (EngineError, OSError) as exc:
            if not attempt:
                raise
            log(f"loading only the new layers did not work ({exc}); loading the whole image")
            continue
        if attempt:
            kept = [d in attempt for d in diff_ids]
            first = kept.index(False) if False in kept else len(kept)
            which = "first" if sum(kept) == first else "other"  # held layers all at the bottom
            log(
                f"loaded {kept.count(False)} new layer(s) into the engine; it already held the "
                f"{which} {sum(kept)} of {len(diff_ids)}"
            )
        return wanted
    raise AssertionError("unreachable")
