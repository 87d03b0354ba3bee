"""The HTTP side of the server engine: a bounded client and the APIs of llama-server, Ollama,
LM Studio and any OpenAI-compatible server.

Everything a server sends is untrusted: every read has a timeout, every body and stream a
size cap, and JSON that is not the shape asked for is one clear error. Streams come as
server-sent events (`data: {...}` lines: llama-server, LM Studio, OpenAI) or as one JSON
object a line (Ollama); both yield (arrival time in ns, object).

APIs (checked against each project's documentation; tests replay recorded answers):
- llama-server (tools/server/README.md): GET /health, /props (model_path, total_slots,
  build_info), POST /completion with `stream`, `n_predict`, `ignore_eos`, `cache_prompt`;
  its last event holds `timings` (prompt_n, prompt_ms, predicted_n, predicted_ms).
- Ollama (docs/api.md): GET /api/version, /api/ps (size, size_vram), POST /api/show
  (`verbose`: model_info, tensors), POST /api/generate (stream of objects; the last has
  prompt_eval_count/_duration and eval_count/_duration in ns).
- LM Studio (REST API v0): GET /api/v0/models (id, publisher, arch, quantization, state),
  POST /api/v0/completions (the last event holds `stats` and `runtime`).
- OpenAI-compatible: GET /v1/models, POST /v1/completions (client-side timing only).
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


# -- what each kind of server says in its final event -------------------------------------------
@dataclass(frozen=True, kw_only=True)
class ServerTimings:
    """What the server itself measured for one completion (None: it did not say)."""

    prompt_n: int | None = None
    prompt_ms: float | None = None
    gen_n: int | None = None  # the decode steps gen_ms covers
    gen_ms: float | None = None


def _number(d: dict[str, Any], key: str) -> float | None:
    v = d.get(key)
    if isinstance(v, bool) or not isinstance(v, (int, float)) or v != v or v < 0 or v > 1e15:
        return None
    return float(v)


def _count(d: dict[str, Any], key: str) -> int | None:
    v = _number(d, key)
    return int(v) if v is not None else None


def timings_llama_server(event: dict[str, Any]) -> ServerTimings | None:
    t = event.get("timings")
    if not isinstance(t, dict):
        return None
    # predicted_ms spans predicted_n - 1 decode steps: "the first token is free, it comes from
    # the logits of the last prompt batch" (tools/server/server-common.h, n_gen_steps)
    predicted = _count(t, "predicted_n")
    return ServerTimings(
        prompt_n=_count(t, "prompt_n"),
        prompt_ms=_number(t, "prompt_ms"),
        gen_n=predicted - 1 if predicted and predicted > 1 else None,
        gen_ms=_number(t, "predicted_ms"),
    )


def timings_ollama(event: dict[str, Any]) -> ServerTimings | None:
    if event.get("done") is not True:
        return None
    prompt_ns, gen_ns = _number(event, "prompt_eval_duration"), _number(event, "eval_duration")
    return ServerTimings(
        prompt_n=_count(event, "prompt_eval_count"),
        prompt_ms=prompt_ns / 1e6 if prompt_ns is not None else None,
        gen_n=_count(event, "eval_count"),
        gen_ms=gen_ns / 1e6 if gen_ns is not None else None,
    )


def timings_lm_studio(event: dict[str, Any]) -> ServerTimings | None:
    """LM Studio's `stats`: tokens_per_second, time_to_first_token and generation_time (s)."""
    stats = event.get("stats")
    if not isinstance(stats, dict):
        return None
    usage: dict[str, Any] = event["usage"] if isinstance(event.get("usage"), dict) else {}
    gen_s, tps = _number(stats, "generation_time"), _number(stats, "tokens_per_second")
    ttft_s = _number(stats, "time_to_first_token")
    gen_n = _count(usage, "completion_tokens") or (round(gen_s * tps) if gen_s and tps else None)
    return ServerTimings(
        prompt_n=_count(usage, "prompt_tokens"),
        prompt_ms=ttft_s * 1e3 if ttft_s is not None else None,
        gen_n=gen_n,
        gen_ms=gen_s * 1e3 if gen_s is not None else None,
    )


def text_of(kind: str, event: dict[str, Any]) -> str | None:
    """The generated text an event carries (None: an event without a token)."""
    if kind == "ollama":
        v = event.get("response")
    elif kind == "llama-server":
        v = event.get("content")
    else:
        choices = event.get("choices")
        first = choices[0] if isinstance(choices, list) and choices and isinstance(choices[0], dict) else {}
        v = first.get("text")
    return v if isinstance(v, str) and v else None


def finished(kind: str, event: dict[str, Any]) -> bool:
    """Whether an event is the last of a completion (a stream that ends before one broke off)."""
    if kind == "ollama":
        return event.get("done") is True
    if kind == "llama-server":
        return event.get("stop") is True
    choices = event.get("choices")
    first = choices[0] if isinstance(choices, list) and choices and isinstance(choices[0], dict) else {}
    return first.get("finish_reason") is not None


def tokens_in_event(kind: str, event: dict[str, Any]) -> int:
    """How many generated tokens one event carries (llama-server may send several per event when
    `n_probs` or a slow client batches them: `tokens` lists their ids)."""
    if kind == "llama-server" and isinstance(event.get("tokens"), list) and event["tokens"]:
        return len(event["tokens"])
    return 1 if text_of(kind, event) is not None else 0
