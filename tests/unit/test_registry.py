"""RegistryClient against a real HTTP server on 127.0.0.1 that plays a token-auth registry.

The fake speaks the parts of the Registry HTTP API v2 the client uses: Bearer challenges
and an anonymous token endpoint, HEAD/GET of manifests by tag and digest, GET of blobs.
No network beyond loopback.
"""

from __future__ import annotations

import hashlib
import json
import re
import socket
import threading
import uuid
from collections.abc import Iterator
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any
from urllib.parse import parse_qs, urlsplit

import pytest

from reprobuild.bases import registry
from reprobuild.bases.refs import parse_ref
from reprobuild.bases.registry import (
    DOCKER_MANIFEST,
    OCI_INDEX,
    OCI_MANIFEST,
    RegistryClient,
    parse_challenges,
)
from reprobuild.errors import RegistryError

CONFIG_TYPE = "application/vnd.oci.image.config.v1+json"
LAYER_TYPE = "application/vnd.oci.image.layer.v1.tar+gzip"


def _digest(data: bytes) -> str:
    return "sha256:" + hashlib.sha256(data).hexdigest()


def _dump(document: object) -> bytes:
    return json.dumps(document, indent=2).encode()


@dataclass
class FakeRegistry:
    """State of the fake; tests change it to provoke the cases they check."""

    host: str = ""
    auth: str = "bearer"  # "bearer", "basic" or "none"
    token: str = field(default_factory=lambda: f"tok-{uuid.uuid4().hex}")
    token_key: str = "token"  # the JSON key the token endpoint uses ("access_token" too)
    service: str = "fake, registry"  # a comma inside a quoted value, on purpose
    head_digest: bool = True  # send Docker-Content-Digest on HEAD
    manifests: dict[tuple[str, str], tuple[bytes, str]] = field(default_factory=dict)
    blobs: dict[str, bytes] = field(default_factory=dict)
    corrupt: set[str] = field(default_factory=set)  # digests served with altered bytes
    put_digest: str | None = None  # the digest a PUT answers with (None: the body's)
    token_requests: list[dict[str, list[str]]] = field(default_factory=list)
    requests: list[tuple[str, str, int]] = field(default_factory=list)  # method, path, status
    lock: threading.Lock = field(default_factory=threading.Lock)

    def add_blob(self, data: bytes) -> dict[str, Any]:
        digest = _digest(data)
        self.blobs[digest] = data
        return {"digest": digest, "size": len(data)}

    def add_manifest(
        self, repo: str, document: dict[str, Any], media_type: str, tag: str | None = None
    ) -> dict[str, Any]:
        body = _dump(document)
        digest = _digest(body)
        self.manifests[(repo, digest)] = (body, media_type)
        if tag is not None:
            self.manifests[(repo, tag)] = (body, media_type)
        return {"mediaType": media_type, "digest": digest, "size": len(body)}

    def image(
        self, repo: str, arch: str, *, variant: str | None = None, media_type: str = OCI_MANIFEST
    ) -> tuple[dict[str, Any], str]:
        """A one-layer image for linux/arch: (manifest descriptor, config digest)."""
        platform = {
            "os": "linux",
            "architecture": arch,
            **({"variant": variant} if variant else {}),
        }
        config = {
            **platform,
            "config": {
                "Env": ["PATH=/usr/local/bin:/usr/bin", f"IMAGE_ARCH={arch}"],
                "Labels": {"org.opencontainers.image.version": "1.0", "arch": arch},
            },
            "rootfs": {"type": "layers", "diff_ids": []},
        }
        config_desc = {"mediaType": CONFIG_TYPE, **self.add_blob(_dump(config))}
        layer_desc = {"mediaType": LAYER_TYPE, **self.add_blob(f"layer {arch}".encode())}
        manifest = {
            "schemaVersion": 2,
            "mediaType": media_type,
            "config": config_desc,
            "layers": [layer_desc],
        }
        return self.add_manifest(repo, manifest, media_type), config_desc["digest"]


class _Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    server: _Server

    def log_message(self, format: str, *args: object) -> None:  # keep pytest output clean
        pass

    def do_HEAD(self) -> None:
        self._serve(head=True)

    def do_GET(self) -> None:
        self._serve(head=False)

    def do_PUT(self) -> None:
        """A manifest PUT, behind the same auth as reads; ``put_digest`` lies when set."""
        fake = self.server.fake
        body = self.rfile.read(int(self.headers.get("Content-Length", "0")))
        match = re.fullmatch(r"/v2/(?P<repo>.+)/manifests/(?P<ref>[^/]+)", self.path)
        if match is None:
            self._error(404, "NOT_FOUND", head=False)
            return
        if self._refused(match["repo"], "pull,push", head=False):
            return
        media_type = self.headers.get("Content-Type", "")
        with fake.lock:
            fake.manifests[(match["repo"], match["ref"])] = (body, media_type)
            fake.manifests[(match["repo"], _digest(body))] = (body, media_type)
        said = fake.put_digest or _digest(body)
        self._send(201, b"", {"Docker-Content-Digest": said})

    def _send(
        self,
        status: int,
        body: bytes = b"",
        headers: dict[str, str] | None = None,
        *,
        head: bool = False,
    ) -> None:
        fake = self.server.fake
        with fake.lock:
            fake.requests.append((self.command, self.path, status))
        self.send_response(status)
        for name, value in (headers or {}).items():
            self.send_header(name, value)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        if not head:
            self.wfile.write(body)

    def _error(self, status: int, code: str, *, head: bool, **headers: str) -> None:
        body = _dump({"errors": [{"code": code, "message": f"{code.lower()} (fake)"}]})
        self._send(status, body, {"Content-Type": "application/json", **headers}, head=head)

    def _refused(self, repo: str, access: str, *, head: bool) -> bool:
        """Answer 401 where the fake's auth wants it (Basic always; Bearer without the
        token), with the challenge for ``access``: True when it did."""
        fake = self.server.fake
        if fake.auth == "basic":
            challenge = 'Basic realm="fake registry, basic"'
        elif fake.auth == "bearer" and self.headers.get("Authorization") != f"Bearer {fake.token}":
            challenge = (
                f'Bearer realm="http://{fake.host}/token",service="{fake.service}",'
                f'scope="repository:{repo}:{access}"'
            )
        else:
            return False
        self._error(401, "UNAUTHORIZED", head=head, **{"WWW-Authenticate": challenge})
        return True

    def _serve(self, *, head: bool) -> None:
        fake = self.server.fake
        url = urlsplit(self.path)
        if url.path == "/token":
            with fake.lock:
                fake.token_requests.append(parse_qs(url.query))
            body = _dump({fake.token_key: fake.token, "expires_in": 300})
            self._send(200, body, {"Content-Type": "application/json"}, head=head)
            return
        match = re.fullmatch(r"/v2/(?P<repo>.+)/(?P<kind>manifests|blobs)/(?P<ref>[^/]+)", url.path)
        if match is None:
            self._error(404, "NOT_FOUND", head=head)
            return
        repo = match["repo"]
        if self._refused(repo, "pull", head=head):
            return
        reference = match["ref"]
        if match["kind"] == "blobs":
            data = fake.blobs.get(reference)
            if data is None:
                self._error(404, "BLOB_UNKNOWN", head=head)
                return
            if reference in fake.corrupt:
                data += b" "
            self._send(200, data, {"Content-Type": "application/octet-stream"}, head=head)
            return
        found = fake.manifests.get((repo, reference))
        if found is None:
            self._error(404, "MANIFEST_UNKNOWN", head=head)
            return
        body, media_type = found
        digest = _digest(body)
        if digest in fake.corrupt:
            body = body + b"\n"  # altered content, still announced under the old digest
        headers = {"Content-Type": media_type}
        if fake.head_digest or not head:
            headers["Docker-Content-Digest"] = digest
        self._send(200, body, headers, head=head)


class _Server(ThreadingHTTPServer):
    daemon_threads = True
    fake: FakeRegistry


@dataclass
class Images:
    """What the fixture published: digests the tests compare against."""

    fake: FakeRegistry
    index: dict[str, Any]
    amd64: dict[str, Any]
    amd64_config: str
    arm64: dict[str, Any]
    arm64_config: str
    attestation: dict[str, Any]
    single: dict[str, Any]
    single_config: str

    @property
    def host(self) -> str:
        return self.fake.host


@pytest.fixture
def images() -> Iterator[Images]:
    fake = FakeRegistry()
    server = _Server(("127.0.0.1", 0), _Handler)
    server.fake = fake
    fake.host = f"127.0.0.1:{server.server_address[1]}"

    amd64, amd64_config = fake.image("team/app", "amd64")
    arm64, arm64_config = fake.image("team/app", "arm64", variant="v8")
    attestation = fake.add_manifest(
        "team/app",
        {
            "schemaVersion": 2,
            "mediaType": OCI_MANIFEST,
            "config": {"mediaType": CONFIG_TYPE, **fake.add_blob(b"{}")},
            "layers": [],
        },
        OCI_MANIFEST,
    )
    index = fake.add_manifest(
        "team/app",
        {
            "schemaVersion": 2,
            "mediaType": OCI_INDEX,
            "manifests": [
                # the attestation first: a careless pick of the first entry would take it
                {
                    **attestation,
                    "platform": {"os": "unknown", "architecture": "unknown"},
                    "annotations": {
                        "vnd.docker.reference.type": "attestation-manifest",
                        "vnd.docker.reference.digest": amd64["digest"],
                    },
                },
                {**amd64, "platform": {"os": "linux", "architecture": "amd64"}},
                {
                    **arm64,
                    "platform": {"os": "linux", "architecture": "arm64", "variant": "v8"},
                },
            ],
        },
        OCI_INDEX,
        tag="1.0",
    )
    single, single_config = fake.image("team/single", "amd64", media_type=DOCKER_MANIFEST)
    fake.manifests[("team/single", "latest")] = fake.manifests[("team/single", single["digest"])]

    thread = threading.Thread(target=server.serve_forever, args=(0.02,), daemon=True)
    thread.start()
    try:
        yield Images(
            fake,
            index,
            amd64,
            amd64_config,
            arm64,
            arm64_config,
            attestation,
            single,
            single_config,
        )
    finally:
        server.shutdown()
        server.server_close()
        thread.join(timeout=5)


@pytest.fixture
def client() -> Iterator[RegistryClient]:
    with RegistryClient(timeout=5.0) as c:
        yield c


def _statuses(fake: FakeRegistry, status: int) -> int:
    return sum(1 for _, _, s in fake.requests if s == status)


# --- resolving -------------------------------------------------------------------------------


def test_resolve_multiarch_index_to_index_and_platform_digests(
    images: Images, client: RegistryClient
) -> None:
    resolved = client.resolve(f"{images.host}/team/app:1.0")

    assert resolved.ref.digest == images.index["digest"]
    assert resolved.ref.tag == "1.0"
    assert resolved.ref.registry == images.host
    assert resolved.media_type == OCI_INDEX
    assert resolved.platform == "linux/amd64"
    assert resolved.platform_digest == images.amd64["digest"]
    assert resolved.config_digest == images.amd64_config
    assert resolved.to_dict() == {
        "ref": f"{images.host}/team/app:1.0@{images.index['digest']}",
        "pinned": f"{images.host}/team/app@{images.index['digest']}",
        "registry": images.host,
        "repository": "team/app",
        "tag": "1.0",
        "digest": images.index["digest"],
        "media_type": OCI_INDEX,
        "platform": "linux/amd64",
        "platform_digest": images.amd64["digest"],
        "config_digest": images.amd64_config,
    }


@pytest.mark.parametrize("platform", ["linux/arm64", "linux/arm64/v8", "linux/aarch64"])
def test_resolve_selects_the_requested_platform(
    images: Images, client: RegistryClient, platform: str
) -> None:
    resolved = client.resolve(parse_ref(f"{images.host}/team/app:1.0"), platform=platform)

    assert resolved.ref.digest == images.index["digest"]
    assert resolved.platform == "linux/arm64/v8"
    assert resolved.platform_digest == images.arm64["digest"]
    assert resolved.config_digest == images.arm64_config


def test_unknown_platform_lists_the_available_ones(images: Images, client: RegistryClient) -> None:
    with pytest.raises(RegistryError) as err:
        client.resolve(f"{images.host}/team/app:1.0", platform="linux/s390x")

    message = err.value.message
    assert "linux/s390x" in message
    assert "team/app:1.0" in message
    assert "available: linux/amd64, linux/arm64/v8" in message
    assert "unknown" not in message  # the attestation entry is no platform


def test_invalid_platform_is_refused_before_any_request(
    images: Images, client: RegistryClient
) -> None:
    with pytest.raises(RegistryError, match=r"invalid platform 'amd64'.*OS/ARCH"):
        client.resolve(f"{images.host}/team/app:1.0", platform="amd64")
    assert images.fake.requests == []


def test_resolve_single_arch_manifest(images: Images, client: RegistryClient) -> None:
    resolved = client.resolve(f"{images.host}/team/single")  # no tag: latest

    assert resolved.ref.digest == images.single["digest"]
    assert resolved.media_type == DOCKER_MANIFEST
    assert resolved.platform == "linux/amd64"
    assert resolved.platform_digest == resolved.ref.digest
    assert resolved.config_digest == images.single_config


def test_single_arch_image_for_another_platform_is_refused(
    images: Images, client: RegistryClient
) -> None:
    with pytest.raises(
        RegistryError, match=r"single-platform image for linux/amd64, not linux/arm64"
    ):
        client.resolve(f"{images.host}/team/single:latest", platform="linux/arm64")


def test_pinned_ref_is_verified_and_kept(images: Images, client: RegistryClient) -> None:
    digest = images.index["digest"]
    resolved = client.resolve(f"{images.host}/team/app@{digest}")

    assert resolved.ref.digest == digest
    assert resolved.platform_digest == images.amd64["digest"]
    paths = [path for method, path, _ in images.fake.requests if method == "HEAD"]
    assert paths[-1] == f"/v2/team/app/manifests/{digest}"


def test_pinned_ref_to_a_missing_digest_is_not_found(
    images: Images, client: RegistryClient
) -> None:
    missing = "sha256:" + "0" * 64
    with pytest.raises(RegistryError) as err:
        client.resolve(f"{images.host}/team/app:1.0@{missing}")
    assert "no such image/tag" in err.value.message
    assert missing in err.value.message


def test_head_without_digest_falls_back_to_get(images: Images, client: RegistryClient) -> None:
    images.fake.head_digest = False

    resolved = client.resolve(f"{images.host}/team/app:1.0")

    assert resolved.ref.digest == images.index["digest"]
    gets = [path for method, path, status in images.fake.requests if method == "GET"]
    assert "/v2/team/app/manifests/1.0" in gets


def test_image_config_reads_env_and_labels(images: Images, client: RegistryClient) -> None:
    config = client.image_config(f"{images.host}/team/app:1.0", platform="linux/arm64")

    assert config["architecture"] == "arm64"
    assert "IMAGE_ARCH=arm64" in config["config"]["Env"]
    assert config["config"]["Labels"]["org.opencontainers.image.version"] == "1.0"


def test_module_level_resolve(images: Images) -> None:
    resolved = registry.resolve(f"{images.host}/team/app:1.0")
    assert resolved.ref.digest == images.index["digest"]


# --- auth ------------------------------------------------------------------------------------


def test_token_is_fetched_once_and_reused(images: Images, client: RegistryClient) -> None:
    client.resolve(f"{images.host}/team/app:1.0")
    client.resolve(f"{images.host}/team/app:1.0", platform="linux/arm64")
    client.image_config(f"{images.host}/team/app:1.0")

    assert len(images.fake.token_requests) == 1
    params = images.fake.token_requests[0]
    assert params == {"scope": ["repository:team/app:pull"], "service": ["fake, registry"]}
    assert _statuses(images.fake, 401) == 1  # later requests carry the token up front


def test_access_token_key_is_accepted(images: Images, client: RegistryClient) -> None:
    images.fake.token_key = "access_token"
    assert client.resolve(f"{images.host}/team/app:1.0").ref.digest == images.index["digest"]


def test_token_the_registry_stops_accepting_is_fetched_again(
    images: Images, client: RegistryClient
) -> None:
    client.resolve(f"{images.host}/team/app:1.0")
    images.fake.token = f"tok-{uuid.uuid4().hex}"  # the first one expired

    assert client.resolve(f"{images.host}/team/app:1.0").ref.digest == images.index["digest"]
    assert len(images.fake.token_requests) == 2


def test_registry_without_auth(images: Images, client: RegistryClient) -> None:
    images.fake.auth = "none"
    assert client.resolve(f"{images.host}/team/app:1.0").ref.digest == images.index["digest"]
    assert images.fake.token_requests == []


def test_basic_challenge_says_credentials_are_not_supported(
    images: Images, client: RegistryClient
) -> None:
    images.fake.auth = "basic"
    with pytest.raises(RegistryError) as err:
        client.resolve(f"{images.host}/team/app:1.0")

    message = err.value.message
    assert f"http://{images.host} refused anonymous access to {images.host}/team/app:1.0" in message
    assert "HTTP 401" in message
    assert "credentials are not supported yet" in message
    assert err.value.hint is not None and "docker login" in err.value.hint
    assert "\n" not in message


# --- failures --------------------------------------------------------------------------------


def test_missing_tag_is_no_such_image(images: Images, client: RegistryClient) -> None:
    with pytest.raises(RegistryError) as err:
        client.resolve(f"{images.host}/team/app:nope")

    assert err.value.message == (
        f"no such image/tag: {images.host}/team/app:nope (HTTP 404 from http://{images.host})"
    )


def test_manifest_digest_mismatch_is_refused(images: Images, client: RegistryClient) -> None:
    images.fake.corrupt.add(images.amd64["digest"])
    ref = parse_ref(f"{images.host}/team/app")

    with pytest.raises(RegistryError, match=r"does not match its digest.*refusing") as err:
        client.get_manifest(ref, images.amd64["digest"])
    assert images.amd64["digest"] in err.value.message

    with pytest.raises(RegistryError, match="does not match its digest"):
        client.resolve(f"{images.host}/team/app:1.0")


def test_tag_whose_body_does_not_match_its_announced_digest_is_refused(
    images: Images, client: RegistryClient
) -> None:
    images.fake.corrupt.add(images.index["digest"])
    with pytest.raises(RegistryError, match=r"manifests/1\.0: manifest content does not match"):
        client.get_manifest(parse_ref(f"{images.host}/team/app"), "1.0")


def test_get_manifest_returns_body_type_and_digest(images: Images, client: RegistryClient) -> None:
    body, media_type, digest = client.get_manifest(parse_ref(f"{images.host}/team/app"), "1.0")

    assert media_type == OCI_INDEX
    assert digest == images.index["digest"] == _digest(body)


def test_blob_digest_mismatch_is_refused(images: Images, client: RegistryClient) -> None:
    images.fake.corrupt.add(images.amd64_config)
    with pytest.raises(RegistryError, match="blob content does not match its digest"):
        client.get_blob(parse_ref(f"{images.host}/team/app"), images.amd64_config)


def test_missing_blob(images: Images, client: RegistryClient) -> None:
    missing = "sha256:" + "1" * 64
    with pytest.raises(RegistryError, match=rf"no such blob {missing}.*HTTP 404"):
        client.get_blob(parse_ref(f"{images.host}/team/app"), missing)


def _closed_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
    return port


def test_connection_refused_names_the_registry(client: RegistryClient) -> None:
    port = _closed_port()
    with pytest.raises(RegistryError) as err:
        client.resolve(f"127.0.0.1:{port}/team/app:1.0")

    assert err.value.message == f"could not reach http://127.0.0.1:{port}: connection refused"


def test_silent_registry_times_out() -> None:
    with socket.socket() as listener:  # accepts connections (backlog) but never answers
        listener.bind(("127.0.0.1", 0))
        listener.listen(4)
        port = listener.getsockname()[1]
        with RegistryClient(timeout=0.3) as client, pytest.raises(RegistryError) as err:
            client.resolve(f"127.0.0.1:{port}/team/app:1.0")

    assert err.value.message == f"could not reach http://127.0.0.1:{port}: no answer within 0.3s"


# --- addressing and parsing ------------------------------------------------------------------


def test_registry_urls(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(registry.INSECURE_REGISTRIES_ENV, " lab.example:5000 , other.example")
    with RegistryClient(insecure_registries=frozenset({"mirror.example"})) as client:
        assert client.registry_url("docker.io") == "https://registry-1.docker.io"
        assert client.registry_url("nvcr.io") == "https://nvcr.io"
        assert client.registry_url("127.0.0.1:5000") == "http://127.0.0.1:5000"
        assert client.registry_url("localhost:5000") == "http://localhost:5000"
        assert client.registry_url("mirror.example") == "http://mirror.example"
        assert client.registry_url("lab.example:5000") == "http://lab.example:5000"
        assert client.registry_url("other.example") == "http://other.example"
        assert client.registry_url("lab.example") == "https://lab.example"


def test_parse_challenges_bearer_with_commas_inside_quotes() -> None:
    header = (
        'Bearer realm="https://auth.docker.io/token",service="registry.docker.io",'
        'scope="repository:library/ubuntu:pull,push", error="insufficient_scope"'
    )
    assert parse_challenges(header) == [
        (
            "bearer",
            {
                "realm": "https://auth.docker.io/token",
                "service": "registry.docker.io",
                "scope": "repository:library/ubuntu:pull,push",
                "error": "insufficient_scope",
            },
        )
    ]


def test_parse_challenges_several_escapes_and_token68() -> None:
    header = (
        'Basic realm="a \\"quoted\\" realm, with comma", charset=UTF-8, '
        'Bearer realm="https://x/token" , Negotiate abc+/==, Foo'
    )
    challenges = parse_challenges(header)

    assert [c.scheme for c in challenges] == ["basic", "bearer", "negotiate", "foo"]
    assert challenges[0].params == {"realm": 'a "quoted" realm, with comma', "charset": "UTF-8"}
    assert challenges[1].params == {"realm": "https://x/token"}
    assert challenges[2].params == {"": "abc+/=="}
    assert challenges[3].params == {}


@pytest.mark.parametrize("header", ["", " , ", '"unterminated', "=x, Bearer realm=y"])
def test_parse_challenges_never_loops_on_garbage(header: str) -> None:
    challenges = parse_challenges(header)
    assert all(c.scheme for c in challenges)


def test_put_manifest_stores_it_under_the_tag_and_returns_its_digest(
    images: Images, client: RegistryClient
) -> None:
    index = json.dumps({"schemaVersion": 2, "mediaType": OCI_INDEX, "manifests": []}).encode()
    ref = parse_ref(f"{images.fake.host}/team/model")
    digest = client.put_manifest(ref, "v1", index, OCI_INDEX)
    assert digest == _digest(index)
    assert client.get_manifest(ref, "v1") == (index, OCI_INDEX, digest)
    [scope] = images.fake.token_requests[-1]["scope"]
    assert scope == "repository:team/model:pull,push"


def test_put_manifest_the_registry_names_otherwise_is_refused(
    images: Images, client: RegistryClient
) -> None:
    images.fake.put_digest = "sha256:" + "9" * 64
    with pytest.raises(RegistryError, match="took the manifest as sha256:9999"):
        client.put_manifest(parse_ref(f"{images.fake.host}/team/model"), "v1", b"{}", OCI_INDEX)


def test_put_manifest_to_a_registry_that_wants_a_login_says_so(
    images: Images, client: RegistryClient
) -> None:
    images.fake.auth = "basic"
    with pytest.raises(RegistryError) as err:
        client.put_manifest(parse_ref(f"{images.fake.host}/team/model"), "v1", b"{}", OCI_INDEX)
    assert "wants a login to push to" in err.value.message
    assert "imagetools create" in str(err.value.hint)
