"""The HTTP side of the server engine: an endpoint and a bounded client (what each server's
API asks and answers is ggprof.engines.server.apis).

Everything a server sends is untrusted: every read has a timeout, every body and stream a
size cap, and JSON that is not the shape asked for is one clear error. Streams come as
server-sent events (`data: {...}` lines: llama-server, LM Studio, OpenAI) or as one JSON
object a line (Ollama); both yield (arrival time in ns, object).
"""

from __future__ import annotations

import http.client
import json
import socket
import time
import urllib.parse
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

from ggprof.errors import BadInputError, RunError
from ggprof.units import clean_name

MAX_JSON_BYTES = 64 << 20  # /api/show verbose carries the tokenizer: tens of MB for a 256k vocabulary
MAX_STREAM_BYTES = 32 << 20  # one streamed completion of a few thousand tokens is well under 1 MB
MAX_LINE_BYTES = 1 << 20
CONNECT_TIMEOUT_S = 3.0


class ServerError(RunError):
    """A server that broke off, answered an error, or sent what its API does not."""


@dataclass(frozen=True)
class Endpoint:
    """A server's base URL, split: http or https, host, port, path prefix."""

    scheme: str
    host: str
    port: int
    prefix: str

    @classmethod
    def parse(cls, url: str) -> Endpoint:
        text = url.strip()
        if "://" not in text:
            text = "http://" + text
        try:
            u = urllib.parse.urlsplit(text)
            port = u.port
        except ValueError as e:
            raise BadInputError(f"--server {clean_name(url, 80)}: not a URL ({clean_name(e, 80)})") from None
        if u.scheme not in ("http", "https") or not u.hostname:
            raise BadInputError(f"--server {clean_name(url, 80)}: not an http(s) URL with a host")
        return cls(u.scheme, u.hostname, port or (443 if u.scheme == "https" else 80), u.path.rstrip("/"))

    def __str__(self) -> str:
        host = f"[{self.host}]" if ":" in self.host else self.host
        return f"{self.scheme}://{host}:{self.port}{self.prefix}"

    @property
    def is_local(self) -> bool:
        return self.host in ("localhost", "127.0.0.1", "::1", "0.0.0.0")


class Client:
    """Requests to one server, each bounded in time and size."""

    def __init__(self, endpoint: Endpoint, read_timeout_s: float) -> None:
        self.endpoint = endpoint
        self.read_timeout_s = read_timeout_s

    def _connection(self, timeout_s: float) -> http.client.HTTPConnection:
        cls = http.client.HTTPSConnection if self.endpoint.scheme == "https" else http.client.HTTPConnection
        return cls(self.endpoint.host, self.endpoint.port, timeout=timeout_s)

    def _open(self, method: str, path: str, body: dict[str, Any] | None, timeout_s: float) -> tuple[Any, Any]:
        conn = self._connection(timeout_s)
        data = json.dumps(body).encode() if body is not None else None
        headers = {"Content-Type": "application/json", "Accept": "application/json, text/event-stream"}
        try:
            conn.request(method, self.endpoint.prefix + path, body=data, headers=headers)
            return conn, conn.getresponse()
        except (OSError, http.client.HTTPException) as e:
            conn.close()
            raise ServerError(f"{self.endpoint}{path}: {_why(e)}") from None

    def get_json(self, path: str, body: dict[str, Any] | None = None, timeout_s: float | None = None) -> Any:
        """GET (or POST when there is a body) and parse JSON; ServerError for anything else."""
        method = "POST" if body is not None else "GET"
        conn, resp = self._open(method, path, body, timeout_s or self.read_timeout_s)
        try:
            raw = resp.read(MAX_JSON_BYTES + 1)
        except (OSError, http.client.HTTPException) as e:
            raise ServerError(f"{self.endpoint}{path}: {_why(e)}") from None
        finally:
            conn.close()
        if resp.status != 200:
            raise ServerError(f"{self.endpoint}{path}: HTTP {resp.status} {_snippet(raw)}")
        if len(raw) > MAX_JSON_BYTES:
            raise ServerError(f"{self.endpoint}{path}: answer larger than {MAX_JSON_BYTES >> 20} MiB")
        try:
            return json.loads(raw)
        except (ValueError, RecursionError):
            raise ServerError(f"{self.endpoint}{path}: not JSON: {_snippet(raw)}") from None

    def stream(self, path: str, body: dict[str, Any], deadline: float) -> Iterator[tuple[int, dict[str, Any]]]:
        """POST and yield (perf_counter_ns at arrival, event) for each streamed JSON object, until
        the stream ends; ServerError when it breaks, overruns `deadline` (monotonic) or its caps."""
        conn, resp = self._open("POST", path, body, self.read_timeout_s)
        try:
            if resp.status != 200:
                raise ServerError(f"{self.endpoint}{path}: HTTP {resp.status} {_snippet(resp.read(2000))}")
            total = 0
            while True:
                if time.monotonic() > deadline:
                    raise ServerError(f"{self.endpoint}{path}: the stream ran past its time limit (--timeout)")
                try:
                    line = resp.readline(MAX_LINE_BYTES + 1)
                except (OSError, http.client.HTTPException) as e:
                    raise ServerError(f"{self.endpoint}{path}: the stream broke off ({_why(e)})") from None
                if not line:
                    return
                now = time.perf_counter_ns()
                total += len(line)
                if len(line) > MAX_LINE_BYTES or total > MAX_STREAM_BYTES:
                    raise ServerError(f"{self.endpoint}{path}: the stream sent more than a completion holds")
                text = line.decode("utf-8", "replace").strip()
                if not text or text.startswith((":", "event:", "id:", "retry:")):
                    continue
                if text.startswith("data:"):
                    text = text[5:].strip()
                    if text == "[DONE]":
                        return
                try:
                    event = json.loads(text)
                except (ValueError, RecursionError):
                    raise ServerError(f"{self.endpoint}{path}: a streamed line is not JSON: {_snippet(text)}") from None
                if not isinstance(event, dict):
                    raise ServerError(f"{self.endpoint}{path}: a streamed line is not a JSON object")
                if "error" in event and not event.get("choices"):
                    raise ServerError(f"{self.endpoint}{path}: the server said: {_snippet(event['error'])}")
                yield now, event
        finally:
            conn.close()


def _why(e: BaseException) -> str:
    if isinstance(e, (socket.timeout, TimeoutError)):
        return "no answer in time (timed out)"
    if isinstance(e, ConnectionRefusedError):
        return "connection refused (nothing listens there)"
    return clean_name(f"{type(e).__name__}: {e}", 160)


def _snippet(raw: object) -> str:
    text = raw.decode("utf-8", "replace") if isinstance(raw, bytes) else str(raw)
    return clean_name(" ".join(text.split()), 160)


def reachable(endpoint: Endpoint, timeout_s: float = CONNECT_TIMEOUT_S) -> bool:
    """Whether something accepts TCP connections there (a quick look before any request)."""
    try:
        with socket.create_connection((endpoint.host, endpoint.port), timeout=timeout_s):
            return True
    except OSError:
        return False
