"""A GGUF file on an HTTP(S) server, read by range requests: only its header crosses the network.

The first request asks for the first MiB and learns the file's size from `Content-Range`;
each later one asks for twice the last (a 262k-token vocabulary is megabytes of header), until
the parser has the tensor table. Every request is bounded as a whole (ggprof.netio: a deadline
over connecting, headers and body, and a byte cap of what was asked plus framing); redirects
are followed only to http(s), never from https down to http, and at most MAX_REDIRECTS times;
credentials go only to the exact origin (scheme, host and port) they were given for; what a
server sends is checked against what was asked (the range, the size). Nothing is read past
`max_header_bytes` in all, and the reads of a header as a whole (every range, redirect and
shard) end at one whole deadline (netio.Deadline, --header-timeout), however each answers: a
range answered a byte at a time, or shards that each answer late.
"""

from __future__ import annotations

import contextlib
import http.client
import math
import re
import threading
import time
import urllib.parse
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

from ggprof.errors import NetworkError, RemoteError
from ggprof.netio import OFFLINE_ADVICE, Budget, Deadline, MeteredSocket, metered_connection, unreached, why
from ggprof.units import clean_name

MAX_HEADER_BYTES = 64 << 20  # default --max-header-bytes: above any real model's header
FIRST_RANGE_BYTES = 1 << 20
MAX_RANGE_BYTES = 8 << 20  # one request's range at most: growth stops doubling here
MAX_REDIRECTS = 5
REQUEST_DEADLINE_S = 60.0  # one range request as a whole (connect, headers, body)
HEADER_TIMEOUT_S = 60.0  # default --header-timeout: a model's header as a whole, every request and shard
MAX_RANGE_REQUESTS = 64  # ranges of one file's header: 12 read 64 MiB; more is a server answering short
READ_TIMEOUT_S = 15.0
MAX_ANSWER_HEADER_BYTES = 64 << 10  # status line and headers of one answer
MAX_FILE_BYTES = 1 << 45  # a Content-Range claiming more is no model file (35 TB)
_CONTENT_RANGE = re.compile(r"^bytes (\d+)-(\d+)/(\d+)$")


@dataclass
class Traffic:
    """What the reads of one command cost: requests and body bytes (thread-safe)."""

    requests: int = 0
    bytes: int = 0
    _lock: threading.Lock = field(default_factory=threading.Lock, repr=False)

    def add(self, n_bytes: int) -> None:
        with self._lock:
            self.requests += 1
            self.bytes += n_bytes


@dataclass(frozen=True)
class Answer:
    data: bytes
    size: int  # the whole file's, from Content-Range
    etag: str | None


def shown_url(url: str) -> str:
    """A URL for one line of output: its query (a signed URL's credentials) left out."""
    u = urllib.parse.urlsplit(url)
    return clean_name(urllib.parse.urlunsplit((u.scheme, u.netloc.rsplit("@", 1)[-1], u.path, "", "")), 160)


REDIRECTS = (301, 302, 303, 307, 308)
DEFAULT_PORTS = {"http": 80, "https": 443}
# What a server states names the content it serves: a registry's blob (the distribution spec's
# Docker-Content-Digest), the Hub's resolve answer (the commit it resolved, an LFS file's sha256)
DIGEST_HEADERS = ("docker-content-digest", "x-repo-commit", "x-linked-etag")
CREDENTIALS = ("authorization", "cookie", "proxy-authorization")  # never past the origin they were given for


def origin(url: str) -> tuple[str, str, int]:
    """A URL's origin as browsers and huggingface_hub compare it: scheme, host and port (the
    scheme's default where none is written)."""
    u = urllib.parse.urlsplit(url)
    scheme = u.scheme.lower()
    try:
        port = u.port
    except ValueError:
        port = None
    return scheme, (u.hostname or "").lower(), port or DEFAULT_PORTS.get(scheme, 0)


def next_hop(
    url: str, location: str, first: tuple[str, str, int], headers: dict[str, str], where: str
) -> tuple[str, dict[str, str]]:
    """Where a redirect leads, and the headers that may go there (the one home of this policy):
    http(s) only, never from https down to plain http, and credentials only to the exact
    origin (`first`: scheme, host and port) they were given for."""
    nxt = urllib.parse.urljoin(url, location)
    scheme = urllib.parse.urlsplit(nxt).scheme.lower()
    if scheme not in ("http", "https"):
        raise RemoteError(f"{where}: redirected to a non-http(s) URL ({clean_name(location, 60)})")
    if urllib.parse.urlsplit(url).scheme.lower() == "https" and scheme == "http":
        raise RemoteError(f"{where}: redirected from https to plain http ({shown_url(nxt)}); not followed")
    if origin(nxt) != first:
        headers = {k: v for k, v in headers.items() if k.lower() not in CREDENTIALS}
    return nxt, headers


def connect(u: urllib.parse.SplitResult, budget: Budget) -> http.client.HTTPConnection:
    """A connection whose every answer is read within `budget` (ggprof.netio); connecting too
    waits no longer than the budget has left."""
    base = http.client.HTTPSConnection if u.scheme == "https" else http.client.HTTPConnection
    port = u.port or (443 if u.scheme == "https" else 80)
    timeout_s = min(READ_TIMEOUT_S, max(budget.left_s(), 0.001))
    return metered_connection(base, budget)(u.hostname or "", port, timeout=timeout_s)


def late(where: str, deadline: Deadline) -> RemoteError:
    return RemoteError(f"{where}: not read within {deadline.seconds:g} s ({deadline.option}); given up")


def target(u: urllib.parse.SplitResult) -> str:
    return (u.path or "/") + (f"?{u.query}" if u.query else "")


@contextlib.contextmanager
def exchange(conn: http.client.HTTPConnection, budget: Budget, where: str) -> Iterator[None]:
    """One request and its answer: whatever the socket or the protocol raises is one line, and
    the connection is closed however it ends. A connection never made (the network's fault) is a
    NetworkError; what a server that answered did is a RemoteError."""
    try:
        yield
    except RemoteError:
        raise
    except (OSError, http.client.HTTPException, ValueError) as e:
        if not isinstance(conn.sock, MeteredSocket) and (reason := unreached(e)) is not None:
            raise NetworkError(f"{where}: {reason}: {OFFLINE_ADVICE}") from None
        raise RemoteError(f"{where}: {why(e, budget)}") from None
    finally:
        conn.close()


class RangeReader:
    """Range requests to one URL (following its redirects each time: a signed CDN URL expires)."""

    def __init__(
        self,
        url: str,
        headers: dict[str, str] | None = None,
        traffic: Traffic | None = None,
        deadline: Deadline | None = None,
    ) -> None:
        u = urllib.parse.urlsplit(url)
        if u.scheme not in ("http", "https") or not u.hostname:
            raise RemoteError(f"{shown_url(url)}: not an http(s) URL")
        self.url, self.headers = url, dict(headers or {})
        self.traffic = traffic or Traffic()
        self.stated: set[tuple[str, str]] = set()  # what the answers said names the content (DIGEST_HEADERS)
        self.deadline = deadline or Deadline.after(HEADER_TIMEOUT_S, "--header-timeout")
        self._landed: tuple[str, dict[str, str]] | None = None  # where the redirects led, for the next range

    def get(self, start: int, end: int) -> Answer:
        """Bytes [start, end] (inclusive, as HTTP counts) of the file, within the whole deadline."""
        try:
            return self._get(start, end)
        except RemoteError:
            if self.deadline.passed():
                raise late(shown_url(self.url), self.deadline) from None
            raise

    def _get(self, start: int, end: int) -> Answer:
        """The URL the first request's redirects led to is asked directly next (a CDN's signed
        URL lasts longer than one read); should it refuse, the redirects are followed again."""
        if self._landed is not None:
            url, headers = self._landed
            try:
                _, location, answer = self._request(urllib.parse.urlsplit(url), headers, start, end)
                if location is None and answer is not None:
                    return answer
            except RemoteError:
                pass
            self._landed = None
        url, headers = self.url, dict(self.headers)
        first = origin(url)
        for _ in range(MAX_REDIRECTS + 1):
            _, location, answer = self._request(urllib.parse.urlsplit(url), headers, start, end)
            if location is None:
                assert answer is not None
                self._landed = (url, headers)
                return answer
            url, headers = next_hop(url, location, first, headers, shown_url(self.url))
        raise RemoteError(f"{shown_url(self.url)}: more than {MAX_REDIRECTS} redirects")

    def _request(
        self, u: urllib.parse.SplitResult, headers: dict[str, str], start: int, end: int
    ) -> tuple[int, str | None, Answer | None]:
        asked = end - start + 1
        where = shown_url(self.url)
        if self.deadline.passed():
            raise late(where, self.deadline)
        until = min(time.monotonic() + REQUEST_DEADLINE_S, self.deadline.at)
        budget = Budget(until, READ_TIMEOUT_S, asked + MAX_ANSWER_HEADER_BYTES)
        conn = connect(u, budget)
        with exchange(conn, budget, where):
            conn.request(
                "GET", target(u), headers={**headers, "Range": f"bytes={start}-{end}", "Accept-Encoding": "identity"}
            )
            resp = conn.getresponse()
            status = resp.status
            for name in DIGEST_HEADERS:  # a redirect's too: the Hub states them on its resolve answer
                value = resp.getheader(name)
                if value and len(self.stated) < 16:
                    self.stated.add((name, clean_name(value.strip().strip('"'), 100)))
            if status in REDIRECTS:
                location = resp.getheader("Location")
                if not location:
                    raise RemoteError(f"{where}: HTTP {status} without a Location")
                return status, location, None
            if status in (401, 403):
                raise RemoteError(
                    f"{where}: HTTP {status}: it needs a token (HF_TOKEN, `hf auth login`) or "
                    "accepting the model's terms on its page"
                )
            if status == 404:
                raise RemoteError(f"{where}: not found (HTTP 404)")
            if status == 200:
                raise RemoteError(
                    f"{where}: the server ignores range requests (it answered the whole file); nothing more is read"
                )
            if status != 206:
                raise RemoteError(f"{where}: HTTP {status} to a range request")
            m = _CONTENT_RANGE.match(resp.getheader("Content-Range") or "")
            if not m or int(m[1]) != start:
                raise RemoteError(
                    f"{where}: a range answer without the range asked for (Content-Range "
                    f"{clean_name(resp.getheader('Content-Range') or 'missing', 60)!r})"
                )
            size = int(m[3])
            got_end = int(m[2])
            if not start <= got_end < size or size > MAX_FILE_BYTES or got_end > end:
                raise RemoteError(f"{where}: a Content-Range that contradicts itself or the request")
            want = got_end - start + 1
            data = resp.read(want + 1)
        if len(data) != want:
            raise RemoteError(f"{where}: the server sent {len(data):,} bytes for a range of {want:,}")
        self.traffic.add(len(data))
        return status, None, Answer(data, size, resp.getheader("ETag"))


class RemoteFile:
    """What the GGUF reader reads a remote file through: `seek` and `read`, served from the
    ranges fetched so far, each new range twice the last; `max_bytes` bounds them all."""

    def __init__(self, reader: RangeReader, max_bytes: int = MAX_HEADER_BYTES) -> None:
        self.reader, self.max_bytes = reader, max_bytes
        first = reader.get(0, min(FIRST_RANGE_BYTES, max_bytes) - 1)
        self.size, self.etag = first.size, first.etag
        self.data = bytearray(first.data)  # bytes [0, len(data)) of the file
        self.next_bytes = FIRST_RANGE_BYTES * 2
        self.pos = 0
        self.requests = 1

    def seek(self, pos: int) -> None:
        self.pos = pos

    def read(self, n: int) -> bytes:
        """Up to `n` bytes at the position: what is already here first (a short read, as a
        socket's), else one more range, twice the last."""
        end = min(self.pos + n, self.size)
        if self.pos < len(self.data):
            end = min(end, len(self.data))
        while len(self.data) < end:
            if len(self.data) >= self.max_bytes:
                raise RemoteError(
                    f"{shown_url(self.reader.url)}: the header runs past {self.max_bytes:,} bytes "
                    "(--max-header-bytes); not read further"
                )
            if self.requests >= MAX_RANGE_REQUESTS:
                raise RemoteError(
                    f"{shown_url(self.reader.url)}: {self.requests} ranges read {len(self.data):,} bytes and not the "
                    "whole header (a server answering less than asked); not read further"
                )
            want = max(end - len(self.data), self.next_bytes)
            want = min(want, self.size - len(self.data), self.max_bytes - len(self.data))
            self.requests += 1
            got = self.reader.get(len(self.data), len(self.data) + want - 1)
            if got.size != self.size:
                raise RemoteError(f"{shown_url(self.reader.url)}: the file's size changed while it was read")
            self.data += got.data
            self.next_bytes = min(self.next_bytes * 2, MAX_RANGE_BYTES)
        out = bytes(self.data[self.pos : end])
        self.pos = end
        return out


MAX_JSON_BYTES = 1 << 20  # a registry's manifest is a few KB
MAX_JSON_ITEMS = 100_000


def get_json(url: str, headers: dict[str, str] | None = None, deadline: Deadline | None = None) -> Any:
    """A small JSON document (a registry's manifest), following redirects as range requests do,
    bounded by the same whole deadline and a 1 MiB cap (and by `deadline`, a model's)."""
    try:
        return _get_json(url, headers, deadline)
    except RemoteError:
        if deadline is not None and deadline.passed():
            raise late(shown_url(url), deadline) from None
        raise


def _get_json(url: str, headers: dict[str, str] | None, deadline: Deadline | None) -> Any:
    from ggprof.bounded import TooManyItems, loads_bounded

    first = origin(url)
    sent = dict(headers or {})
    where = shown_url(url)
    for _ in range(MAX_REDIRECTS + 1):
        u = urllib.parse.urlsplit(url)
        if u.scheme not in ("http", "https") or not u.hostname:
            raise RemoteError(f"{where}: not an http(s) URL")
        if deadline is not None and deadline.passed():
            raise late(where, deadline)
        until = min(time.monotonic() + REQUEST_DEADLINE_S, deadline.at if deadline else math.inf)
        budget = Budget(until, READ_TIMEOUT_S, MAX_JSON_BYTES + MAX_ANSWER_HEADER_BYTES)
        conn = connect(u, budget)
        with exchange(conn, budget, where):
            conn.request("GET", target(u), headers=sent)
            resp = conn.getresponse()
            if resp.status in REDIRECTS and resp.getheader("Location"):
                url, sent = next_hop(url, resp.getheader("Location") or "", first, sent, where)
                continue
            raw = resp.read(MAX_JSON_BYTES + 1)
        if resp.status == 404:
            raise RemoteError(f"{where}: not found (HTTP 404)")
        if resp.status in (401, 403):
            raise RemoteError(f"{where}: HTTP {resp.status}: it needs credentials")
        if resp.status != 200:
            raise RemoteError(f"{where}: HTTP {resp.status}")
        if len(raw) > MAX_JSON_BYTES:
            raise RemoteError(f"{where}: an answer larger than {MAX_JSON_BYTES >> 20} MiB")
        try:
            return loads_bounded(raw, MAX_JSON_ITEMS)
        except (TooManyItems, ValueError, RecursionError):
            raise RemoteError(f"{where}: not the JSON asked for") from None
    raise RemoteError(f"{where}: more than {MAX_REDIRECTS} redirects")
