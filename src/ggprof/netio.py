"""Sockets read within a whole deadline and a byte cap: what every HTTP answer ggprof reads
from outside goes through (a server's answers and streams, a remote model's header by range).

http.client reads an answer through the socket's `makefile("rb")`; the connection's socket is
wrapped so that reader counts every byte against the request's cap and bounds every receive by
what is left of its deadline: a drip of one byte a second, endless chunk trailers or a chunk of
size -1 followed by gigabytes end at the deadline or the cap, whatever the per-read timeout.
"""

from __future__ import annotations

import http.client
import io
import socket
import time
from dataclasses import dataclass
from typing import Any

from ggprof.units import clean_name


class DeadlineExceeded(TimeoutError):
    """A request, or a stream, ran past its whole deadline (however the bytes were dripped)."""


class AnswerTooLarge(OSError):
    """A server sent more bytes than the request's cap (headers, framing and body together)."""


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
            super().connect()  # TCP (and TLS for https), bounded by the connection's timeout
            self.sock = MeteredSocket(self.sock, budget)  # type: ignore[has-type, arg-type]

    return Metered


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
