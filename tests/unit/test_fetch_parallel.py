"""The parallel wheel fetch (issue 52 item 4), driven for real against an index served over HTTP
on 127.0.0.1 that records every request (its headers, and how many files it was sending at
once): the wheels come side by side, each checked as it streams; a wrong hash leaves nothing in
the cache; a cut connection is resumed with ``Range``; a hash-only lock finds its files through
the index's JSON API (PEP 691), or its HTML page (PEP 503) where that is all it answers; a local
folder's file with the locked hash is taken before any download."""

from __future__ import annotations

import hashlib
import http.server
import json
import os
import threading
import time
import zipfile
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

from reprobuild.locks import fetchnet
from reprobuild.locks.lockfile import load_lock
from reprobuild.locks.wheels import Target, WheelError, fetch_wheels, wheel_folder

TARGET = Target("3.11", "x86_64", (2, 36))


def make_wheel(folder: Path, name: str, payload: int = 64) -> Path:
    mod = name.replace("-", "_")
    path = folder / f"{mod}-1.0-py3-none-any.whl"
    info = f"{mod}-1.0.dist-info"
    files = {
        f"{mod}/__init__.py": b"",
        f"{mod}/blob.bin": os.urandom(payload),
        f"{info}/METADATA": f"Metadata-Version: 2.1\nName: {name}\nVersion: 1.0\n".encode(),
        f"{info}/WHEEL": b"Wheel-Version: 1.0\nGenerator: test\nRoot-Is-Purelib: true\n"
        b"Tag: py3-none-any\n",
    }
    with zipfile.ZipFile(path, "w", zipfile.ZIP_STORED) as zf:
        for n, data in files.items():
            zf.writestr(n, data)
        zf.writestr(f"{info}/RECORD", "".join(f"{n},,\n" for n in [*files, f"{info}/RECORD"]))
    return path


def sha256(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


@dataclass
class Index:
    """A simple index on 127.0.0.1: ``files`` (file name -> bytes) under ``/files/``, each
    project's page under ``/simple/NAME/`` (JSON when asked for it and ``json`` is on, else
    HTML). ``asked``: (path, headers) of every request; ``most``: the most files it sent at
    once; ``cut``: file names whose first answer stops halfway; ``ranges``: whether it honours
    ``Range``; ``tampered``: file names served with other bytes than listed."""

    root: Path
    url: str = ""
    files: dict[str, bytes] = field(default_factory=dict)
    asked: list[tuple[str, dict[str, str]]] = field(default_factory=list)
    json: bool = True
    delay: float = 0.0
    cut: set[str] = field(default_factory=set)
    ranges: bool = True
    tampered: set[str] = field(default_factory=set)
    busy: set[str] = field(default_factory=set)
    sending: int = 0
    most: int = 0
    lock: threading.Lock = field(default_factory=threading.Lock)

    def add(self, name: str, payload: int = 64) -> Path:
        path = make_wheel(self.root, name, payload)
        self.files[path.name] = path.read_bytes()
        return path

    def paths(self) -> list[str]:
        return [p for p, _ in self.asked]

    def files_asked(self) -> list[str]:
        return [p.rsplit("/", 1)[-1] for p in self.paths() if "files/" in p]


class Handler(http.server.BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    index: Index

    def do_GET(self) -> None:
        index = self.index
        index.asked.append((self.path, dict(self.headers)))
        if self.path.startswith("/simple/"):
            self.page(self.path.split("/")[2])
        elif "files/" in self.path:
            self.file(self.path.rsplit("/", 1)[-1])
        else:
            self.send_error(404)

    def page(self, project: str) -> None:
        index = self.index
        mine = {
            n: b for n, b in index.files.items() if n.split("-")[0] == project.replace("-", "_")
        }
        if not mine:
            self.send_error(404)
            return
        if index.json and "application/vnd.pypi.simple.v1+json" in self.headers.get("Accept", ""):
            doc = {
                "meta": {"api-version": "1.1"},
                "name": project,
                "files": [
                    {"filename": n, "url": f"../../json-files/{n}", "hashes": {"sha256": sha256(b)}}
                    for n, b in mine.items()
                ],
            }
            self.answer(json.dumps(doc).encode(), "application/vnd.pypi.simple.v1+json")
        else:
            links = "".join(
                f'<a href="../../files/{n}#sha256={sha256(b)}">{n}</a>\n' for n, b in mine.items()
            )
            self.answer(links.encode(), "text/html")

    def answer(self, body: bytes, kind: str) -> None:
        self.send_response(200)
        self.send_header("Content-Type", kind)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def file(self, name: str) -> None:
        index = self.index
        data = index.files.get(name)
        if data is None:
            self.send_error(404)
            return
        if name in index.busy:  # answered 503 once
            index.busy.discard(name)
            self.send_error(503)
            return
        if name in index.tampered:
            data = data[:-1] + bytes([data[-1] ^ 1])
        start = 0
        wanted = self.headers.get("Range", "")
        if index.ranges and wanted.startswith("bytes="):
            start = int(wanted[6:].rstrip("-"))
            self.send_response(206)
            self.send_header("Content-Range", f"bytes {start}-{len(data) - 1}/{len(data)}")
        else:
            self.send_response(200)
        self.send_header("Content-Length", str(len(data) - start))
        self.end_headers()
        with index.lock:
            index.sending += 1
            index.most = max(index.most, index.sending)
        try:
            time.sleep(index.delay)
            body = data[start:]
            if name in index.cut:
                index.cut.discard(name)
                self.wfile.write(body[: len(body) // 2])
                self.wfile.flush()
                self.close_connection = True
                return
            self.wfile.write(body)
        finally:
            with index.lock:
                index.sending -= 1

    def log_message(self, format: str, *args: Any) -> None:
        pass


@pytest.fixture
def index(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Index]:
    monkeypatch.setenv("REPROBUILD_CACHE_DIR", str(tmp_path / "cache"))
    for var in (fetchnet.FIND_LINKS_VAR, fetchnet.LOCAL_INDEXES_VAR, fetchnet.THREADS_VAR):
        monkeypatch.delenv(var, raising=False)
    for var in [v for v in os.environ if v.endswith(("_proxy", "_PROXY"))]:
        monkeypatch.delenv(var)
    served = Index(tmp_path / "www")
    served.root.mkdir()
    handler = type("Bound", (Handler,), {"index": served})
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    served.url = f"http://127.0.0.1:{server.server_address[1]}/simple"
    try:
        yield served
    finally:
        server.shutdown()
        server.server_close()


def uv_lock(tmp_path: Path, index: Index, wheels: list[Path], host: str | None = None) -> Path:
    """A uv.lock pinning each wheel, its URL under ``host`` (the index's by default)."""
    base = host or index.url.rsplit("/simple", 1)[0]
    names = [w.name.split("-")[0].replace("_", "-") for w in wheels]
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
    for name, wheel in zip(names, wheels, strict=True):
        text += [
            "",
            "[[package]]",
            f'name = "{name}"',
            'version = "1.0"',
            f'source = {{ registry = "{index.url}" }}',
            f'wheels = [{{ url = "{base}/files/{wheel.name}", '
            f'hash = "sha256:{sha256(wheel.read_bytes())}" }}]',
        ]
    lock = tmp_path / "uv.lock"
    lock.write_text("\n".join(text) + "\n")
    return lock


def requirements_lock(tmp_path: Path, index: Index, wheels: list[Path]) -> Path:
    lines = [f"--index-url {index.url}/"]
    for wheel in wheels:
        name = wheel.name.split("-")[0].replace("_", "-")
        lines.append(f"{name}==1.0 --hash=sha256:{sha256(wheel.read_bytes())}")
    lock = tmp_path / "requirements.lock"
    lock.write_text("\n".join(lines) + "\n")
    return lock


def fetch(lock: Path, tmp_path: Path, said: list[str] | None = None) -> list[Path]:
    log = said.append if said is not None else (lambda _: None)
    return fetch_wheels(load_lock(lock), TARGET, tmp_path / "ctx", log=log)


def cached() -> list[str]:
    folder = wheel_folder(TARGET)
    return sorted(p.name for p in folder.iterdir() if not p.name.startswith("."))


def test_the_wheels_come_side_by_side(tmp_path: Path, index: Index) -> None:
    index.delay = 0.4  # each file takes this long: one after another, 6 would take 2.4 s
    wheels = [index.add(f"rbpar-{n}") for n in "abcdef"]
    start = time.monotonic()
    got = fetch(uv_lock(tmp_path, index, wheels), tmp_path)
    took = time.monotonic() - start
    assert sorted(p.name for p in got) == sorted(w.name for w in wheels)
    assert index.most >= 4, index.most  # the server was sending several files at once
    assert took < 6 * index.delay, took
    for path in got:
        assert sha256(path.read_bytes()) == sha256(index.files[path.name])


def test_the_threads_are_set_by_the_documented_variable(
    tmp_path: Path, index: Index, monkeypatch: pytest.MonkeyPatch
) -> None:
    index.delay = 0.1
    wheels = [index.add(f"rbpar-{n}") for n in "abc"]
    monkeypatch.setenv(fetchnet.THREADS_VAR, "1")
    fetch(uv_lock(tmp_path, index, wheels), tmp_path)
    assert index.most == 1
    monkeypatch.setenv(fetchnet.THREADS_VAR, "many")
    with pytest.raises(fetchnet.FetchSetupError, match=r"REPROBUILD_FETCH_THREADS='many' is not"):
        fetchnet.fetch_threads()


def test_a_wrong_hash_is_refused_and_nothing_of_it_is_kept(tmp_path: Path, index: Index) -> None:
    good, bad = index.add("rbpar-good", 200_000), index.add("rbpar-bad", 3_000_000)
    index.tampered.add(bad.name)  # the last byte differs: found only once all of it came
    lock = uv_lock(tmp_path, index, [good, bad])
    with pytest.raises(WheelError) as caught:
        fetch(lock, tmp_path)
    message = str(caught.value)
    assert f"{lock}:" in message and f"the downloaded {bad.name} of rbpar-bad==1.0" in message
    assert f"which is not the lock's {sha256(bad.read_bytes())}" in message, message
    assert "1 checked file kept in the cache" in message, message
    assert cached() == [good.name]  # the checked one kept, nothing of the other
    leftover = [
        p for p in wheel_folder(TARGET).rglob("*") if p.is_file() and ".index" not in p.name
    ]
    assert [p.name for p in leftover] == [good.name], leftover  # no partial file either


def test_a_cut_connection_is_resumed_with_range(tmp_path: Path, index: Index) -> None:
    wheel = index.add("rbpar-big", 2_000_000)
    index.cut.add(wheel.name)
    said: list[str] = []
    got = fetch(uv_lock(tmp_path, index, [wheel]), tmp_path, said)
    assert [sha256(p.read_bytes()) for p in got] == [sha256(wheel.read_bytes())]
    asks = [h for p, h in index.asked if p.endswith(wheel.name)]
    assert len(asks) == 2 and "Range" not in asks[0], asks
    half = (len(wheel.read_bytes())) // 2
    assert asks[1]["Range"] == f"bytes={half}-", asks  # the rest only
    assert any(line.startswith(f"fetched {wheel.name}: ") for line in said), said


def test_a_server_ignoring_the_range_is_read_again_from_the_start(
    tmp_path: Path, index: Index
) -> None:
    wheel = index.add("rbpar-big", 2_000_000)
    index.cut.add(wheel.name)
    index.ranges = False
    got = fetch(uv_lock(tmp_path, index, [wheel]), tmp_path)
    assert [sha256(p.read_bytes()) for p in got] == [sha256(wheel.read_bytes())]


def test_a_host_busy_for_a_moment_is_asked_again(tmp_path: Path, index: Index) -> None:
    wheel = index.add("rbpar-busy")
    index.busy.add(wheel.name)
    got = fetch(uv_lock(tmp_path, index, [wheel]), tmp_path)
    assert [p.name for p in got] == [wheel.name]
    assert index.files_asked() == [wheel.name, wheel.name]


def test_a_host_that_does_not_resolve_is_one_line_naming_it(tmp_path: Path, index: Index) -> None:
    good = index.add("rbpar-good")
    lost = index.add("rbpar-lost")
    lock = uv_lock(tmp_path, index, [good, lost])
    text = lock.read_text().replace(
        f"{index.url.rsplit('/simple', 1)[0]}/files/{lost.name}",
        f"https://files.invalid/files/{lost.name}",
    )
    lock.write_text(text)
    with pytest.raises(WheelError) as caught:
        fetch(lock, tmp_path)
    message = str(caught.value)
    assert "\n" not in message
    assert "the host files.invalid does not resolve (no DNS answer for its name)" in message
    assert "rbpar-lost 1.0 needs it" in message, message
    assert cached() == [good.name]


def test_a_hash_only_lock_finds_its_files_through_the_json_api(
    tmp_path: Path, index: Index
) -> None:
    wheels = [index.add(f"rbpar-{n}") for n in "ab"]
    got = fetch(requirements_lock(tmp_path, index, wheels), tmp_path)
    assert sorted(p.name for p in got) == sorted(w.name for w in wheels)
    pages = [h.get("Accept", "") for p, h in index.asked if p.startswith("/simple/rbpar-")]
    json_first = [a for a in pages if a.startswith("application/vnd.pypi.simple.v1+json")]
    assert len(json_first) == 2, pages  # each package's page once (and the index probe's)
    # the files came from the URLs the JSON gave (the HTML page lists others)
    assert sorted(p for p in index.paths() if "files/" in p) == sorted(
        f"/json-files/{w.name}" for w in wheels
    )


def test_an_index_answering_html_only_is_read_as_pep_503(tmp_path: Path, index: Index) -> None:
    index.json = False
    wheels = [index.add(f"rbpar-{n}") for n in "ab"]
    got = fetch(requirements_lock(tmp_path, index, wheels), tmp_path)
    assert sorted(p.name for p in got) == sorted(w.name for w in wheels)
    assert sorted(p for p in index.paths() if "files/" in p) == sorted(
        f"/files/{w.name}" for w in wheels
    )


def test_a_file_the_index_lists_with_another_hash_is_left_to_pip(
    tmp_path: Path, index: Index
) -> None:
    """A hash-only lock whose hash no listed file has: not fetched side by side; pip's download
    says what is wrong, as before."""
    wheel = index.add("rbpar-a")
    lock = requirements_lock(tmp_path, index, [wheel])
    lock.write_text(lock.read_text().replace(sha256(wheel.read_bytes()), "0" * 64))
    said: list[str] = []
    with pytest.raises(WheelError, match=r"rbpar-a==1\.0 \(\S+\.whl\) has sha256"):
        fetch(lock, tmp_path, said)
    assert "pip downloads the 1 not found here or at a known URL" in said, said


def test_a_local_folder_s_file_comes_first(
    tmp_path: Path, index: Index, monkeypatch: pytest.MonkeyPatch
) -> None:
    wheels = [index.add(f"rbpar-{n}") for n in "ab"]
    local = tmp_path / "local"
    local.mkdir()
    (local / wheels[0].name).write_bytes(index.files[wheels[0].name])  # the locked bytes
    (local / wheels[1].name).write_bytes(b"not the locked wheel")  # same name, other bytes
    monkeypatch.setenv(fetchnet.FIND_LINKS_VAR, str(local))
    got = fetch(uv_lock(tmp_path, index, wheels), tmp_path)
    assert sorted(p.name for p in got) == sorted(w.name for w in wheels)
    assert index.files_asked() == [wheels[1].name]  # the local one was not downloaded
    assert sha256((wheel_folder(TARGET) / wheels[1].name).read_bytes()) == sha256(
        index.files[wheels[1].name]
    )
    assert (local / wheels[1].name).read_bytes() == b"not the locked wheel"  # left as it was


def test_a_local_simple_index_serves_a_hash_only_lock_with_no_download(
    tmp_path: Path, index: Index, monkeypatch: pytest.MonkeyPatch
) -> None:
    wheel = index.add("rbpar-disk")
    mirror = tmp_path / "mirror"
    (mirror / "files").mkdir(parents=True)
    (mirror / "files" / wheel.name).write_bytes(index.files[wheel.name])
    page = mirror / "simple" / "rbpar-disk" / "index.html"
    page.parent.mkdir(parents=True)
    digest = sha256(index.files[wheel.name])
    page.write_text(f'<a href="../../files/{wheel.name}#sha256={digest}">{wheel.name}</a>')
    monkeypatch.setenv(fetchnet.LOCAL_INDEXES_VAR, str(mirror / "simple"))
    got = fetch(requirements_lock(tmp_path, index, [wheel]), tmp_path)
    assert [p.name for p in got] == [wheel.name]
    assert index.files_asked() == []


@pytest.mark.parametrize(
    "lock",
    [
        "tests/data/lockfiles/wild/outlines-1.3.3/uv.lock",
        "tests/data/lockfiles/wild/oyez-sa-asr-5549f45/pylock.toml",
    ],
)
def test_a_native_lock_gives_every_wheel_s_url_with_no_index_read(
    lock: str, index: Index, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Every wheel of a real uv.lock and pylock.toml is planned from the lock's own URLs: one
    per package, of a tag the target installs (the best-ranked one), with a locked sha256."""
    from packaging.utils import parse_wheel_filename

    from reprobuild.locks import lockurls, parfetch
    from reprobuild.locks.native import Selection

    def no_index(*args: Any, **kwargs: Any) -> None:
        raise AssertionError("an index was read")

    monkeypatch.setattr(parfetch, "index_files", no_index)
    path = Path(__file__).resolve().parents[2] / lock
    read = load_lock(path)
    ranks = parfetch.target_ranks(TARGET.python_version, TARGET.abi, TARGET.platforms())
    wanted = read.wheel_requirements
    planned = parfetch.plan(read, wanted, Selection(), ranks=ranks, threads=8)
    assert planned.unlocated == ()
    holding = {r.name for r in wanted if Selection().marker_holds(r.marker)}
    assert sorted(j.req.name for j in planned.jobs) == sorted(holding)
    assert len(holding) > 5
    urls = lockurls.native_wheel_urls(read, Selection())
    for job in planned.jobs:
        assert job.url.startswith("https://") and urls[job.sha256] == job.url
        assert f"sha256:{job.sha256}" in job.req.hashes
        tags = parse_wheel_filename(job.filename)[3]
        assert tags & ranks.keys(), job.filename
        others = [
            min(ranks[t] for t in parse_wheel_filename(lockurls._name_of(u))[3] if t in ranks)
            for h, u in urls.items()
            if f"sha256:{h}" in job.req.hashes
            and parse_wheel_filename(lockurls._name_of(u))[3] & ranks.keys()
        ]
        assert min(ranks[t] for t in tags if t in ranks) == min(others)  # the best one
