"""Hostile corpus, network-deadline and JSON family (issue #10).

Network cases run ``reprobuild resolve`` (and ``resolve --refresh``) for real against a local
threaded HTTP server on 127.0.0.1 that misbehaves: trickles, stalls, sends endless or huge
bodies, malformed JSON, redirect loops, a token realm that stalls. Each must fail within the
deadline plus a margin, measured here with time.monotonic, with one error line.

JSON cases check the one bounded loader (reprobuild._util.jsonload) directly, then through
``reprobuild diff`` on files, and through ``reprobuild inspect``/``diff`` on images whose
manifest file is hostile (built FROM scratch on the real engine, removed afterwards).
"""

from __future__ import annotations

import contextlib
import hashlib
import io
import json
import os
import tarfile
import threading
import time
from collections.abc import Callable, Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest
import yaml

from helpers import run_cli
from hostile_harness import Snapshot, assert_clean_failure
from reprobuild._util import jsonload
from reprobuild.errors import ReprobuildError

DEADLINE = 2.0
MARGIN = 5.0
OCI_MANIFEST = "application/vnd.oci.image.manifest.v1+json"
REPO = "team/app"

Behaviour = Callable[[BaseHTTPRequestHandler, "Server"], None]


# --- a misbehaving registry ------------------------------------------------------------------


class Server:
    """A threaded HTTP server on 127.0.0.1:<random port> answering every request with
    ``behaviour``; stop() ends trickles and stalls (their loops watch ``stop``)."""

    def __init__(self, behaviour: Behaviour) -> None:
        self.stop = threading.Event()
        outer = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, *args: Any) -> None:
                pass

            def handle_one(self) -> None:
                with contextlib.suppress(OSError):  # the client hung up: fine
                    behaviour(self, outer)

            do_GET = do_HEAD = handle_one

        self.httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.httpd.daemon_threads = True
        self.port = self.httpd.server_address[1]
        self.host = f"127.0.0.1:{self.port}"
        self.thread = threading.Thread(target=self.httpd.serve_forever, args=(0.05,), daemon=True)
        self.thread.start()

    def close(self) -> None:
        self.stop.set()
        self.httpd.shutdown()
        self.httpd.server_close()
        self.thread.join(timeout=5)


@pytest.fixture
def serve() -> Iterator[Callable[[Behaviour], Server]]:
    servers: list[Server] = []

    def make(behaviour: Behaviour) -> Server:
        server = Server(behaviour)
        servers.append(server)
        return server

    yield make
    for server in servers:
        server.close()


def _raw(h: BaseHTTPRequestHandler, data: bytes) -> None:
    h.wfile.write(data)
    h.wfile.flush()


def trickle_status(h: BaseHTTPRequestHandler, s: Server) -> None:
    """One byte of an endless status line every 0.5 s."""
    for byte in b"HTTP/1.1 200 OK" + b"x" * 10_000:
        if s.stop.wait(0.5):
            return
        _raw(h, bytes([byte]))


def trickle_headers(h: BaseHTTPRequestHandler, s: Server) -> None:
    _raw(h, b"HTTP/1.1 200 OK\r\n")
    for byte in b"X-Slow: " + b"y" * 10_000:
        if s.stop.wait(0.5):
            return
        _raw(h, bytes([byte]))


def trickle_body(h: BaseHTTPRequestHandler, s: Server) -> None:
    if h.command == "HEAD":
        return _answer(h, 405, b"")
    _raw(h, b"HTTP/1.1 200 OK\r\nContent-Type: " + OCI_MANIFEST.encode())
    _raw(h, b"\r\nContent-Length: 100000\r\n\r\n{")
    while not s.stop.wait(0.5):
        _raw(h, b" ")


def stall(h: BaseHTTPRequestHandler, s: Server) -> None:
    s.stop.wait(60)


def _answer(
    h: BaseHTTPRequestHandler, status: int, body: bytes, headers: dict[str, str] | None = None
) -> None:
    h.send_response(status)
    for key, value in (headers or {}).items():
        h.send_header(key, value)
    h.send_header("Content-Length", str(len(body)))
    h.end_headers()
    if h.command != "HEAD":
        h.wfile.write(body)


def endless_body(h: BaseHTTPRequestHandler, s: Server) -> None:
    if h.command == "HEAD":
        return _answer(h, 405, b"")
    _raw(h, b"HTTP/1.1 200 OK\r\nConnection: close\r\nContent-Type: application/json\r\n\r\n")
    block = b"[" * 65536
    while not s.stop.is_set():
        _raw(h, block)


def endless_chunked(h: BaseHTTPRequestHandler, s: Server) -> None:
    if h.command == "HEAD":
        return _answer(h, 405, b"")
    _raw(h, b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n")
    chunk = b"10000\r\n" + b"0" * 0x10000 + b"\r\n"
    while not s.stop.is_set():
        _raw(h, chunk)


def huge_length(h: BaseHTTPRequestHandler, s: Server) -> None:
    if h.command == "HEAD":
        return _answer(h, 405, b"")
    _raw(h, b"HTTP/1.1 200 OK\r\nContent-Length: 999999999999\r\n\r\n{")
    s.stop.wait(60)


def body_of(payload: bytes) -> Behaviour:
    """A manifest answer with this body (no Docker-Content-Digest: the body names itself)."""

    def behave(h: BaseHTTPRequestHandler, s: Server) -> None:
        if h.command == "HEAD":
            return _answer(h, 405, b"")
        _answer(h, 200, payload, {"Content-Type": OCI_MANIFEST})

    return behave


def redirect_loop(h: BaseHTTPRequestHandler, s: Server) -> None:
    _answer(h, 302, b"", {"Location": h.path})


def redirect_to(target: Server) -> Behaviour:
    def behave(h: BaseHTTPRequestHandler, s: Server) -> None:
        _answer(h, 302, b"", {"Location": f"http://{target.host}{h.path}"})

    return behave


def bearer_at(realm: Server) -> Behaviour:
    def behave(h: BaseHTTPRequestHandler, s: Server) -> None:
        challenge = f'Bearer realm="http://{realm.host}/token",service="test"'
        _answer(h, 401, b"", {"WWW-Authenticate": challenge})

    return behave


def error_body(status: int, payload_writer: Behaviour) -> Behaviour:
    """An error status whose body is then produced by ``payload_writer``'s raw stream."""

    def behave(h: BaseHTTPRequestHandler, s: Server) -> None:
        if h.command == "HEAD":
            return _answer(h, 405, b"")
        _raw(h, f"HTTP/1.1 {status} Nope\r\nConnection: close\r\n\r\n".encode())
        while not s.stop.is_set():
            _raw(h, b'{"errors": [' * 4096)

    return behave


# --- network cases ---------------------------------------------------------------------------


def _resolve(server: Server, *extra: str, env: dict[str, str] | None = None) -> tuple[Any, float]:
    start = time.monotonic()
    proc = run_cli(
        "resolve",
        f"{server.host}/{REPO}:1.0",
        *extra,
        env={"REPROBUILD_REGISTRY_TIMEOUT": f"{DEADLINE:g}", **(env or {})},
        timeout=60,
    )
    return proc, time.monotonic() - start


NETWORK_CASES: list[tuple[str, Behaviour, str]] = [
    ("trickle-status-line", trickle_status, f"did not answer within {DEADLINE:g}s"),
    ("trickle-headers", trickle_headers, f"did not answer within {DEADLINE:g}s"),
    ("trickle-body", trickle_body, f"did not answer within {DEADLINE:g}s"),
    ("stall", stall, f"within {DEADLINE:g}s"),
    ("endless-body", endless_body, "larger than 4194304 bytes"),
    ("endless-chunked-body", endless_chunked, "larger than 4194304 bytes"),
    ("huge-content-length", huge_length, "999999999999 bytes is larger than 4194304"),
    ("deep-json", body_of(b"[" * 200_000 + b"]" * 200_000), "nests deeper than 64"),
    ("deep-json-64-plus-one", body_of(b'{"a":' * 65 + b"1" + b"}" * 65), "nests deeper than 64"),
    ("long-number", body_of(b'{"schemaVersion": ' + b"9" * 50_000 + b"}"), "a number 50000"),
    ("not-utf8", body_of(b'{"a": "\xff\xfe"}'), "not UTF-8"),
    ("not-json", body_of(b"<html>hello</html>"), "is not valid JSON"),
    ("nan", body_of(b'{"schemaVersion": NaN}'), "NaN is not a JSON value"),
    ("redirect-loop", redirect_loop, "more than 10 redirects"),
    ("error-with-endless-body", error_body(500, stall), "HTTP 500"),
]


@pytest.mark.parametrize(
    ("behaviour", "expected"),
    [pytest.param(b, e, id=i) for i, b, e in NETWORK_CASES],
)
def test_resolve_against_a_hostile_registry(
    serve: Callable[[Behaviour], Server], behaviour: Behaviour, expected: str, tmp_path: Path
) -> None:
    server = serve(behaviour)
    snap = Snapshot.take([tmp_path])
    proc, took = _resolve(server)
    line = assert_clean_failure(proc, expected, exit_code=1)
    assert server.host in line or "127.0.0.1" in line, line
    assert took < DEADLINE + MARGIN, f"took {took:.1f}s"
    snap.assert_unchanged()


def test_redirect_to_a_stalling_server(serve: Callable[[Behaviour], Server]) -> None:
    stalling = serve(stall)
    server = serve(redirect_to(stalling))
    proc, took = _resolve(server)
    assert_clean_failure(proc, f"registry {stalling.host} did not answer within", exit_code=1)
    assert took < DEADLINE + MARGIN, f"took {took:.1f}s"


@pytest.mark.parametrize(
    ("realm_behaviour", "expected"),
    [
        pytest.param(stall, "did not answer within", id="realm-stalls"),
        pytest.param(trickle_status, "did not answer within", id="realm-trickles"),
        pytest.param(huge_length, "is larger than 1048576", id="realm-huge-length"),
        pytest.param(endless_body, "larger than 1048576 bytes", id="realm-endless-body"),
        pytest.param(body_of(b"[" * 100_000), "answered without a token", id="realm-deep-json"),
    ],
)
def test_token_realm_misbehaves(
    serve: Callable[[Behaviour], Server], realm_behaviour: Behaviour, expected: str
) -> None:
    realm = serve(realm_behaviour)
    server = serve(bearer_at(realm))
    proc, took = _resolve(server)
    line = assert_clean_failure(proc, expected, exit_code=1)
    assert realm.host in line, line
    assert took < DEADLINE + MARGIN, f"took {took:.1f}s"


def test_refresh_against_a_trickling_registry(
    serve: Callable[[Behaviour], Server], tmp_path: Path
) -> None:
    server = serve(trickle_status)
    catalog = yaml.safe_load(Path("images/catalog.yaml").read_text())
    name, entry = next((k, v) for k, v in catalog["bases"].items() if v["kind"] == "cpu")
    entry["ref"] = f"{server.host}/{REPO}:1.0@sha256:" + "ab" * 32
    catalog["bases"] = {name: entry}
    path = tmp_path / "catalog.yaml"
    path.write_text(yaml.safe_dump(catalog, sort_keys=False))
    snap = Snapshot.take([tmp_path])
    start = time.monotonic()
    proc = run_cli(
        "resolve",
        "--refresh",
        name,
        "--catalog",
        str(path),
        env={"REPROBUILD_REGISTRY_TIMEOUT": f"{DEADLINE:g}"},
        timeout=60,
    )
    took = time.monotonic() - start
    assert_clean_failure(proc, f"registry {server.host} did not answer within", exit_code=1)
    assert took < DEADLINE + MARGIN, f"took {took:.1f}s"
    snap.assert_unchanged()


@pytest.mark.parametrize("value", ["abc", "0", "-5", "1e9", "nan"])
def test_bad_deadline_setting(serve: Callable[[Behaviour], Server], value: str) -> None:
    server = serve(stall)
    proc, _ = _resolve(server, env={"REPROBUILD_REGISTRY_TIMEOUT": value})
    assert_clean_failure(proc, "REPROBUILD_REGISTRY_TIMEOUT", exit_code=1)


# --- the bounded loader, unit level ----------------------------------------------------------


LOADER_CASES: list[tuple[bytes, str]] = [
    (b"[" * 100_000 + b"]" * 100_000, "nests deeper than 64"),
    (b"[" * 65 + b"]" * 65, "nests deeper than 64"),
    (b'{"a":' * 70 + b"1" + b"}" * 70, "nests deeper than 64"),
    (b"1" * 101, "a number 101 characters long"),
    (b"[1." + b"5" * 200 + b"]", "a number 202 characters long"),
    (b"[1e" + b"9" * 200 + b"]", "a number"),
    (b"[Infinity]", "Infinity is not a JSON value"),
    (b"[-Infinity]", "-Infinity is not a JSON value"),
    (b'"\xc3\x28"', "not UTF-8"),
    (b"{", "is not valid JSON"),
    (b"", "is not valid JSON"),
    (b" " * (jsonload.MAX_DOCUMENT_BYTES + 1), "is larger than"),
]


@pytest.mark.parametrize(
    ("raw", "expected"),
    [pytest.param(r, e, id=f"loader-{i}") for i, (r, e) in enumerate(LOADER_CASES)],
)
def test_loader_limits(raw: bytes, expected: str) -> None:
    with pytest.raises(ReprobuildError) as err:
        jsonload.loads(raw, "doc.json")
    message = err.value.message
    assert message.startswith("doc.json ") and expected in message, message
    assert "\n" not in message and len(message) < 300


def test_loader_keeps_what_is_within_limits() -> None:
    doc = b"[" * 64 + b"1" + b"]" * 64
    assert jsonload.loads(doc, "x") is not None
    assert jsonload.loads(b'{"n": ' + b"9" * 100 + b"}", "x") == {"n": int("9" * 100)}
    assert jsonload.loads("\ufeff{}".encode(), "x") == {}


def test_loader_refuses_special_files(tmp_path: Path) -> None:
    fifo = tmp_path / "fifo.json"
    os.mkfifo(fifo)
    for path in (Path("/dev/zero"), fifo):
        with pytest.raises(ReprobuildError, match="is not a regular file"):
            jsonload.read_file(path, str(path))
    big = tmp_path / "big.json"
    big.write_bytes(b" " * 2048)
    with pytest.raises(ReprobuildError, match="larger than 1024 bytes"):
        jsonload.read_file(big, "big.json", max_bytes=1024)


# --- diff on hostile files (no engine: both inputs are paths) ---------------------------------


def _diff_file_cases(tmp: Path) -> dict[str, tuple[Path, str]]:
    cases: dict[str, tuple[Path, str]] = {}

    def put(name: str, data: bytes, expected: str) -> None:
        path = tmp / f"{name}.json"
        path.write_bytes(data)
        cases[name] = (path, expected)

    put("deep", b"[" * 500_000 + b"]" * 500_000, "nests deeper than 64")
    put("long-number", b'{"seed": ' + b"7" * 5000 + b"}", "a number 5000 characters long")
    put("not-utf8", b'{"kind": "\xff"}', "not UTF-8")
    put("huge", b" " * (jsonload.MAX_DOCUMENT_BYTES + 10), "is larger than")
    fifo = tmp / "fifo.json"
    os.mkfifo(fifo)
    cases["fifo"] = (fifo, "is not a regular file")
    return cases


@pytest.mark.parametrize("case", ["deep", "long-number", "not-utf8", "huge", "fifo", "dev-zero"])
def test_diff_refuses_hostile_files(case: str, tmp_path: Path) -> None:
    inputs = tmp_path / "in"
    inputs.mkdir()
    cases = _diff_file_cases(inputs)
    path, expected = cases.get(case, (Path("/dev/zero"), "is not a regular file"))
    good = inputs / "good.json"
    good.write_text(json.dumps({"kind": "reprobuild.run"}))
    snap = Snapshot.take([tmp_path])
    start = time.monotonic()
    proc = run_cli("diff", str(path), str(good), timeout=60)
    assert_clean_failure(proc, expected, exit_code=2)
    assert time.monotonic() - start < 30
    snap.assert_unchanged()


def test_diff_refuses_hostile_framework_record(tmp_path: Path) -> None:
    run_id = "20260101T000000Z-abcdef12"
    record = tmp_path / f"run-{run_id}.json"
    record.write_text(json.dumps({"kind": "reprobuild.run", "run_id": run_id}))
    (tmp_path / f"run-{run_id}-frameworks-torch.json").write_bytes(b"[" * 10_000)
    snap = Snapshot.take([tmp_path])
    proc = run_cli("diff", str(record), str(record), timeout=60)
    assert_clean_failure(proc, "nests deeper than 64", exit_code=2)
    snap.assert_unchanged()


# --- images whose manifest file is hostile (real engine) ---------------------------------------


MANIFEST = "opt/reprobuild/manifest.json"


def _image_with(docker_client: Any, tag: str, member: tarfile.TarInfo, data: bytes) -> str:
    """Build FROM scratch an image holding ``member`` at the manifest path, labelled with the
    sha256 of ``data`` (so the label check passes and the content is what is judged)."""
    label = hashlib.sha256(data).hexdigest()
    dockerfile = f"FROM scratch\nCOPY opt /opt\nLABEL io.reprobuild.manifest.sha256={label}\n"
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w") as tar:
        df = tarfile.TarInfo("Dockerfile")
        df.size = len(dockerfile)
        tar.addfile(df, io.BytesIO(dockerfile.encode()))
        for directory in ("opt", "opt/reprobuild"):
            info = tarfile.TarInfo(directory)
            info.type = tarfile.DIRTYPE
            info.mode = 0o755
            tar.addfile(info)
        tar.addfile(member, io.BytesIO(data) if member.isreg() else None)
    buf.seek(0)
    docker_client.images.build(fileobj=buf, custom_context=True, tag=tag, rm=True, forcerm=True)
    return tag


def _regular(data: bytes) -> tuple[tarfile.TarInfo, bytes]:
    info = tarfile.TarInfo(MANIFEST)
    info.size = len(data)
    info.mode = 0o644
    return info, data


def _symlink(target: str) -> tuple[tarfile.TarInfo, bytes]:
    info = tarfile.TarInfo(MANIFEST)
    info.type = tarfile.SYMTYPE
    info.linkname = target
    return info, b""


def _directory() -> tuple[tarfile.TarInfo, bytes]:
    info = tarfile.TarInfo(MANIFEST)
    info.type = tarfile.DIRTYPE
    info.mode = 0o755
    return info, b""


IMAGE_CASES: dict[str, tuple[Callable[[], tuple[tarfile.TarInfo, bytes]], str]] = {
    "symlink": (lambda: _symlink("/etc/passwd"), "is a symlink"),
    "dangling-symlink": (lambda: _symlink("../../nowhere"), "is a symlink"),
    "directory": (_directory, "is a directory"),
    "deep": (lambda: _regular(b"[" * 200_000 + b"]" * 200_000), "nests deeper than 64"),
    "long-number": (
        lambda: _regular(b'{"schema_version": ' + b"1" * 10_000 + b"}"),
        "a number 10000",
    ),
    "not-utf8": (lambda: _regular(b'{"name": "\xff"}'), "not UTF-8"),
    "huge": (lambda: _regular(b" " * (8 * 1024 * 1024 + 1)), "larger than 8388608 bytes"),
}


@pytest.mark.engine
@pytest.mark.registry
@pytest.mark.parametrize("command", ["inspect", "diff"])
@pytest.mark.parametrize("case", sorted(IMAGE_CASES))
def test_image_with_hostile_manifest(
    docker_client: Any,
    unique_tag: Callable[[str], str],
    tmp_path: Path,
    case: str,
    command: str,
) -> None:
    make, expected = IMAGE_CASES[case]
    member, data = make()
    tag = _image_with(docker_client, unique_tag("hostile-manifest"), member, data)
    other = tmp_path / "other.json"
    other.write_text(json.dumps({"kind": "reprobuild.run"}))
    snap = Snapshot.take([tmp_path], docker_client)
    args = ["inspect", tag] if command == "inspect" else ["diff", tag, str(other)]
    proc = run_cli(*args, timeout=120)
    assert_clean_failure(proc, expected, exit_code=2 if command == "diff" else 1)
    snap.assert_unchanged(docker_client)


# --- engine waits ------------------------------------------------------------------------------


class _StallingImages:
    def __init__(self, stop: threading.Event) -> None:
        self.stop = stop

    def get(self, ref: str) -> Any:
        import docker.errors

        raise docker.errors.ImageNotFound(ref)

    def pull(self, repo: str, tag: str | None = None) -> Any:
        self.stop.wait(60)  # an engine waiting on a registry that never answers
        raise AssertionError("not reached")


def test_base_pull_has_an_overall_deadline(monkeypatch: pytest.MonkeyPatch) -> None:
    from reprobuild.backends.engine import PULL_DEADLINE_ENV, Engine
    from reprobuild.bases.refs import parse_ref
    from reprobuild.errors import EngineError

    stop = threading.Event()
    client = type("Client", (), {"images": _StallingImages(stop)})()
    monkeypatch.setenv(PULL_DEADLINE_ENV, "1")
    ref = parse_ref("127.0.0.1:5000/team/app@sha256:" + "ab" * 32)
    start = time.monotonic()
    try:
        with pytest.raises(EngineError, match=r"did not finish within 1s") as err:
            Engine(client).ensure_base(ref)
    finally:
        stop.set()
    assert time.monotonic() - start < 1 + MARGIN
    assert "127.0.0.1:5000/team/app@sha256:abab" in err.value.message


@pytest.mark.parametrize("value", ["soon", "0", "-1"])
def test_bad_pull_deadline_setting(monkeypatch: pytest.MonkeyPatch, value: str) -> None:
    from reprobuild.backends.engine import PULL_DEADLINE_ENV, pull_deadline
    from reprobuild.errors import EngineError

    monkeypatch.setenv(PULL_DEADLINE_ENV, value)
    with pytest.raises(EngineError, match=PULL_DEADLINE_ENV):
        pull_deadline()


@pytest.mark.engine
@pytest.mark.registry
def test_container_wait_has_a_deadline(docker_client: Any, base_ref: str) -> None:
    from reprobuild.backends.engine import Engine
    from reprobuild.errors import EngineError

    snap = Snapshot.take([], docker_client)
    start = time.monotonic()
    with pytest.raises(EngineError, match=r"did not exit within 2s; removed it"):
        Engine(docker_client).run(base_ref, ["600"], entrypoint=["sleep"], timeout=2)
    assert time.monotonic() - start < 2 + 2 * MARGIN
    snap.assert_unchanged(docker_client)
