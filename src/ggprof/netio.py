"""Sockets read within a whole deadline and a byte cap: what every HTTP answer ggprof reads
from outside goes through (a server's answers and streams, a remote model's header by range).

http.client reads an answer through the socket's `makefile("rb")`; the connection's socket is
wrapped so that reader counts every byte against the request's cap and bounds every receive by
what is left of its deadline: a drip of one byte a second, endless chunk trailers or a chunk of
size -1 followed by gigabytes end at the deadline or the cap, whatever the per-read timeout.
"""

from __future__ import annotations

import errno
import http.client
import io
import select
import socket
import ssl
import time
from dataclasses import dataclass
from typing import Any

from ggprof.units import clean_name


class DeadlineExceeded(TimeoutError):
    """A request, or a stream, ran past its whole deadline (however the bytes were dripped)."""


class AnswerTooLarge(OSError):
    """A server sent more bytes than the request's cap (headers, framing and body together)."""


@dataclass(frozen=True)
class Deadline:
    """A whole deadline over many requests (a remote model's header: its every range, redirect
    and shard), and what sets it, named when it passes."""

    at: float  # time.monotonic()
    seconds: float
    option: str

    @classmethod
    def after(cls, seconds: float, option: str) -> Deadline:
        return cls(time.monotonic() + seconds, seconds, option)

    def left_s(self) -> float:
        return self.at - time.monotonic()

    def passed(self) -> bool:
        return self.left_s() <= 0.05


@dataclass
class Budget:
    """What one request may still take: a whole deadline (monotonic), each read's own timeout,
    and the bytes it may receive in all."""

    deadline: float
    read_timeout_s: float
    max_bytes: int
    received: int = 0

    def left_s(self) -> float:
        return self.deadline - time.monotonic()


class MeteredReader(socket.SocketIO):
    """The socket as http.client reads it: every receive bounded by the whole deadline and
    counted against the byte cap, so a drip of one byte a second, endless chunk trailers or a
    chunk of size -1 followed by gigabytes end at the deadline or the cap. (A SocketIO, as
    socket.makefile makes: the socket stays open until its reader is closed too.)"""

    def __init__(self, sock: socket.socket, budget: Budget) -> None:
        super().__init__(sock, "rb")
        self._metered, self._budget = sock, budget

    def readinto(self, buffer: Any) -> int:
        b = self._budget
        left = b.left_s()
        if left <= 0:
            raise DeadlineExceeded("deadline")
        self._metered.settimeout(min(b.read_timeout_s, left))
        try:
            n = self._metered.recv_into(buffer)
        except TimeoutError:
            if b.left_s() <= 0.05:
                raise DeadlineExceeded("deadline") from None
            raise
        b.received += n
        if b.received > b.max_bytes:
            raise AnswerTooLarge("cap")
        return n


class MeteredSocket:
    """A connected socket whose `makefile` (how http.client reads an answer) is metered."""

    def __init__(self, sock: socket.socket, budget: Budget) -> None:
        self._sock, self._budget = sock, budget

    def makefile(self, mode: str = "rb", *args: Any, **kwargs: Any) -> Any:
        """The answer's reader (http.client reads through makefile("rb") only), counted as
        socket.makefile counts its readers."""
        reader = MeteredReader(self._sock, self._budget)
        self._sock._io_refs += 1  # type: ignore[attr-defined]
        return io.BufferedReader(reader, 64 << 10)

    def __getattr__(self, name: str) -> Any:
        return getattr(self._sock, name)


def metered_connection(base: type[http.client.HTTPConnection], budget: Budget) -> type[http.client.HTTPConnection]:
    class Metered(base):  # type: ignore[valid-type, misc]
        def connect(self) -> None:
            if isinstance(self, http.client.HTTPSConnection):
                http.client.HTTPConnection.connect(self)  # TCP, bounded by the connection's timeout
                sock: Any = _tls(self, budget)
            else:
                super().connect()
                sock = self.sock  # type: ignore[has-type]
            self.sock = MeteredSocket(sock, budget)

    return Metered


def _tls(conn: Any, budget: Budget) -> ssl.SSLSocket:
    """`conn`'s connected socket in TLS, as HTTPSConnection.connect wraps it, its handshake bounded."""
    host = conn._tunnel_host or conn.host
    tls: ssl.SSLSocket = conn._context.wrap_socket(conn.sock, server_hostname=host, do_handshake_on_connect=False)
    handshake(tls, budget)
    return tls


def handshake(sock: ssl.SSLSocket, budget: Budget) -> None:
    """A TLS handshake within what is left of `budget`'s deadline: each blocking step of a
    handshake waits its own timeout, so a server dripping its certificate a byte a second would
    hold it far past any deadline; each step here waits only what is left."""
    sock.setblocking(False)
    while True:
        try:
            sock.do_handshake()
            break
        except ssl.SSLWantReadError:
            ready = select.select([sock], [], [], max(budget.left_s(), 0))[0]
        except ssl.SSLWantWriteError:
            ready = select.select([], [sock], [], max(budget.left_s(), 0))[1]
        if not ready and budget.left_s() <= 0:
            raise DeadlineExceeded("deadline")
    sock.settimeout(min(budget.read_timeout_s, max(budget.left_s(), 0.001)))


# What to do when no network reaches a remote model: the one line a network failure ends with
OFFLINE_ADVICE = (
    "check the network or proxy, or give a local path (or HF_HUB_OFFLINE=1 to use a header ggprof has cached)"
)
_UNREACHABLE = (errno.ENETUNREACH, errno.EHOSTUNREACH, errno.ENETDOWN, errno.EHOSTDOWN)


def unreached(e: BaseException) -> str | None:
    """Why a connection could not be made where the network, not a server that answered, is at
    fault (the host's name does not resolve, nothing listens, the connection is reset or times
    out, no route, the TLS handshake fails); None for anything else (a whole deadline a server
    drips past, a host name that is no name)."""
    if isinstance(e, DeadlineExceeded):
        return None
    if isinstance(e, socket.gaierror):
        return "the host name does not resolve (DNS)"
    if isinstance(e, ConnectionRefusedError):
        return "connection refused (nothing listens there)"
    if isinstance(e, (ConnectionResetError, ConnectionAbortedError)):
        return "the connection was reset"
    if isinstance(e, ssl.SSLCertVerificationError):
        return clean_name(f"TLS failed: {e.verify_message or e.reason or 'the certificate is not trusted'}", 120)
    if isinstance(e, ssl.SSLError):
        return clean_name(f"TLS failed: {e.reason or e}", 120)
    if isinstance(e, (socket.timeout, TimeoutError)):
        return "the host did not answer (timed out connecting)"
    if isinstance(e, OSError) and e.errno in _UNREACHABLE:
        return "no route to the host (the network is unreachable)"
    return None


def why(e: BaseException, budget: Budget | None = None) -> str:
    late = budget is not None and isinstance(e, TimeoutError) and budget.left_s() <= 0.05
    if isinstance(e, DeadlineExceeded) or late:
        return "no whole answer in time (the request's deadline passed)"
    if isinstance(e, AnswerTooLarge):
        return f"sent more than {budget.max_bytes >> 20 if budget else 0} MiB; the rest not read"
    if isinstance(e, UnicodeError):
        return "a host name that cannot be looked up"
    if isinstance(e, (socket.timeout, TimeoutError)):
        return "no answer in time (timed out)"
    if isinstance(e, ConnectionRefusedError):
        return "connection refused (nothing listens there)"
    return clean_name(f"{type(e).__name__}: {e}", 160)
