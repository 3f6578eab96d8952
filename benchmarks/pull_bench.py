"""The cold pull of images from the loopback registry into an empty engine (issue 52): the venv
as layers by package against the same packages in one layer, as ratios in the same run.

    python benchmarks/pull_bench.py --ref LAYERED --ref ONE_LAYER [--rounds 3]
                                    [--link-mbit N] [--out FILE]

Each ``--ref`` is an image in the loopback registry (``benchmarks/layers_bench.py`` pushes its
images there as ``127.0.0.1:5000/bench/layers-RUN:layered-new`` and ``:baseline-new``). A
dockerd of its own is started with an empty data root (``scripts/worker-engines`` under a
temporary root), so that nothing of either image, the base included, is held: each pull is what
a new node pays. In each round every ref is pulled once, the refs alternating, and the engine
is emptied (every image removed) before each pull. The first ref's median over the
others' is the figure (goal: at most 1.00, the layers pull side by side). Needs root. Prints a
table and writes benchmarks/results/pull.json (or --out).

From the loopback registry a download costs nothing, so only the per-layer costs show.
``--link-mbit N`` pulls through a proxy on 127.0.0.1 in front of the registry that sends each
connection's bytes at N Mbit/s at most, as one TCP stream over a long path carries at most so
much: the engine downloads up to three layers at once (dockerd's max-concurrent-downloads),
each on a connection of its own, so the link's cost is what a node across a network pays.
"""

from __future__ import annotations

import argparse
import contextlib
import http.client
import http.server
import json
import os
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import docker

HERE = Path(__file__).resolve().parent
ENGINES = HERE.parent / "scripts" / "worker-engines"


def empty_engine(root: Path) -> tuple[str, dict[str, str]]:
    """Start a dockerd with an empty data root under ``root``: its DOCKER_HOST, and the
    environment that stops it again."""
    env = {**os.environ, "REPROBUILD_WORKER_ENGINES_ROOT": str(root)}
    env["REPROBUILD_WORKER_ENGINES_NET"] = "200"  # apart from CI's and the suite's engines
    out = subprocess.run(
        [str(ENGINES), "2"], env=env, capture_output=True, text=True, check=True
    ).stdout.split()
    host = out[1].partition("|")[0]
    if not host:
        sys.exit(f"error: scripts/worker-engines gave no engine: {out}")
    return host, env


REGISTRY = "127.0.0.1:5000"
# Headers that belong to one hop, not passed on by the proxy.
HOP = frozenset({"connection", "keep-alive", "transfer-encoding", "te", "trailer", "upgrade"})
CHUNK = 64 * 1024


class PacedProxy(http.server.BaseHTTPRequestHandler):
    """GET and HEAD passed to the registry; each response's body sent at ``rate`` bytes a
    second at most on this connection (the pace is kept from the body's first byte)."""

    protocol_version = "HTTP/1.1"
    rate: float = 0.0

    def log_message(self, format: str, *args: Any) -> None:
        pass

    def _relay(self, body: bool) -> None:
        upstream = http.client.HTTPConnection(REGISTRY, timeout=600)
        headers = {k: v for k, v in self.headers.items() if k.lower() not in HOP | {"host"}}
        upstream.request(self.command, self.path, headers=headers)
        answer = upstream.getresponse()
        data = answer.read() if answer.getheader("Content-Length") is None else None
        self.send_response(answer.status)
        for key, value in answer.getheaders():
            if key.lower() not in HOP | {"content-length"}:
                self.send_header(key, value)
        length = len(data) if data is not None else int(answer.getheader("Content-Length") or 0)
        self.send_header("Content-Length", str(length))
        self.end_headers()
        if body:
            start, sent = time.monotonic(), 0
            while chunk := (data[sent : sent + CHUNK] if data is not None else answer.read(CHUNK)):
                self.wfile.write(chunk)
                sent += len(chunk)
                ahead = sent / self.rate - (time.monotonic() - start)
                if ahead > 0:
                    time.sleep(ahead)
        upstream.close()

    def do_GET(self) -> None:
        self._relay(body=True)

    def do_HEAD(self) -> None:
        self._relay(body=False)


@contextlib.contextmanager
def paced_link(mbit: float) -> Iterator[str]:
    """A proxy for the registry on 127.0.0.1 (a random port), each connection paced to
    ``mbit`` Mbit/s: its host:port."""
    handler = type("Paced", (PacedProxy,), {"rate": mbit * 1e6 / 8})
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    server.daemon_threads = True
    thread = threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.05})
    thread.start()
    try:
        yield f"127.0.0.1:{server.server_address[1]}"
    finally:
        server.shutdown()
        server.server_close()


def pull_seconds(client: docker.DockerClient, ref: str) -> float:
    for image in client.images.list():
        client.images.remove(image.id, force=True)
    assert not client.images.list(), "the engine is not empty"
    start = time.monotonic()
    client.images.pull(ref)
    return time.monotonic() - start


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--ref", action="append", required=True, help="an image to pull")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument(
        "--link-mbit", type=float, help="pull through a proxy that paces each connection"
    )
    parser.add_argument("--out", type=Path, default=HERE / "results" / "pull.json")
    args = parser.parse_args()
    if len(args.ref) < 2:
        parser.error("name two --ref at least: the first is measured against the others")
    if args.link_mbit is not None and not args.link_mbit > 0:
        parser.error(f"--link-mbit must be above 0, not {args.link_mbit}")
    if args.link_mbit is not None and any(not r.startswith(f"{REGISTRY}/") for r in args.ref):
        parser.error(f"--link-mbit paces the registry at {REGISTRY}: name refs there")
    times: dict[str, list[float]] = {ref: [] for ref in args.ref}
    with contextlib.ExitStack() as stack:
        link = stack.enter_context(paced_link(args.link_mbit)) if args.link_mbit else REGISTRY
        tmp = stack.enter_context(
            tempfile.TemporaryDirectory(prefix="pull-bench-", ignore_cleanup_errors=True)
        )
        host, env = empty_engine(Path(tmp))
        try:
            client = docker.DockerClient(base_url=host, timeout=1800)
            for n in range(args.rounds):
                order = args.ref if n % 2 == 0 else list(reversed(args.ref))
                for ref in order:
                    seconds = pull_seconds(client, ref.replace(REGISTRY, link, 1))
                    times[ref].append(round(seconds, 2))
                    print(f"round {n + 1}: {ref} {seconds:.1f} s", flush=True)
            for image in client.images.list():
                client.images.remove(image.id, force=True)
        finally:
            subprocess.run([str(ENGINES), "--stop"], env=env, check=False)
    medians = {ref: statistics.median(values) for ref, values in times.items()}
    first, *others = args.ref
    results = {
        "rounds": args.rounds,
        "link_mbit_per_connection": args.link_mbit,
        "pull_s": {ref: {"runs": times[ref], "median": medians[ref]} for ref in args.ref},
        "first_over": {ref: round(medians[first] / medians[ref], 4) for ref in others},
    }
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(results, indent=2, sort_keys=True) + "\n")
    for ref in others:
        print(f"{first} / {ref}: {results['first_over'][ref]:.3f} (goal <= 1.00)")
    print(f"results: {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
