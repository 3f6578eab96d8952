"""The wheel fetch, isolated and failing fast (issue 51), driven for real: pip downloads from
simple indexes served over HTTP on 127.0.0.1, each server recording what it was asked; a host
that does not resolve (``pytorch.invalid``), a port that refuses and a server that answers 500
are each one line naming the host, the cause and the first package, within seconds; an index
a uv.lock pins one package to is never asked for another; what one index gave is kept when
another fails; the host's pip settings (PIP_FIND_LINKS, PIP_CONSTRAINT, PIP_INDEX_URL) do not
reach the fetch, the explicit REPROBUILD_FIND_LINKS does."""

from __future__ import annotations

import hashlib
import http.server
import os
import socket
import ssl
import subprocess
import threading
import time
import zipfile
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

from reprobuild._util.resolver import failure_reason, tool_error
from reprobuild.locks import buildlock, fetchnet
from reprobuild.locks.lockfile import load_lock
from reprobuild.locks.wheels import Target, WheelError, fetch_wheels, wheel_folder

TARGET = Target("3.11", "x86_64", (2, 36))
# Generous for a loaded 2-core machine: each failure below takes well under a second alone.
FAST_S = 30.0


def make_wheel(folder: Path, name: str) -> Path:
    mod = name.replace("-", "_")
    path = folder / f"{mod}-1.0-py3-none-any.whl"
    info = f"{mod}-1.0.dist-info"
    files = {
        f"{mod}/__init__.py": os.urandom(64).hex().encode(),
        f"{info}/METADATA": f"Metadata-Version: 2.1\nName: {name}\nVersion: 1.0\n".encode(),
        f"{info}/WHEEL": b"Wheel-Version: 1.0\nGenerator: test\nRoot-Is-Purelib: true\n"
        b"Tag: py3-none-any\n",
    }
    with zipfile.ZipFile(path, "w") as zf:
        for n, data in files.items():
            zf.writestr(n, data)
        zf.writestr(f"{info}/RECORD", "".join(f"{n},,\n" for n in [*files, f"{info}/RECORD"]))
    return path


def sha256(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


@dataclass
class Index:
    """A PEP 503 index on 127.0.0.1 serving ``wheels``; ``asked`` is every path requested,
    ``status`` answers every request with that code instead (500: a broken host), ``missing``
    the file names answered 404."""

    root: Path
    url: str = ""
    wheels: dict[str, Path] = field(default_factory=dict)
    asked: list[str] = field(default_factory=list)
    status: int | None = None
    missing: set[str] = field(default_factory=set)

    def add(self, name: str) -> Path:
        path = make_wheel(self.root / "files", name)
        page = self.root / "simple" / name / "index.html"
        page.parent.mkdir(parents=True, exist_ok=True)
        page.write_text(f'<a href="../../files/{path.name}#sha256={sha256(path)}">{path.name}</a>')
        self.wheels[name] = path
        return path

    def files_asked(self) -> list[str]:
        return [p.rsplit("/", 1)[-1] for p in self.asked if p.startswith("/files/")]


@pytest.fixture
def serve(tmp_path: Path) -> Iterator[Any]:
    servers: list[http.server.ThreadingHTTPServer] = []

    def start(name: str, tls: Path | None = None) -> Index:
        index = Index(tmp_path / name)
        (index.root / "files").mkdir(parents=True)

        class Handler(http.server.SimpleHTTPRequestHandler):
            def __init__(self, *args: Any, **kwargs: Any) -> None:
                super().__init__(*args, directory=str(index.root), **kwargs)

            def do_GET(self) -> None:
                index.asked.append(self.path)
                if index.status is not None:
                    self.send_error(index.status)
                elif self.path.rsplit("/", 1)[-1] in index.missing:
                    self.send_error(404)
                else:
                    super().do_GET()

            def end_headers(self) -> None:
                if self.path.startswith("/files/"):  # as PyPI's files: cacheable for good
                    self.send_header("Cache-Control", "max-age=365000000, immutable, public")
                super().end_headers()

            def log_message(self, format: str, *args: Any) -> None:
                pass

        server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        if tls is not None:  # tls: a folder with cert.pem and key.pem
            context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
            context.load_cert_chain(tls / "cert.pem", tls / "key.pem")
            server.socket = context.wrap_socket(server.socket, server_side=True)
        threading.Thread(target=server.serve_forever, daemon=True).start()
        servers.append(server)
        scheme = "https" if tls is not None else "http"
        index.url = f"{scheme}://127.0.0.1:{server.server_address[1]}/simple"
        return index

    yield start
    for server in servers:
        server.shutdown()
        server.server_close()


@pytest.fixture(autouse=True)
def cache(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.setenv("REPROBUILD_CACHE_DIR", str(tmp_path / "cache"))
    monkeypatch.delenv(fetchnet.FIND_LINKS_VAR, raising=False)
    monkeypatch.delenv(fetchnet.LOCAL_INDEXES_VAR, raising=False)
    for var in [v for v in os.environ if v.endswith(("_proxy", "_PROXY"))]:
        monkeypatch.delenv(var)
    return tmp_path / "cache"


def requirements_lock(tmp_path: Path, options: list[str], wheels: dict[str, Path]) -> Path:
    lines = [*options]
    lines += [f"{name}==1.0 --hash=sha256:{sha256(path)}" for name, path in wheels.items()]
    lock = tmp_path / "requirements.lock"
    lock.write_text("\n".join(lines) + "\n")
    return lock


def uv_lock(tmp_path: Path, pins: dict[str, tuple[str, Path]]) -> Path:
    """A uv.lock pinning each package (name -> (its index, its wheel)) to its index."""
    names = sorted(pins)
    text = [
        "version = 1",
        'requires-python = ">=3.11"',
        "",
        "[[package]]",
        'name = "demo"',
        'version = "0.1.0"',
        'source = { virtual = "." }',
        "dependencies = [" + ", ".join(f'{{ name = "{n}" }}' for n in names) + "]",
    ]
    for name in names:
        index, wheel = pins[name]
        files = index.rsplit("/simple", 1)[0] + "/files/" + wheel.name
        text += [
            "",
            "[[package]]",
            f'name = "{name}"',
            'version = "1.0"',
            f'source = {{ registry = "{index}" }}',
            f'wheels = [{{ url = "{files}", hash = "sha256:{sha256(wheel)}" }}]',
        ]
    lock = tmp_path / "uv.lock"
    lock.write_text("\n".join(text) + "\n")
    return lock


def fetch_error(lock: Path, tmp_path: Path) -> tuple[str, float]:
    start = time.monotonic()
    with pytest.raises(WheelError) as caught:
        fetch_wheels(load_lock(lock), TARGET, tmp_path / "ctx", log=lambda _: None)
    return str(caught.value), time.monotonic() - start


def closed_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


# --- a dead index host: one line, in seconds, before any package is fetched ----------------


def test_a_host_that_does_not_resolve_is_named_at_once(tmp_path: Path, serve: Any) -> None:
    pypi = serve("pypi")
    wheels = {"rbfast-alpha": pypi.add("rbfast-alpha"), "rbfast-beta": pypi.add("rbfast-beta")}
    lock = requirements_lock(
        tmp_path,
        [f"--index-url {pypi.url}/", "--extra-index-url https://pytorch.invalid/whl/cpu"],
        wheels,
    )
    message, took = fetch_error(lock, tmp_path)
    assert took < FAST_S
    assert "pytorch.invalid (https://pytorch.invalid/whl/cpu) does not resolve" in message
    assert message.endswith("rbfast-alpha needs it"), message
    assert pypi.files_asked() == []  # nothing fetched (nor retried) before the line


def test_a_package_a_local_folder_has_needs_no_index_host(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """An air-gapped host: every wheel in REPROBUILD_FIND_LINKS, the lock's index unreachable.
    pip is still given the index (it finds nothing there and takes the folder's file), the
    probe does not refuse the fetch."""
    local = tmp_path / "local-wheels"
    local.mkdir()
    wheels = {"rbfast-local": make_wheel(local, "rbfast-local")}
    dead = f"http://127.0.0.1:{closed_port()}/simple/"
    lock = requirements_lock(tmp_path, [f"--index-url {dead}"], wheels)
    monkeypatch.setenv(fetchnet.FIND_LINKS_VAR, str(local))
    got = fetch_wheels(load_lock(lock), TARGET, tmp_path / "ctx", log=lambda _: None)
    assert [p.name for p in got] == [wheels["rbfast-local"].name]


def test_a_port_that_refuses_is_named(tmp_path: Path, serve: Any) -> None:
    pypi = serve("pypi")
    wheels = {"rbfast-alpha": pypi.add("rbfast-alpha")}
    dead = f"http://127.0.0.1:{closed_port()}/simple/"
    lock = requirements_lock(
        tmp_path, [f"--index-url {pypi.url}/", f"--extra-index-url {dead}"], wheels
    )
    message, took = fetch_error(lock, tmp_path)
    assert took < FAST_S
    assert f"the index host 127.0.0.1 ({dead}) refuses the connection" in message, message
    assert "rbfast-alpha needs it" in message


def test_a_server_answering_500_is_named_with_its_status(tmp_path: Path, serve: Any) -> None:
    broken = serve("broken")
    wheels = {"rbfast-alpha": broken.add("rbfast-alpha")}
    broken.status = 500
    lock = requirements_lock(tmp_path, [f"--index-url {broken.url}/"], wheels)
    message, took = fetch_error(lock, tmp_path)
    assert took < FAST_S
    assert f"answers HTTP 500 for {broken.url}/rbfast-alpha/" in message, message
    assert broken.asked == ["/simple/rbfast-alpha/"]  # asked once, no retries


# --- explicit indexes: each package from its own index only -------------------------------


def test_an_index_a_uv_lock_pins_one_package_to_is_never_asked_for_another(
    tmp_path: Path, serve: Any
) -> None:
    pypi, torch = serve("pypi"), serve("torch")
    wheels = {
        "setuptools": pypi.add("setuptools"),
        "rbfast-alpha": pypi.add("rbfast-alpha"),
        "torch": torch.add("torch"),
    }
    lock = uv_lock(
        tmp_path,
        {
            "setuptools": (pypi.url, wheels["setuptools"]),
            "rbfast-alpha": (pypi.url, wheels["rbfast-alpha"]),
            "torch": (torch.url, wheels["torch"]),
        },
    )
    got = fetch_wheels(load_lock(lock), TARGET, tmp_path / "ctx", log=lambda _: None)
    assert sorted(p.name for p in got) == sorted(p.name for p in wheels.values())
    # the PyTorch-like index saw its own package only, the default index never torch
    assert {p for p in torch.asked} == {"/simple/torch/", f"/files/{wheels['torch'].name}"}
    assert not any("torch" in p for p in pypi.asked), pypi.asked

    # and the build requirements of such a lock are resolved on its default index alone
    argv = buildlock._build_sources(load_lock(lock))
    assert argv == ["--index-url", pypi.url], argv


def test_a_requirements_lock_keeps_pip_s_every_index_for_every_package(
    tmp_path: Path, serve: Any
) -> None:
    pypi, extra = serve("pypi"), serve("extra")
    wheels = {"rbfast-alpha": pypi.add("rbfast-alpha")}
    options = [f"--index-url {pypi.url}/", f"--extra-index-url {extra.url}/"]
    lock = load_lock(requirements_lock(tmp_path, options, wheels))
    assert buildlock._build_sources(lock) == [
        "--index-url", f"{pypi.url}/", "--extra-index-url", f"{extra.url}/"
    ]  # fmt: skip


# --- keep what was checked -----------------------------------------------------------------


def test_what_one_index_gave_is_kept_when_another_fails(tmp_path: Path, serve: Any) -> None:
    pypi, torch = serve("pypi"), serve("torch")
    good = pypi.add("rbfast-alpha")
    bad = torch.add("torch")
    torch.missing.add(bad.name)  # the page lists it, the file is gone
    lock = uv_lock(tmp_path, {"rbfast-alpha": (pypi.url, good), "torch": (torch.url, bad)})
    message, took = fetch_error(lock, tmp_path)
    assert took < FAST_S
    # one line: the package, the host, the cause (the parallel fetch's; pip's ERROR: before)
    assert "cannot fetch the locked wheels" in message, message
    assert "the host 127.0.0.1 answers HTTP 404" in message and "torch 1.0 needs it" in message
    assert (wheel_folder(TARGET) / good.name).is_file()  # checked, kept

    torch.missing.clear()
    pypi.asked.clear()
    got = fetch_wheels(load_lock(lock), TARGET, tmp_path / "ctx2", log=lambda _: None)
    assert sorted(p.name for p in got) == sorted([good.name, bad.name])
    assert pypi.asked == []  # the second run did not fetch it again


def self_signed(folder: Path) -> Path:
    """A certificate for 127.0.0.1 (openssl), its key beside it."""
    folder.mkdir()
    subprocess.run(
        ["openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "1",
         "-keyout", str(folder / "key.pem"), "-out", str(folder / "cert.pem"),
         "-subj", "/CN=127.0.0.1", "-addext", "subjectAltName=IP:127.0.0.1"],
        check=True, capture_output=True,
    )  # fmt: skip
    return folder


def test_what_pip_downloaded_before_it_failed_is_not_downloaded_again(
    tmp_path: Path, serve: Any, cache: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """One index, one pip run: pip saves nothing until all is resolved, but its HTTP cache
    (https only, as pip caches) lies in reprobuild's, so the good file's bytes are not fetched
    a second time. The index's CA reaches pip as a corporate one does: SSL_CERT_FILE."""
    tls = self_signed(tmp_path / "tls")
    monkeypatch.setenv("SSL_CERT_FILE", str(tls / "cert.pem"))
    pypi = serve("pypi", tls)
    wheels = {"rbfast-alpha": pypi.add("rbfast-alpha"), "rbfast-beta": pypi.add("rbfast-beta")}
    pypi.missing.add(wheels["rbfast-beta"].name)
    lock = requirements_lock(tmp_path, [f"--index-url {pypi.url}/"], wheels)
    message, took = fetch_error(lock, tmp_path)
    assert took < FAST_S
    assert "ERROR:" in message, message
    assert wheels["rbfast-alpha"].name in pypi.files_asked()

    pypi.missing.clear()
    pypi.asked.clear()
    got = fetch_wheels(load_lock(lock), TARGET, tmp_path / "ctx", log=lambda _: None)
    assert sorted(p.name for p in got) == sorted(p.name for p in wheels.values())
    assert pypi.files_asked() == [wheels["rbfast-beta"].name], pypi.asked
    assert not (cache / "pip-http").exists()  # emptied: all in the wheel cache now


# --- isolated from the host's pip settings -------------------------------------------------


def test_the_host_s_pip_settings_do_not_reach_the_fetch(
    tmp_path: Path, serve: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    pypi, elsewhere = serve("pypi"), serve("elsewhere")
    local = tmp_path / "local-wheels"
    local.mkdir()
    wheels = {
        "rbfast-alpha": pypi.add("rbfast-alpha"),
        "rbfast-local": make_wheel(local, "rbfast-local"),
    }
    lock = requirements_lock(tmp_path, [f"--index-url {pypi.url}/"], wheels)
    constraints = tmp_path / "constraints.txt"
    constraints.write_text("rbfast-alpha==2.0\n")  # would make the lock unresolvable
    monkeypatch.setenv("PIP_CONSTRAINT", str(constraints))
    monkeypatch.setenv("PIP_EXTRA_INDEX_URL", f"{elsewhere.url}/")
    monkeypatch.setenv("PIP_FIND_LINKS", str(local))  # ambient: not a source any more

    message, _ = fetch_error(lock, tmp_path)
    assert "rbfast-local==1.0 has no wheel" in message, message  # not from the ambient folder
    assert elsewhere.asked == []

    monkeypatch.setenv(fetchnet.FIND_LINKS_VAR, str(local))  # the explicit route
    got = fetch_wheels(load_lock(lock), TARGET, tmp_path / "ctx", log=lambda _: None)
    assert sorted(p.name for p in got) == sorted(p.name for p in wheels.values())
    assert elsewhere.asked == []


def disk_index(root: Path, name: str) -> Path:
    """A PEP 503 index in a folder (a PyPI mirror on disk) holding ``name``'s wheel."""
    (root / "files").mkdir(parents=True)
    wheel = make_wheel(root / "files", name)
    page = root / "simple" / name / "index.html"
    page.parent.mkdir(parents=True)
    page.write_text(f'<a href="../../files/{wheel.name}#sha256={sha256(wheel)}">{wheel.name}</a>')
    return wheel


def test_a_local_simple_index_serves_pypi_s_packages_never_an_explicit_index_s(
    tmp_path: Path, serve: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    """REPROBUILD_LOCAL_INDEXES: a PyPI mirror on disk, named the documented way (the host's
    pip configuration no longer reaches the fetch), asked beside the lock's default index."""
    pypi, torch = serve("pypi"), serve("torch")
    disk = disk_index(tmp_path / "mirror", "rbfast-disk")
    wheels = {"rbfast-alpha": pypi.add("rbfast-alpha"), "rbfast-disk": disk}
    lock = requirements_lock(tmp_path, [f"--index-url {pypi.url}/"], wheels)
    message, _ = fetch_error(lock, tmp_path)  # not named: not a source
    assert "rbfast-disk" in message, message
    assert pypi.files_asked() == [wheels["rbfast-alpha"].name], pypi.asked  # checked, kept

    monkeypatch.setenv(fetchnet.LOCAL_INDEXES_VAR, str(tmp_path / "mirror" / "simple"))
    pypi.asked.clear()
    got = fetch_wheels(load_lock(lock), TARGET, tmp_path / "ctx", log=lambda _: None)
    assert sorted(p.name for p in got) == sorted(p.name for p in wheels.values())
    assert pypi.files_asked() == [], pypi.asked  # alpha kept from the first run; disk: the disk

    # a package a uv.lock pins to an explicit index comes from that index alone
    pinned = uv_lock(tmp_path, {"rbfast-disk": (torch.url, disk)})
    monkeypatch.setenv("REPROBUILD_CACHE_DIR", str(tmp_path / "cold-cache"))
    torch.add("rbfast-other")
    message, _ = fetch_error(pinned, tmp_path / "again")
    assert "rbfast-disk" in message, message


def test_a_bad_local_index_folder_is_one_line(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(fetchnet.LOCAL_INDEXES_VAR, "https://mirror.example/simple")
    with pytest.raises(fetchnet.FetchSetupError, match=r"LOCAL_INDEXES: 'https://mirror"):
        fetchnet.local_indexes()


def test_a_bad_find_links_folder_is_one_line(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv(fetchnet.FIND_LINKS_VAR, "relative/wheels")
    with pytest.raises(fetchnet.FetchSetupError, match=r"'relative/wheels' is not a folder"):
        fetchnet.find_links()


def test_the_child_env_keeps_proxies_and_ca_settings_only() -> None:
    env = fetchnet.isolated_env(
        {
            "PATH": "/usr/bin",
            "PIP_FIND_LINKS": "/opt/wheels",
            "PIP_CONSTRAINT": "/c.txt",
            "PIP_CERT": "/ca.pem",
            "UV_INDEX_URL": "https://x",
            "UV_NATIVE_TLS": "1",
            "HTTPS_PROXY": "http://proxy:3128",
            "no_proxy": "localhost",
            "SSL_CERT_FILE": "/ca.pem",
            "REQUESTS_CA_BUNDLE": "/ca.pem",
        }
    )
    assert env == {
        "PATH": "/usr/bin",
        "UV_NATIVE_TLS": "1",
        "HTTPS_PROXY": "http://proxy:3128",
        "no_proxy": "localhost",
        "SSL_CERT_FILE": "/ca.pem",
        "REQUESTS_CA_BUNDLE": "/ca.pem",
        "PIP_CONFIG_FILE": os.devnull,
        "UV_NO_CONFIG": "1",
    }
    assert fetchnet.pip_network_args({"PIP_CERT": "/ca.pem", "PIP_PROXY": "http://p:1"}) == [
        "--cert", "/ca.pem", "--proxy", "http://p:1"
    ]  # fmt: skip


# --- the tool's real error line, never a warning ------------------------------------------


def test_the_error_line_is_the_tool_s_error_not_its_first_warning() -> None:
    uv = (
        "warning: `VIRTUAL_ENV=/x` does not match the project environment path\n"
        "error: Failed to fetch: `https://pytorch.invalid/whl/cpu/torch/`\n"
        "  Caused by: Request failed after 3 retries\n"
        "  Caused by: dns error: failed to lookup address information\n"
    )
    assert failure_reason(uv, 2) == (
        "error: Failed to fetch: `https://pytorch.invalid/whl/cpu/torch/` "
        "(Caused by: dns error: failed to lookup address information)"
    )
    pip = (
        "WARNING: Retrying (Retry(total=4)) after connection broken\n"
        "ERROR: No matching distribution found for x==1\n"
    )
    assert tool_error(pip, "pip failed") == "ERROR: No matching distribution found for x==1"
    pip = (  # pip 26.3 for images/digits-torch's lock without its torch wheel folder
        "ERROR: Ignored the following versions that require a different python version: "
        "3.7 Requires-Python >=3.12\n"
        "ERROR: Could not find a version that satisfies the requirement torch==2.13.0+cpu "
        "(from versions: none)\n"
        "ERROR: No matching distribution found for torch==2.13.0+cpu\n"
    )
    assert tool_error(pip, "pip failed").startswith("ERROR: Could not find a version that")
    assert tool_error("warning: only a warning\n", "exit status 1") == "exit status 1"
    solve = "  \u00d7 No solution found when resolving dependencies:\n  Because x was not found"
    assert failure_reason(solve, 1) == "\u00d7 No solution found when resolving dependencies:"
