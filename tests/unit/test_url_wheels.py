"""Direct-URL wheels (issue 51, item 8): read from uv.lock and requirements syntax, fetched on
the host from a real HTTP server on 127.0.0.1 (plain http is allowed to a loopback host only),
hash-checked, cached by hash; and the hostile URLs, each one line with nothing kept."""

from __future__ import annotations

import hashlib
import http.server
import os
import socket
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

from helpers import make_pure_wheel
from reprobuild.errors import LockfileError
from reprobuild.locks import urlwheels
from reprobuild.locks.lockfile import load_lock
from reprobuild.locks.urlwheels import UrlWheelError, fetch_url_wheel
from reprobuild.locks.wheels import Target, fetch_wheels, wheel_folder

TARGET = Target("3.11", "x86_64", (2, 36))
WHEEL = "rbdirect-1.0-py3-none-any.whl"
# where /to/<key>/ redirects (any other key: to this server's own /files/)
REDIRECTS = {"file": "file:///etc", "ftp": "ftp://127.0.0.1", "remote": "http://example.org"}


def sha256(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


@dataclass
class Server:
    url: str  # http://127.0.0.1:PORT
    wheel: Path
    hits: list[str] = field(default_factory=list)


class Handler(http.server.SimpleHTTPRequestHandler):
    """The wheel under /files/; and the misbehaving URLs of the hostile cases."""

    hits: list[str]

    def do_GET(self) -> None:
        self.hits.append(self.path)
        name = self.path.rsplit("/", 1)[-1]
        if self.path.startswith("/to/"):  # /to/<where>/<name>: a redirect
            where = self.path.split("/")[2]
            base = "/files"  # a relative Location, resolved against the request
            self._redirect(f"{REDIRECTS.get(where, base)}/{name}")
        elif self.path.startswith("/loop/"):  # /loop/<n>/<name>: to /loop/<n+1>/<name>
            count = int(self.path.split("/")[2])
            self._redirect(f"/loop/{count + 1}/{name}")
        elif self.path.startswith("/changed/"):
            self._send(b"PK not the wheel the lock pins")
        elif self.path.startswith("/huge/"):  # says 9 GiB, sends none of it
            self.send_response(200)
            self.send_header("Content-Length", str(9 << 30))
            self.end_headers()
        elif self.path.startswith("/stream/"):  # no length: bytes until the client gives up
            self.send_response(200)
            self.end_headers()
            with_blocks = b"x" * 65536
            try:
                for _ in range(64):
                    self.wfile.write(with_blocks)
            except OSError:
                pass
        else:
            super().do_GET()

    def _redirect(self, location: str) -> None:
        self.send_response(302)
        self.send_header("Location", location)
        self.send_header("Content-Length", "0")
        self.end_headers()

    def _send(self, body: bytes) -> None:
        self.send_response(200)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, format: str, *args: Any) -> None:
        pass


@pytest.fixture
def server(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Server]:
    root = tmp_path / "www"
    (root / "files").mkdir(parents=True)
    wheel = make_pure_wheel(root / "files", "rbdirect")
    hits: list[str] = []

    def handler(*args: Any, **kwargs: Any) -> Handler:
        made = Handler.__new__(Handler)
        made.hits = hits
        Handler.__init__(made, *args, directory=str(root), **kwargs)
        return made

    httpd = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    thread = threading.Thread(target=httpd.serve_forever, args=(0.05,), daemon=True)
    thread.start()
    monkeypatch.setenv("REPROBUILD_CACHE_DIR", str(tmp_path / "cache"))
    try:
        yield Server(f"http://127.0.0.1:{httpd.server_address[1]}", wheel, hits)
    finally:
        httpd.shutdown()
        httpd.server_close()


def requirements_lock(tmp_path: Path, line: str) -> Path:
    lock = tmp_path / "requirements.lock"
    lock.write_text(line + "\n")
    return lock


def uv_lock(tmp_path: Path, url: str, digest: str) -> Path:
    lock = tmp_path / "proj" / "uv.lock"
    lock.parent.mkdir()
    lock.write_text(
        'version = 1\nrequires-python = ">=3.11"\n\n'
        '[[package]]\nname = "proj"\nversion = "0.1.0"\nsource = { virtual = "." }\n'
        'dependencies = [\n    { name = "rbdirect" },\n]\n\n'
        f'[[package]]\nname = "rbdirect"\nversion = "1.0"\nsource = {{ url = "{url}" }}\n'
        f'wheels = [\n    {{ url = "{url}", hash = "sha256:{digest}" }},\n]\n'
    )
    return lock


def cache_files() -> list[str]:
    folder = wheel_folder(TARGET)
    return sorted(p.name for p in folder.iterdir() if p.name != ".index.json")


# ---------------------------------------------------------------- reading and fetching


@pytest.mark.parametrize("syntax", ["hash-option", "fragment", "uv.lock"])
def test_a_url_wheel_is_fetched_checked_and_cached(
    tmp_path: Path, server: Server, syntax: str
) -> None:
    url = f"{server.url}/files/{WHEEL}"
    digest = sha256(server.wheel)
    if syntax == "uv.lock":
        path = uv_lock(tmp_path, url, digest)
    elif syntax == "fragment":
        path = requirements_lock(tmp_path, f"rbdirect @ {url}#sha256={digest}")
    else:
        path = requirements_lock(tmp_path, f"rbdirect @ {url} --hash=sha256:{digest}")
    lock = load_lock(path)
    (req,) = lock.requirements
    assert (req.name, req.version, req.url, req.hashes) == (
        "rbdirect",
        "1.0",
        url,
        (f"sha256:{digest}",),
    )
    # a hermetic build installs it by version from the fetched wheels; online, from its URL
    assert f"rbdirect==1.0 --hash=sha256:{digest}" in lock.render(index_options=False)
    assert f"rbdirect @ {url} --hash=sha256:{digest}" in lock.render(index_options=True)

    said: list[str] = []
    (got,) = fetch_wheels(lock, TARGET, tmp_path / "ctx", log=said.append)
    assert got.name == WHEEL and sha256(got) == digest
    assert server.hits == [f"/files/{WHEEL}"]
    assert cache_files() == [WHEEL]
    assert any("from its URL" in s for s in said)
    # cached by its hash: a second build fetches nothing
    fetch_wheels(lock, TARGET, tmp_path / "ctx2", log=said.append)
    assert server.hits == [f"/files/{WHEEL}"]


def test_a_redirect_over_http_to_loopback_is_followed(tmp_path: Path, server: Server) -> None:
    hop = f"/to/self/{WHEEL}"
    path = requirements_lock(
        tmp_path, f"rbdirect @ {server.url}{hop} --hash=sha256:{sha256(server.wheel)}"
    )
    (got,) = fetch_wheels(load_lock(path), TARGET, tmp_path / "ctx", log=lambda _: None)
    assert sha256(got) == sha256(server.wheel)
    assert server.hits == [hop, f"/files/{WHEEL}"]


def test_a_wheel_for_another_platform_is_refused_before_fetching(
    tmp_path: Path, server: Server
) -> None:
    name = "rbdirect-1.0-cp312-cp312-manylinux_2_17_aarch64.whl"
    path = requirements_lock(
        tmp_path, f"rbdirect @ {server.url}/files/{name} --hash=sha256:{'ab' * 32}"
    )
    with pytest.raises(UrlWheelError) as info:
        fetch_wheels(load_lock(path), TARGET, tmp_path / "ctx", log=lambda _: None)
    assert str(info.value) == (
        f"{path}:1: package rbdirect: wheel {server.url}/files/{name} does not fit "
        "cp311-x86_64-glibc2.36 (its tags are not among the ones this base installs)"
    )
    assert server.hits == []


def test_a_marker_that_does_not_hold_skips_the_wheel(tmp_path: Path, server: Server) -> None:
    path = requirements_lock(
        tmp_path,
        f"rbdirect @ {server.url}/files/{WHEEL} ; sys_platform == 'win32' "
        f"--hash=sha256:{sha256(server.wheel)}",
    )
    assert fetch_wheels(load_lock(path), TARGET, tmp_path / "ctx", log=lambda _: None) == []
    assert server.hits == []


# ---------------------------------------------------------------- hostile URLs


def _fetch_fails(server: Server, tmp_path: Path, path: str, **kw: Any) -> str:
    folder = tmp_path / "cache-folder"
    folder.mkdir(exist_ok=True)
    with pytest.raises(UrlWheelError) as info:
        fetch_url_wheel(
            f"{server.url}{path}", {sha256(server.wheel)}, folder, what="lock:3: rbdirect", **kw
        )
    assert list(folder.iterdir()) == []  # nothing half-written kept
    assert "\n" not in str(info.value)
    return str(info.value)


def test_changed_bytes_at_the_url_are_refused(tmp_path: Path, server: Server) -> None:
    message = _fetch_fails(server, tmp_path, f"/changed/{WHEEL}")
    got = hashlib.sha256(b"PK not the wheel the lock pins").hexdigest()
    assert message == (
        f"lock:3: rbdirect: the downloaded {WHEEL} has sha256 {got}, which the lock pins as "
        f"{sha256(server.wheel)}: the file changed at its URL"
    )


def test_a_changed_wheel_leaves_the_cache_untouched(tmp_path: Path, server: Server) -> None:
    path = requirements_lock(
        tmp_path,
        f"rbdirect @ {server.url}/changed/{WHEEL} --hash=sha256:{sha256(server.wheel)}",
    )
    with pytest.raises(UrlWheelError, match="the file changed at its URL"):
        fetch_wheels(load_lock(path), TARGET, tmp_path / "ctx", log=lambda _: None)
    assert cache_files() == []


@pytest.mark.parametrize(
    ("location", "expected"),
    [
        ("file", "it redirects to 'file:///etc/rbdirect-1.0-py3-none-any.whl': scheme "
         "'file' is not allowed, only https:// (http:// to a loopback host)"),
        ("ftp", "scheme 'ftp' is not allowed"),
        ("remote", "plain http:// is only allowed to a loopback host"),
    ],
)  # fmt: skip
def test_a_redirect_off_https_is_refused(
    tmp_path: Path, server: Server, location: str, expected: str
) -> None:
    message = _fetch_fails(server, tmp_path, f"/to/{location}/{WHEEL}")
    assert message.startswith(f"lock:3: rbdirect: cannot fetch '{WHEEL}' from {server.url}/to/")
    assert expected in message


def test_a_redirect_loop_stops(tmp_path: Path, server: Server) -> None:
    message = _fetch_fails(server, tmp_path, f"/loop/0/{WHEEL}")
    assert message.endswith(f"it redirects more than {urlwheels.MAX_REDIRECTS} times")
    assert len(server.hits) == urlwheels.MAX_REDIRECTS + 1


def test_a_huge_file_is_refused_by_its_length(tmp_path: Path, server: Server) -> None:
    message = _fetch_fails(server, tmp_path, f"/huge/{WHEEL}")
    assert message.endswith(f"it is {9 << 30} bytes, more than the {8 << 30} a wheel may be")


def test_a_file_past_the_cap_is_cut_off(tmp_path: Path, server: Server) -> None:
    message = _fetch_fails(server, tmp_path, f"/stream/{WHEEL}", limit=100_000)
    assert message.endswith("it is larger than 100000 bytes, the most a wheel may be here")


def test_an_unreachable_host_fails_fast_and_is_named(tmp_path: Path, server: Server) -> None:
    with socket.socket() as sock:  # a port that was free a moment ago: nothing listens
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    dead = Server(f"http://127.0.0.1:{port}", server.wheel)
    started = time.monotonic()
    message = _fetch_fails(dead, tmp_path, f"/files/{WHEEL}")
    assert time.monotonic() - started < 5
    assert "host 127.0.0.1 is unreachable (Connection refused)" in message


def test_an_http_error_is_one_line(tmp_path: Path, server: Server) -> None:
    message = _fetch_fails(server, tmp_path, "/files/rbdirect-2.0-py3-none-any.whl")
    assert message.endswith("the server answered HTTP 404 File not found")


@pytest.mark.parametrize(
    ("line", "expected"),
    [
        ("rbdirect @ https://h.example/rbdirect-1.0-py3-none-any.whl",
         "has no hash in the lock"),
        ("rbdirect @ https://h.example/rbdirect-1.0-py3-none-any.whl#md5=" + "0" * 32,
         "is not '<algorithm>=<hex digest>'"),
        ("rbdirect @ https://h.example/rbdirect-1.0.tar.gz --hash=sha256:" + "0" * 64,
         "direct references ('name @ URL'"),
        ("rbdirect @ https://user:pw@h.example/rbdirect-1.0-py3-none-any.whl --hash=sha256:"
         + "0" * 64, "embeds credentials"),
        ("rbdirect @ https://h.example/other-1.0-py3-none-any.whl --hash=sha256:" + "0" * 64,
         "is for 'other', not 'rbdirect'"),
    ],
)  # fmt: skip
def test_a_bad_url_requirement_is_one_error(tmp_path: Path, line: str, expected: str) -> None:
    path = requirements_lock(tmp_path, line)
    with pytest.raises(LockfileError) as info:
        load_lock(path)
    assert str(info.value).startswith(f"{path}:1: ")
    assert expected in str(info.value)


def test_a_uv_url_wheel_for_another_platform_is_one_error(tmp_path: Path) -> None:
    url = "https://h.example/rbdirect-1.0-cp311-cp311-win_amd64.whl"
    path = uv_lock(tmp_path, url, "0" * 64)
    with pytest.raises(LockfileError) as info:
        load_lock(path)
    assert str(info.value) == (
        f"{path}:12: package rbdirect: its wheel '{url}' does not fit CPython 3.11 on linux x86_64"
    )


def test_the_cache_folder_keeps_no_temp_file_on_interrupt(
    tmp_path: Path, server: Server, monkeypatch: pytest.MonkeyPatch
) -> None:
    def interrupted(*_args: Any) -> str:
        raise KeyboardInterrupt

    monkeypatch.setattr(urlwheels, "_stream", interrupted)
    folder = tmp_path / "f"
    folder.mkdir()
    with pytest.raises(KeyboardInterrupt):
        fetch_url_wheel(f"{server.url}/files/{WHEEL}", None, folder, what="x")
    assert list(folder.iterdir()) == []
    assert os.listdir(folder) == []


# ---------------------------------------------------------------- the other native readers


def pdm_lock(tmp_path: Path, url: str, digest: str) -> Path:
    lock = tmp_path / "pdm" / "pdm.lock"
    lock.parent.mkdir()
    lock.write_text(
        '# This file is @generated by PDM.\n\n[metadata]\ngroups = ["default"]\n'
        'strategy = ["inherit_metadata"]\nlock_version = "4.5.0"\n'
        f'content_hash = "sha256:{"0" * 64}"\n\n[[metadata.targets]]\n'
        'requires_python = ">=3.11"\n\n'
        f'[[package]]\nname = "rbdirect"\nversion = "1.0"\nurl = "{url}"\n'
        f'groups = ["default"]\nfiles = [\n    {{url = "{url}", hash = "sha256:{digest}"}},\n]\n'
    )
    return lock


def pipfile_lock(tmp_path: Path, url: str, digest: str) -> Path:
    import json

    lock = tmp_path / "pipenv" / "Pipfile.lock"
    lock.parent.mkdir()
    meta = {
        "hash": {"sha256": "0" * 64},
        "pipfile-spec": 6,
        "requires": {"python_version": "3.11"},
        "sources": [{"name": "pypi", "url": "https://pypi.org/simple", "verify_ssl": True}],
    }
    entry = {"file": url, "hashes": [f"sha256:{digest}"]}
    doc = {"_meta": meta, "default": {"rbdirect": entry}, "develop": {}}
    lock.write_text(json.dumps(doc, indent=4))
    return lock


def poetry_lock(tmp_path: Path, url: str, digest: str) -> Path:
    import tomllib

    from reprobuild.locks.poetrylock import content_hashes

    folder = tmp_path / "poetry"
    folder.mkdir()
    pyproject = (
        '[tool.poetry]\nname = "demo"\nversion = "0.1.0"\ndescription = ""\nauthors = []\n\n'
        f'[tool.poetry.dependencies]\npython = "^3.10"\nrbdirect = {{ url = "{url}" }}\n'
    )
    (folder / "pyproject.toml").write_text(pyproject)
    content = sorted(content_hashes(tomllib.loads(pyproject)))[0]
    lock = folder / "poetry.lock"
    lock.write_text(
        '[[package]]\nname = "rbdirect"\nversion = "1.0"\ndescription = ""\noptional = false\n'
        'python-versions = "*"\nfiles = [\n'
        f'    {{file = "{wheel_filename_of(url)}", hash = "sha256:{digest}"}},\n]\n\n'
        f'[package.source]\ntype = "url"\nurl = "{url}"\n\n'
        '[metadata]\nlock-version = "2.0"\npython-versions = "^3.10"\n'
        f'content-hash = "{content}"\n'
    )
    return lock


def wheel_filename_of(url: str) -> str:
    return url.rsplit("/", 1)[-1]


WRITERS = {"pdm.lock": pdm_lock, "Pipfile.lock": pipfile_lock, "poetry.lock": poetry_lock}


@pytest.mark.parametrize("fmt", sorted(WRITERS))
def test_each_native_reader_reads_a_url_wheel(tmp_path: Path, server: Server, fmt: str) -> None:
    url = f"{server.url}/files/{WHEEL}"
    digest = sha256(server.wheel)
    lock = load_lock(WRITERS[fmt](tmp_path, url, digest))
    (req,) = lock.requirements
    assert (req.name, req.version, req.url, req.hashes) == (
        "rbdirect",
        "1.0",
        url,
        (f"sha256:{digest}",),
    )
    (got,) = fetch_wheels(lock, TARGET, tmp_path / "ctx", log=lambda _: None)
    assert sha256(got) == digest and server.hits == [f"/files/{WHEEL}"]


@pytest.mark.parametrize("fmt", sorted(WRITERS))
def test_each_native_reader_refuses_a_url_wheel_that_does_not_fit(tmp_path: Path, fmt: str) -> None:
    url = "https://h.example/rbdirect-1.0-cp311-cp311-win_amd64.whl"
    path = WRITERS[fmt](tmp_path, url, "0" * 64)
    with pytest.raises(LockfileError) as info:
        load_lock(path)
    assert f"package rbdirect: its wheel '{url}' does not fit CPython 3.11" in str(info.value)
    assert str(info.value).startswith(f"{path}:")


@pytest.mark.parametrize("fmt", sorted(WRITERS))
def test_each_native_reader_refuses_a_url_wheel_over_remote_http(tmp_path: Path, fmt: str) -> None:
    url = "http://h.example/rbdirect-1.0-py3-none-any.whl"
    with pytest.raises(LockfileError, match="plain http:// is only allowed to a loopback host"):
        load_lock(WRITERS[fmt](tmp_path, url, "0" * 64))


# ---------------------------------------------------------------- init --record-hashes


def test_init_records_the_hash_of_an_unhashed_url_wheel(tmp_path: Path, server: Server) -> None:
    from helpers import run_cli

    project = tmp_path / "proj"
    project.mkdir()
    (project / "train.py").write_text("import rbdirect\n")
    url = f"{server.url}/files/{WHEEL}"
    six = (
        "six==1.17.0 --hash=sha256:4721f391ed90541fddacab5acf947aa0d3dc7d27b2e1e8eda2be8970586c3274"
    )
    # hashed but for the URL line: used in place (an unhashed file is resolved by uv, which
    # hashes what it fetches itself)
    (project / "requirements.lock").write_text(f"rbdirect @ {url}\n{six}\n")
    hashes = project / "reprobuild.hashes.toml"

    given = ("--command", "python train.py")
    refused = run_cli("init", str(project), *given)
    assert refused.returncode != 0
    lines = refused.stderr.strip().splitlines()
    assert lines[0] == (
        f"error: {project / 'requirements.lock'}:1: rbdirect: wheel '{url}' has no hash in the lock"
    )
    assert "init --record-hashes" in refused.stderr
    assert sorted(p.name for p in project.iterdir()) == ["requirements.lock", "train.py"]
    assert server.hits == []

    recorded = run_cli("init", str(project), *given, "--record-hashes")
    assert recorded.returncode == 0, recorded.stderr
    warnings = [ln for ln in recorded.stderr.splitlines() if ln.startswith("warning: recorded")]
    assert warnings == [
        f"warning: recorded the sha256 of 1 wheel(s) the lock names by URL with no hash in "
        f"{hashes}, as fetched now (trust on first use): commit it; every build checks those "
        "wheels against it"
    ]
    assert server.hits == [f"/files/{WHEEL}"]  # fetched once, whatever init read it for
    assert f'"{url}" = "sha256:{sha256(server.wheel)}"' in hashes.read_text()
    assert (project / "reprobuild.yaml").is_file()

    # every later read takes the hash from the file, and a build checks the wheel against it
    req, _six = load_lock(project / "requirements.lock").requirements
    assert req.hashes == (f"sha256:{sha256(server.wheel)}",)
    server.wheel.write_bytes(server.wheel.read_bytes() + b"changed")
    with pytest.raises(UrlWheelError, match="the file changed at its URL"):
        fetch_wheels(load_lock(project / "requirements.lock"), TARGET, tmp_path / "ctx", log=print)


def test_a_native_lock_without_a_wheel_hash_names_the_flag(tmp_path: Path) -> None:
    url = "https://h.example/rbdirect-1.0-py3-none-any.whl"
    path = uv_lock(tmp_path, url, "0" * 64)
    path.write_text(path.read_text().replace(f', hash = "sha256:{"0" * 64}"', ""))
    with pytest.raises(LockfileError) as info:
        load_lock(path)
    assert str(info.value) == f"{path}:12: package rbdirect: wheel '{url}' has no hash in the lock"
    assert info.value.hint is not None and "init --record-hashes" in info.value.hint


@pytest.mark.parametrize(
    "text",
    [
        '[wheels]\n"https://h.example/x.whl" = "md5:00"\n',
        "[other]\nx = 1\n",
        "not toml [",
        '[wheels]\n"https://h.example/$(x).whl" = "sha256:' + "0" * 64 + '"\n',
    ],
)
def test_a_bad_hashes_file_is_one_error(tmp_path: Path, text: str) -> None:
    (tmp_path / "reprobuild.hashes.toml").write_text(text)
    path = requirements_lock(tmp_path, "rbdirect @ https://h.example/rbdirect-1.0-py3-none-any.whl")
    with pytest.raises(LockfileError) as info:
        load_lock(path)
    assert str(info.value).startswith(f"{tmp_path / 'reprobuild.hashes.toml'}: ")


def pylock(tmp_path: Path, url: str, digest: str) -> Path:
    lock = tmp_path / "pylock.toml"
    lock.write_text(
        'lock-version = "1.0"\ncreated-by = "hand"\n\n[[packages]]\nname = "rbdirect"\n'
        f'version = "1.0"\narchive = {{ url = "{url}", hashes = {{ sha256 = "{digest}" }} }}\n'
    )
    return lock


def test_a_pylock_archive_wheel_is_fetched(tmp_path: Path, server: Server) -> None:
    url = f"{server.url}/files/{WHEEL}"
    digest = sha256(server.wheel)
    lock = load_lock(pylock(tmp_path, url, digest))
    (req,) = lock.requirements
    assert (req.version, req.url, req.hashes) == ("1.0", url, (f"sha256:{digest}",))
    (got,) = fetch_wheels(lock, TARGET, tmp_path / "ctx", log=lambda _: None)
    assert sha256(got) == digest


def test_a_pylock_archive_wheel_is_checked_against_the_base_when_fetched(
    tmp_path: Path, server: Server
) -> None:
    url = f"{server.url}/files/rbdirect-1.0-cp311-cp311-win_amd64.whl"
    lock = load_lock(pylock(tmp_path, url, "0" * 64))  # pylock.toml is not read per platform
    with pytest.raises(UrlWheelError, match=r"does not fit cp311-x86_64-glibc2\.36"):
        fetch_wheels(lock, TARGET, tmp_path / "ctx", log=lambda _: None)
    assert server.hits == []
    remote = pylock(tmp_path, "http://h.example/rbdirect-1.0-py3-none-any.whl", "0" * 64)
    with pytest.raises(LockfileError, match=r"pylock\.toml:7: package rbdirect: wheel 'http:"):
        load_lock(remote)


@pytest.mark.parametrize(
    "url",
    [
        "https://h.example/..%2F..%2Frbdirect-1.0-py3-none-any.whl",
        "https://h.example/rbdirect%20-1.0-py3-none-any.whl",
        "https://h.example/.rbdirect-1.0-py3-none-any.whl",
    ],
)
def test_a_url_whose_file_name_is_not_plain_is_refused(tmp_path: Path, url: str) -> None:
    with pytest.raises(LockfileError, match="its path does not end in a wheel's file name"):
        load_lock(requirements_lock(tmp_path, f"rbdirect @ {url} --hash=sha256:{'0' * 64}"))
    folder = tmp_path / "f"
    folder.mkdir()
    with pytest.raises(UrlWheelError, match="its path does not end in a wheel's file name"):
        fetch_url_wheel(url, None, folder, what="x")
    assert list(folder.iterdir()) == []
