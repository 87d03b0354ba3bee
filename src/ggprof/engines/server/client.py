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
import threading
import time
import urllib.parse
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any, TypeVar

from ggprof.bounded import TooManyItems, loads_bounded
from ggprof.errors import BadInputError, RunError
from ggprof.netio import Budget, DeadlineExceeded, metered_connection, why
from ggprof.units import clean_name

T = TypeVar("T")

MAX_JSON_BYTES = 64 << 20  # /api/show verbose carries the tokenizer: tens of MB for a 256k vocabulary
MAX_STREAM_BYTES = 32 << 20  # one streamed completion of a few thousand tokens is well under 1 MB
MAX_LINE_BYTES = 1 << 20
MAX_FRAMING_BYTES = 1 << 20  # headers and chunk framing on top of a body's own cap
# what a parsed answer may hold (a JSON item: an object, an array or a value in one): parsing
# multiplies bytes (63 MiB of `[{},{},...]` is 1.6 GB of Python objects). Ollama's /api/show
# verbose of a 262k-token vocabulary with its merges is about 1.1 million items.
MAX_JSON_ITEMS = 3_000_000
MAX_EVENT_ITEMS = 100_000  # one streamed event: a token, its probabilities, the timings
CONNECT_TIMEOUT_S = 3.0


class ServerError(RunError):
    """A server that broke off, answered an error, or sent what its API does not. `status`: the
    HTTP status it answered, where it answered one."""

    def __init__(self, message: str, status: int | None = None) -> None:
        super().__init__(message)
        self.status = status


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
        if port == 0:
            raise BadInputError(f"--server {clean_name(url, 80)}: port 0 is not a port a server listens on")
        host = u.hostname
        try:  # a name DNS can look up: at most 253 characters, labels of at most 63 (RFC 1035)
            ok = len(host) <= 253 and (":" in host or all(0 < len(x) <= 63 for x in host.rstrip(".").split(".")))
            if ok and ":" not in host:
                host.encode("idna")
        except UnicodeError:
            ok = False
        if not ok:
            raise BadInputError(f"--server {clean_name(url, 80)}: not a host name that can be looked up")
        default_port = 443 if u.scheme == "https" else 80
        return cls(u.scheme, host, port if port is not None else default_port, u.path.rstrip("/"))

    def __str__(self) -> str:
        host = f"[{self.host}]" if ":" in self.host else self.host
        return f"{self.scheme}://{host}:{self.port}{self.prefix}"

    @property
    def is_local(self) -> bool:
        return self.host in ("localhost", "127.0.0.1", "::1", "0.0.0.0")


class Client:
    """Requests to one server, each bounded as a whole: a deadline over everything it does
    (connecting, the headers, the body or the stream), a timeout for each read within it, a cap
    on the bytes it may receive and on the JSON items it may parse."""

    def __init__(self, endpoint: Endpoint, read_timeout_s: float) -> None:
        self.endpoint = endpoint
        self.read_timeout_s = read_timeout_s

    def _open(self, method: str, path: str, body: dict[str, Any] | None, budget: Budget) -> tuple[Any, Any]:
        base = http.client.HTTPSConnection if self.endpoint.scheme == "https" else http.client.HTTPConnection
        conn = metered_connection(base, budget)(
            self.endpoint.host, self.endpoint.port, timeout=max(0.05, min(budget.read_timeout_s, budget.left_s()))
        )
        data = json.dumps(body).encode() if body is not None else None
        headers = {"Content-Type": "application/json", "Accept": "application/json, text/event-stream"}
        try:
            conn.request(method, self.endpoint.prefix + path, body=data, headers=headers)
            return conn, conn.getresponse()
        except (OSError, http.client.HTTPException, UnicodeError) as e:
            conn.close()
            raise ServerError(f"{self.endpoint}{path}: {why(e, budget)}") from None

    def get_json(self, path: str, body: dict[str, Any] | None = None, timeout_s: float | None = None) -> Any:
        """GET (or POST when there is a body) and parse JSON, all within `timeout_s` (default:
        the client's read timeout) as a whole; ServerError for anything else."""
        method = "POST" if body is not None else "GET"
        whole_s = timeout_s or self.read_timeout_s
        budget = Budget(time.monotonic() + whole_s, self.read_timeout_s, MAX_JSON_BYTES + MAX_FRAMING_BYTES)
        conn, resp = self._open(method, path, body, budget)
        try:
            raw = resp.read(MAX_JSON_BYTES + 1)
        except (OSError, http.client.HTTPException, ValueError) as e:
            raise ServerError(f"{self.endpoint}{path}: {why(e, budget)}") from None
        finally:
            conn.close()
        if resp.status != 200:
            raise ServerError(f"{self.endpoint}{path}: HTTP {resp.status} {_snippet(raw)}", status=resp.status)
        if len(raw) > MAX_JSON_BYTES:
            raise ServerError(f"{self.endpoint}{path}: answer larger than {MAX_JSON_BYTES >> 20} MiB")
        try:
            return loads_bounded(raw, MAX_JSON_ITEMS)
        except TooManyItems:
            raise ServerError(
                f"{self.endpoint}{path}: an answer of more than {MAX_JSON_ITEMS:,} JSON items; not parsed"
            ) from None
        except (ValueError, RecursionError):
            raise ServerError(f"{self.endpoint}{path}: not JSON: {_snippet(raw)}") from None

    def stream(self, path: str, body: dict[str, Any], deadline: float) -> Iterator[tuple[int, dict[str, Any]]]:
        """POST and yield (perf_counter_ns at arrival, event) for each streamed JSON object, until
        the stream ends; ServerError when it breaks, overruns `deadline` (monotonic, for the
        whole stream: a line dripped a byte at a time ends there too) or its caps."""
        budget = Budget(deadline, self.read_timeout_s, MAX_STREAM_BYTES + MAX_FRAMING_BYTES)
        conn, resp = self._open("POST", path, body, budget)
        try:
            if resp.status != 200:
                try:
                    said = resp.read(2000)
                except (OSError, http.client.HTTPException, ValueError):
                    said = b""
                raise ServerError(f"{self.endpoint}{path}: HTTP {resp.status} {_snippet(said)}", status=resp.status)
            total = 0
            while True:
                if time.monotonic() > deadline:
                    raise ServerError(f"{self.endpoint}{path}: the stream ran past its time limit (--timeout)")
                try:
                    line = resp.readline(MAX_LINE_BYTES + 1)
                except DeadlineExceeded:
                    late = "the stream ran past its time limit (--timeout)"
                    raise ServerError(f"{self.endpoint}{path}: {late}") from None
                except (OSError, http.client.HTTPException, ValueError) as e:
                    raise ServerError(f"{self.endpoint}{path}: the stream broke off ({why(e, budget)})") from None
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
                    event = loads_bounded(text, MAX_EVENT_ITEMS)
                except TooManyItems:
                    too_many = f"a streamed event of more than {MAX_EVENT_ITEMS:,} JSON items"
                    raise ServerError(f"{self.endpoint}{path}: {too_many}") from None
                except (ValueError, RecursionError):
                    raise ServerError(f"{self.endpoint}{path}: a streamed line is not JSON: {_snippet(text)}") from None
                if not isinstance(event, dict):
                    raise ServerError(f"{self.endpoint}{path}: a streamed line is not a JSON object")
                if "error" in event and not event.get("choices"):
                    raise ServerError(f"{self.endpoint}{path}: the server said: {_snippet(event['error'])}")
                yield now, event
        finally:
            conn.close()


def _snippet(raw: object) -> str:
    text = raw.decode("utf-8", "replace") if isinstance(raw, bytes) else str(raw)
    return clean_name(" ".join(text.split()), 160)


def reachable(endpoint: Endpoint, timeout_s: float = CONNECT_TIMEOUT_S) -> bool:
    """Whether something accepts TCP connections there (a quick look before any request)."""
    try:
        with socket.create_connection((endpoint.host, endpoint.port), timeout=timeout_s):
            return True
    except (OSError, UnicodeError):
        return False


def at_once(call: Callable[[int], T], n: int) -> list[T]:
    """`call(0) .. call(n - 1)`, each on its own thread, all at once; the first error raised
    (a ServerError or RunError as it is, anything else as a ServerError)."""
    results: list[T | BaseException] = [RuntimeError("not run")] * n

    def go(i: int) -> None:
        try:
            results[i] = call(i)
        except BaseException as e:  # handed to the caller below
            results[i] = e

    threads = [threading.Thread(target=go, args=(i,), daemon=True) for i in range(n)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    for r in results:
        if isinstance(r, BaseException):
            raise r if isinstance(r, (ServerError, RunError)) else ServerError(str(r))
    return [r for r in results if not isinstance(r, BaseException)]
