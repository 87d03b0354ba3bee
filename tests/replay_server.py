"""A local HTTP server that answers as a recorded server did (Ollama and LM Studio, from their
documented answers in tests/data/servers), or as a broken one does: an error status, a body
that is not JSON, a stream that breaks off, never ends, or never sends a token."""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Callable, Iterator
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
    answer: Callable[[Any], list[bytes]] | None = None  # the lines, made from the request's body
    headers: dict[str, str] = field(default_factory=dict)  # raw answers: their headers...
    raw: bytes = b""  # ...then these bytes, `raw_step` at a time, `line_delay_s` apart,
    raw_step: int = 1 << 16
    raw_repeat: int = 1  # the whole of `raw` this many times (gigabytes without holding them)


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
        if route.raw:
            self._raw(route)
            return
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
        lines = route.answer(body) if route.answer else self._lines(route)
        for i, line in enumerate(lines):
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

    def _raw(self, route: Route) -> None:
        """A hostile answer: its headers, then its bytes dripped or flooded, until the client
        goes away."""
        for k, v in route.headers.items():
            self.send_header(k, v)
        self.end_headers()
        try:
            for _ in range(route.raw_repeat):
                for i in range(0, len(route.raw), route.raw_step):
                    self.wfile.write(route.raw[i : i + route.raw_step])
                    self.wfile.flush()
                    if route.line_delay_s:
                        time.sleep(route.line_delay_s)
        except OSError:
            return

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
    """`with ReplayServer(routes) as url:` a server on a free local port (of `host`)."""

    def __init__(self, routes: dict[tuple[str, str], Route], host: str = "127.0.0.1") -> None:
        class Handler(_Handler):  # this server's own routes and requests
            pass

        Handler.routes, Handler.requests = routes, []
        self.handler = Handler
        self.host = host  # another loopback address (127.0.0.2) is a server on "another machine"
        self.httpd = ThreadingHTTPServer((host, 0), Handler)
        self.httpd.daemon_threads = True

    @property
    def requests(self) -> list[tuple[str, str, Any]]:
        return self.handler.requests

    def __enter__(self) -> str:
        threading.Thread(target=self.httpd.serve_forever, daemon=True).start()
        return f"http://{self.host}:{self.httpd.server_address[1]}"

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


def llama_server_routes(model_path: Path, **timings: Any) -> dict[tuple[str, str], Route]:
    """llama-server as recorded here (tests/data/servers/llama-server-*): /props naming
    `model_path`, and a /completion stream of as many token events as `n_predict` asks (the
    recorded first one repeated) ending with the recorded last event, its `timings` counting
    those tokens and updated by `timings`."""
    props = recorded("llama-server-props.json")
    props["model_path"] = str(model_path)
    events = [json.loads(ln[5:]) for ln in (DATA / "llama-server-completion-stream.txt").read_text().splitlines()]
    token, last = events[0], events[-1]

    def answer(body: Any) -> list[bytes]:
        n = int(body["n_predict"])
        end = {**last, "timings": {**last["timings"], "predicted_n": n, **timings}}
        return [b"data: " + json.dumps(token).encode() + b"\n\n"] * n + [b"data: " + json.dumps(end).encode() + b"\n\n"]

    return {
        ("GET", "/props"): json_route(props),
        ("GET", "/health"): json_route({"status": "ok"}),
        ("POST", "/completion"): Route(answer=answer),
    }
