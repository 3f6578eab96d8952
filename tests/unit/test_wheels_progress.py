"""The wheel fetch's progress, driven for real: pip downloads hashed wheels from a simple index
served over HTTP on 127.0.0.1 (throttled, so a download takes long enough to be seen), and the
lines it writes (not a terminal) or the bar it draws (a pseudo-terminal) are checked.

Each test takes a few seconds: the wheels are a few MB, served at about 8 MB/s."""

from __future__ import annotations

import hashlib
import http.server
import io
import os
import pty
import re
import subprocess
import sys
import threading
import time
import zipfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from reprobuild._util.progress import Transfers, size
from reprobuild.locks import wheels
from reprobuild.locks.lockfile import load_lock
from reprobuild.locks.wheels import Target, WheelError, fetch_wheels

TARGET = Target("3.11", "x86_64", (2, 36))
# name -> bytes of payload: two past pip's 512 KiB floor for its progress, one below it
SIZES = {"rbprog-alpha": 3_000_000, "rbprog-beta": 1_500_000, "rbprog-gamma": 20_000}
RATE = 8_000_000  # bytes a second the server sends at


def make_wheel(folder: Path, name: str, payload: int) -> Path:
    """A real (installable) wheel holding ``payload`` incompressible bytes."""
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
    record = "".join(f"{n},,\n" for n in [*files, f"{info}/RECORD"])
    with zipfile.ZipFile(path, "w", zipfile.ZIP_STORED) as zf:
        for n, data in files.items():
            zf.writestr(n, data)
        zf.writestr(f"{info}/RECORD", record)
    return path


def sha256(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


class Throttled(http.server.SimpleHTTPRequestHandler):
    def copyfile(self, source: Any, outputfile: Any) -> None:
        while chunk := source.read(64 * 1024):
            outputfile.write(chunk)
            time.sleep(len(chunk) / RATE)

    def log_message(self, format: str, *args: Any) -> None:
        pass


@pytest.fixture
def index(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[tuple[str, dict[str, Path]]]:
    """A PEP 503 simple index on 127.0.0.1 with the wheels; pip set up to see only it, with
    no cache of its own, and reprobuild's cache in tmp_path."""
    root = tmp_path / "www"
    (root / "files").mkdir(parents=True)
    built = {name: make_wheel(root / "files", name, n) for name, n in SIZES.items()}
    for name, path in built.items():
        page = root / "simple" / name / "index.html"
        page.parent.mkdir(parents=True)
        page.write_text(
            f'<a href="../../files/{path.name}#sha256={sha256(path)}">{path.name}</a>\n'
        )

    def handler(*args: Any, **kwargs: Any) -> Throttled:
        return Throttled(*args, directory=str(root), **kwargs)

    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    for var in [v for v in os.environ if v.startswith("PIP_")]:
        monkeypatch.delenv(var)
    monkeypatch.setenv("PIP_CONFIG_FILE", os.devnull)
    monkeypatch.setenv("PIP_NO_CACHE_DIR", "1")
    monkeypatch.setenv("REPROBUILD_CACHE_DIR", str(tmp_path / "cache"))
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}/simple/", built
    finally:
        server.shutdown()
        server.server_close()


def write_lock(tmp_path: Path, url: str, built: dict[str, Path], bad: str | None = None) -> Path:
    lines = [f"--index-url {url}"]
    for name, path in built.items():
        digest = "0" * 64 if name == bad else sha256(path)
        lines.append(f"{name}==1.0 --hash=sha256:{digest}")
    lock = tmp_path / "requirements.lock"
    lock.write_text("\n".join(lines) + "\n")
    return lock


def test_plain_lines_per_file_and_in_total(
    tmp_path: Path, index: tuple[str, dict[str, Path]]
) -> None:
    url, built = index
    lock = load_lock(write_lock(tmp_path, url, built))
    said: list[str] = []
    got = fetch_wheels(lock, TARGET, tmp_path / "ctx", log=said.append, every=0.2)

    assert sorted(p.name for p in got) == sorted(p.name for p in built.values())
    assert all(sha256(p) == sha256(built[p.name.split("-")[0].replace("_", "-")]) for p in got)
    assert said[0] == f"fetching 3 locked wheels for {TARGET.key}"
    assert not any("\r" in line or "\x1b" in line for line in said)  # no bar spam in logs
    for name, path in built.items():
        n = path.stat().st_size
        # each file once, when done, with its bytes (pip's exact count for the large ones)
        mine = [ln for ln in said if ln.startswith(f"fetched {path.name}: ")]
        assert len(mine) == 1, (name, said)
        if n > 512 * 1024:
            assert mine[0].startswith(f"fetched {path.name}: {size(n)} in "), mine
        assert re.search(r" in \d+\.\d s \([0-9.]+ [kMG]?B/s\); [123]/3 files, ", mine[0]), mine
    # a total while it ran (every 0.2 s; the download takes about 0.6 s)
    totals = [ln for ln in said if ln.startswith("fetched so far: ")]
    assert totals, said
    print("\n".join(said))  # shown by pytest -s: what a CI log gets
    assert all(
        re.fullmatch(r"fetched so far: [0-3]/3 files, [0-9.]+ (bytes|[kM]B) in \d+ s \(.*/s\).*", t)
        for t in totals
    ), totals
    whole = sum(p.stat().st_size for p in built.values())
    assert re.fullmatch(
        rf"fetched 3 files, {re.escape(size(whole))} in \d+\.\d s \([0-9.]+ [kMG]?B/s\)", said[-1]
    )

    # cached now: nothing fetched, nothing drawn
    again: list[str] = []
    fetch_wheels(lock, TARGET, tmp_path / "ctx2", log=again.append, every=0.2)
    assert again == [f"all 3 locked wheels are cached for {TARGET.key}"]


def test_a_wrong_hash_is_still_refused(tmp_path: Path, index: tuple[str, dict[str, Path]]) -> None:
    url, built = index
    lock = load_lock(write_lock(tmp_path, url, built, bad="rbprog-beta"))
    said: list[str] = []
    with pytest.raises(
        WheelError, match=r"rbprog-beta==1\.0 \(\S+\.whl\) has sha256 [0-9a-f]{64}, which is"
    ):
        fetch_wheels(lock, TARGET, tmp_path / "ctx", log=said.append)
    # the file with no locked hash is not in the cache; the checked ones are kept (issue 52:
    # a fetch that failed does not fetch them again)
    cached = sorted(p.name for p in (tmp_path / "cache" / "wheels" / TARGET.key).glob("*.whl"))
    assert cached == sorted(built[n].name for n in ("rbprog-alpha", "rbprog-gamma")), cached
    assert said[0] == f"fetching 3 locked wheels for {TARGET.key}"
    assert not any(line.startswith("fetched 3 files") for line in said), said


CHILD = """
import sys
from pathlib import Path
from reprobuild.locks.lockfile import load_lock
from reprobuild.locks.wheels import Target, fetch_wheels

lock = load_lock(Path(sys.argv[1]))
err = lambda line: print(line, file=sys.stderr, flush=True)
fetch_wheels(lock, Target("3.11", "x86_64", (2, 36)), Path(sys.argv[2]), log=err, bar=sys.stderr)
print("done")
"""


def test_a_terminal_gets_a_live_bar(tmp_path: Path, index: tuple[str, dict[str, Path]]) -> None:
    url, built = index
    lock = write_lock(tmp_path, url, built)
    program = tmp_path / "child.py"
    program.write_text(CHILD)
    primary, secondary = pty.openpty()
    env = {**os.environ, "TERM": "xterm-256color", "COLUMNS": "120", "LINES": "40"}
    env.pop("NO_COLOR", None)
    proc = subprocess.Popen(
        [sys.executable, str(program), str(lock), str(tmp_path / "ctx")],
        stdin=secondary,
        stdout=secondary,
        stderr=secondary,
        env=env,
    )
    os.close(secondary)
    out = io.BytesIO()
    while True:
        try:
            chunk = os.read(primary, 65536)
        except OSError:  # EIO: the child closed the terminal
            break
        if not chunk:
            break
        out.write(chunk)
    os.close(primary)
    assert proc.wait(timeout=60) == 0
    text = out.getvalue().decode(errors="replace")
    assert "━" in text, text  # rich's bar
    assert "\x1b[" in text  # redrawn in place
    assert re.search(r"[0-9.]+/[0-9.]+ MB", text), text  # bytes of the total in flight
    assert re.search(r"[0-9.]+ [kM]B/s", text), text  # the rate
    assert re.search(r"0/3 files|1/3 files|2/3 files", text), text  # the total's row
    for path in built.values():
        assert f"fetched {path.name}: " in text  # each file, once done, above the bar
    assert "fetched 3 files, " in text
    assert text.rstrip().endswith("done")


def test_an_old_pip_is_followed_file_by_file() -> None:
    """pip before 24.1 has no ``--progress-bar raw``: its ``Downloading NAME (SIZE)`` lines
    still give each file and its (rounded) size. Fed to the parser with a fake clock."""
    now = [0.0]
    said: list[str] = []
    progress = Transfers(said.append, count=2, every=5.0, clock=lambda: now[0])
    pip_says = [
        "Collecting torch==2.9.0 (from -r /tmp/x/requirements.lock (line 2))",
        "  Downloading https://files.example/torch-2.9.0-cp311-none-any.whl (899.8 MB)",
        "WARNING: something pip says",
        "Collecting nvidia-nccl-cu12==2.27.3 (from -r /tmp/x/requirements.lock (line 3))",
        "  Downloading nvidia_nccl_cu12-2.27.3-py3-none-manylinux2014_x86_64."
        "manylinux_2_17_x86_64.whl.metadata (2.0 kB)",
        "  Using cached nvidia_nccl_cu12-2.27.3-py3-none-manylinux2014_x86_64."
        "manylinux_2_17_x86_64.whl (322.4 MB)",
        "Saved ./torch-2.9.0-cp311-none-any.whl",
    ]
    with progress:
        for line in pip_says:
            now[0] += 3.0
            wheels._follow_pip(line, progress)
    # a file ends at the next file, the next "Collecting" or "Saved"; PEP 658 metadata is
    # not a file; a total every 5 s of the fake clock (3 s a line)
    nccl = "nvidia_nccl_cu12-2.27.3-py3-none-manylinux2014_x86_64.manylinux_2_17_x86_64.whl"
    assert said == [
        "fetched so far: 0/2 files, 0 bytes in 6 s (0 bytes/s); "
        "torch-2.9.0-cp311-none-any.whl: 0 bytes of 899.8 MB",
        "fetched torch-2.9.0-cp311-none-any.whl: 899.8 MB in 6.0 s (150.0 MB/s); "
        "1/2 files, 899.8 MB",
        "fetched so far: 1/2 files, 899.8 MB in 12 s (75.0 MB/s)",
        f"fetched so far: 1/2 files, 899.8 MB in 18 s (50.0 MB/s); {nccl}: 0 bytes of 322.4 MB",
        f"fetched {nccl}: 322.4 MB in 3.0 s (107.5 MB/s); 2/2 files, 1.2 GB",
    ]


def test_raw_progress_lines_move_the_file_in_flight() -> None:
    now = [0.0]
    said: list[str] = []
    with Transfers(said.append, count=1, every=10.0, clock=lambda: now[0]) as progress:
        wheels._follow_pip("  Downloading http://h/x/a-1-py3-none-any.whl (2.0 MB)", progress)
        for done in (0, 1_000_000, 1_500_000, 2_000_001):
            now[0] += 4.0
            wheels._follow_pip(f"Progress {done} of 2000001", progress)
    assert said[0] == (
        "fetched so far: 0/1 files, 1.5 MB in 12 s (125.0 kB/s); "
        "a-1-py3-none-any.whl: 1.5 MB of 2.0 MB"
    )
    assert said[1].startswith("fetched a-1-py3-none-any.whl: 2.0 MB in 16.0 s (125.0 kB/s)")


def test_a_local_wheel_is_counted_at_its_size(tmp_path: Path) -> None:
    """A file: index or --find-links: pip copies the file (``Processing PATH``), no bytes to
    follow; the file still counts, at its size on disk."""
    wheel = make_wheel(tmp_path, "rbprog-local", 10_000)
    said: list[str] = []
    with Transfers(said.append, count=1, every=60.0, clock=lambda: 0.0) as progress:
        # pip says where it read the file; one that is not there (cannot be) is not counted
        wheels._follow_pip(f"Processing {wheel} (from -r /tmp/x/req.lock (line 5))", progress)
        wheels._follow_pip(f"Processing {tmp_path / 'gone-1.0-py3-none-any.whl'}", progress)
        wheels._follow_pip(f"Saved ./{wheel.name}", progress)
    n = wheel.stat().st_size
    assert said == [f"fetched {wheel.name}: {size(n)} in 0.0 s (-); 1/1 files, {size(n)}"]
