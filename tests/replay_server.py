"""A local HTTP server that answers as a recorded server did (Ollama and LM Studio, from their
documented answers in tests/data/servers), or as a broken one does: an error status, a body
that is not JSON, a stream that breaks off, never ends, or never sends a token."""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any, ClassVar

DATA = Path(__file__).parent / "data" / "servers"


@dataclass
class Route:
    status: int = 200
    body: bytes | None = None  # answered whole
    lines: list[bytes] = field(default_factory=list)  # or streamed, line by line
    line_delay_s: float = 0.0
    forever: bool = False  # keep streaming the last line
    silent_s: float = 0.0  # send headers, then nothing for this long
    cut_after: int | None = None  # drop the connection after this many lines...
    cut_from: int = 0  # ...from this request on (0: every request)
    served: int = 0


def json_route(value: Any, status: int = 200) -> Route:
    return Route(status=status, body=json.dumps(value).encode())


def recorded(name: str) -> Any:
    return json.loads((DATA / name).read_text())


def recorded_stream(name: str, delay_s: float = 0.0) -> Route:
    return Route(lines=[ln.encode() + b"\n" for ln in (DATA / name).read_text().splitlines()], line_delay_s=delay_s)


class _Handler(BaseHTTPRequestHandler):
    routes: ClassVar[dict[tuple[str, str], Route]] = {}
    requests: ClassVar[list[tuple[str, str, Any]]] = []

    def log_message(self, *args: object) -> None:  # quiet
        pass

    def _serve(self, method: str) -> None:
        length = int(self.headers.get("Content-Length") or 0)
        body = json.loads(self.rfile.read(length)) if length else None
        self.requests.append((method, self.path, body))
        route = self.routes.get((method, self.path))
        if route is None:
            self.send_response(404)
            self.send_header("Content-Length", "9")
            self.end_headers()
            self.wfile.write(b"not found")
            return
        self.send_response(route.status)
        if route.body is not None:
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(route.body)))
            self.end_headers()
            self.wfile.write(route.body)
            return
        self.send_header("Content-Type", "application/x-ndjson")
        self.end_headers()
        self.wfile.flush()
        if route.silent_s:
            time.sleep(route.silent_s)
            return
        route.served += 1
        cut = route.cut_after if route.served > route.cut_from else None
        for i, line in enumerate(self._lines(route)):
            if cut is not None and i >= cut:
                self.connection.shutdown(2)
                return
            try:
                self.wfile.write(line)
                self.wfile.flush()
            except OSError:
                return
            if route.line_delay_s:
                time.sleep(route.line_delay_s)

    @staticmethod
    def _lines(route: Route) -> Iterator[bytes]:
        yield from route.lines
        while route.forever:
            yield route.lines[-1]

    def do_GET(self) -> None:
        self._serve("GET")

    def do_POST(self) -> None:
        self._serve("POST")


class ReplayServer:
    """`with ReplayServer(routes) as url:` a server on a free local port."""

    def __init__(self, routes: dict[tuple[str, str], Route]) -> None:
        handler = type("Handler", (_Handler,), {"routes": routes, "requests": []})
        self.handler = handler
        self.httpd = ThreadingHTTPServer(("127.0.0.1", 0), handler)
        self.httpd.daemon_threads = True

    @property
    def requests(self) -> list[tuple[str, str, Any]]:
        return self.handler.requests

    def __enter__(self) -> str:
        threading.Thread(target=self.httpd.serve_forever, daemon=True).start()
        return f"http://127.0.0.1:{self.httpd.server_address[1]}"

    def __exit__(self, *exc: object) -> None:
        self.httpd.shutdown()
        self.httpd.server_close()


def ollama_routes(**overrides: Route) -> dict[tuple[str, str], Route]:
    """Ollama as its documentation shows it: version, one model loaded on the GPU, a stream."""
    routes = {
        ("GET", "/api/version"): json_route(recorded("ollama-version.json")),
        ("GET", "/api/ps"): json_route(recorded("ollama-ps.json")),
        ("POST", "/api/generate"): recorded_stream("ollama-generate-stream.jsonl"),
    }
    routes.update({("POST", path.replace("_", "/")): r for path, r in overrides.items()})
    return routes


def lm_studio_routes(loaded: str | None = "meta-llama-3.1-8b-instruct") -> dict[tuple[str, str], Route]:
    """LM Studio as documented; `loaded` marks that documented model as loaded (the documented
    list has none loaded)."""
    models = recorded("lm-studio-models.json")
    for m in models["data"]:
        if m["id"] == loaded:
            m["state"] = "loaded"
    return {
        ("GET", "/api/v0/models"): json_route(models),
        ("POST", "/api/v0/completions"): json_route(recorded("lm-studio-completion.json")),
    }
