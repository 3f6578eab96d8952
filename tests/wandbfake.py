"""A FAKE W&B server, for tests only: the few GraphQL queries ``wandb.Api().run(path)`` and
``Run.files()`` send (answered from a dict of runs), and the files' downloads.

No W&B server is reachable from the machines this project is tested on, so ``reprobuild diff
ENTITY/PROJECT/RUN_ID`` is checked against this stand-in, in addition to the real offline runs
the engine tests read: it proves that reprobuild goes through wandb's own client (pointed here
with ``WANDB_BASE_URL``), not that a real server answers the same. It answers what wandb 0.31's
client asks (queries named by their operation); anything else gets an empty ``data``.
"""

from __future__ import annotations

import json
import re
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

OPERATION = re.compile(r"(?:query|mutation)\s+(\w+)")
VIEWER = {
    "id": "VXNlcjox",
    "entity": "fake-entity",
    "username": "fake-user",
    "email": "fake@example.invalid",
    "flags": "{}",
    "teams": {"edges": []},
}


@dataclass
class FakeServer:
    """Runs by ``ENTITY/PROJECT/RUN_ID``, each a dict of file name -> bytes."""

    runs: dict[str, dict[str, bytes]] = field(default_factory=dict)
    url: str = ""
    operations: list[str] = field(default_factory=list)

    def _run(self, entity: str, project: str, name: str) -> dict[str, Any] | None:
        if f"{entity}/{project}/{name}" not in self.runs:
            return None
        return {
            "projectId": 1,
            "id": f"run-{name}",
            "tags": [],
            "name": name,
            "displayName": name,
            "sweepName": None,
            "state": "finished",
            "config": "{}",
            "group": None,
            "jobType": None,
            "commit": None,
            "readOnly": False,
            "createdAt": "2026-11-27T10:00:00",
            "heartbeatAt": "2026-11-27T10:01:00",
            "description": None,
            "notes": None,
            "systemMetrics": "{}",
            "summaryMetrics": "{}",
            "historyLineCount": 0,
            "user": {"name": "fake-user", "username": "fake-user"},
            "historyKeys": None,
        }

    def answer(self, operation: str, variables: dict[str, Any]) -> dict[str, Any]:
        self.operations.append(operation)
        if operation in ("Viewer", "GetDefaultEntity"):
            return {"viewer": VIEWER}
        if operation == "Run":
            run = self._run(variables["entity"], variables["project"], variables["name"])
            return {"project": {"run": run}}
        if operation == "RunFiles":
            return {"project": {"internalId": "1", "run": self._files(variables)}}
        return {}

    def _files(self, variables: dict[str, Any]) -> dict[str, Any] | None:
        run_path = f"{variables['entity']}/{variables['project']}/{variables['name']}"
        if run_path not in self.runs:
            return None
        wanted = variables.get("fileNames") or []
        names = [n for n in sorted(self.runs[run_path]) if not wanted or n in wanted]
        edges = [
            {
                "node": {
                    "id": f"file-{index}",
                    "name": name,
                    "url": f"{self.url}/files/{run_path}/--/{name}",
                    "directUrl": f"{self.url}/files/{run_path}/--/{name}",
                    "sizeBytes": len(self.runs[run_path][name]),
                    "mimetype": "application/json",
                    "updatedAt": "2026-11-27T10:01:00",
                    "md5": "",
                },
                "cursor": f"c{index}",
            }
            for index, name in enumerate(names)
        ]
        page = {"endCursor": edges[-1]["cursor"] if edges else None, "hasNextPage": False}
        return {"fileCount": len(names), "files": {"edges": edges, "pageInfo": page}}


def _handler(server: FakeServer) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        def log_message(self, format: str, *args: Any) -> None:
            pass

        def _send(self, status: int, body: bytes, kind: str = "application/json") -> None:
            self.send_response(status)
            self.send_header("content-type", kind)
            self.send_header("content-length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def do_POST(self) -> None:
            body = self.rfile.read(int(self.headers.get("content-length") or 0))
            if self.path != "/graphql":  # wandb-core's telemetry: accepted, ignored
                self._send(200, b"")
                return
            request = json.loads(body)
            found = OPERATION.search(request.get("query", ""))
            operation = request.get("operationName") or (found.group(1) if found else "")
            data = server.answer(operation, request.get("variables") or {})
            self._send(200, json.dumps({"data": data}).encode())

        def do_GET(self) -> None:
            path = self.path.lstrip("/")
            if path.startswith("files/"):
                run_path, _, name = path[len("files/") :].partition("/--/")
                content = server.runs.get(run_path, {}).get(name)
                if content is not None:
                    self._send(200, content, "application/octet-stream")
                    return
            self._send(404, b"not found", "text/plain")

    return Handler


@contextmanager
def fake_server(runs: dict[str, dict[str, bytes]]) -> Iterator[FakeServer]:
    """The fake on a free loopback port, in a thread, for the ``with`` block."""
    server = FakeServer(runs)
    httpd = ThreadingHTTPServer(("127.0.0.1", 0), _handler(server))
    server.url = f"http://127.0.0.1:{httpd.server_address[1]}"
    thread = threading.Thread(target=httpd.serve_forever, daemon=True)
    thread.start()
    try:
        yield server
    finally:
        httpd.shutdown()
        httpd.server_close()
