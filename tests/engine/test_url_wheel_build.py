"""Issue 51 item 8 on a real engine: a lock line ``name @ http://127.0.0.1:PORT/x.whl
--hash=sha256:...`` (a local server: plain http is allowed to a loopback host only). The host
fetches the wheel from its URL, checks its hash and caches it; the hermetic build installs it
with no network, and it imports in the container."""

from __future__ import annotations

import hashlib
import http.server
import subprocess
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from helpers import MakeProject, MakeTag, build_json, make_pure_wheel

pytestmark = [pytest.mark.engine, pytest.mark.registry]


class _Quiet(http.server.SimpleHTTPRequestHandler):
    def log_message(self, format: str, *args: Any) -> None:
        pass


@pytest.fixture
def wheel_server(tmp_path: Path) -> Iterator[tuple[str, Path]]:
    root = tmp_path / "www"
    root.mkdir()
    wheel = make_pure_wheel(root, "rbdirect")

    def handler(*args: Any, **kwargs: Any) -> _Quiet:
        return _Quiet(*args, directory=str(root), **kwargs)

    httpd = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    threading.Thread(target=httpd.serve_forever, args=(0.05,), daemon=True).start()
    try:
        yield f"http://127.0.0.1:{httpd.server_address[1]}/{wheel.name}", wheel
    finally:
        httpd.shutdown()
        httpd.server_close()


def test_a_url_wheel_is_built_in_and_imports(
    project: MakeProject,
    base_ref: str,
    unique_tag: MakeTag,
    wheel_server: tuple[str, Path],
    tmp_path: Path,
) -> None:
    url, wheel = wheel_server
    digest = hashlib.sha256(wheel.read_bytes()).hexdigest()
    root = project("tiny")
    lock = root / "requirements.lock"
    lock.write_text(lock.read_text() + f"rbdirect @ {url} --hash=sha256:{digest}\n")
    (root / "hello.py").write_text("import rbdirect, six\nprint('url wheel:', rbdirect.NAME)\n")
    tag = unique_tag("urlwheel")
    result = build_json(
        str(root),
        "--base",
        base_ref,
        "--tag",
        tag,
        env={"REPROBUILD_CACHE_DIR": str(tmp_path / "cache")},
    )
    installed = {d["name"]: d for d in result["manifest"]["distributions"]}
    assert installed["rbdirect"]["version"] == "1.0"
    cached = sorted((tmp_path / "cache" / "wheels").glob("*/rbdirect-1.0-py3-none-any.whl"))
    assert len(cached) == 1 and hashlib.sha256(cached[0].read_bytes()).hexdigest() == digest
    ran = subprocess.run(
        ["docker", "run", "--rm", tag], capture_output=True, text=True, check=False, timeout=120
    )
    assert ran.returncode == 0, ran.stderr[-2000:]
    assert ran.stdout.strip().splitlines()[-1] == "url wheel: rbdirect"
