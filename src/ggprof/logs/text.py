"""A pasted log as clean lines: streamed, bounded, with the wrapping people paste around it
(markdown fences and quotes, journal and timestamp prefixes, terminal escapes, mojibake)
taken off. Nothing here trusts the text: every line is cut, every control character dropped.
"""

from __future__ import annotations

import os
import re
import sys
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import BinaryIO

from ggprof.errors import BadInputError
from ggprof.files import open_regular
from ggprof.units import clean, clean_name

# Read at most this much of a log: of a longer file its first and last halves (the end holds the
# latest runs), of standard input its start; the rest is named as not read. Each line read costs
# about 2 us however short it is, so lines are capped too: 16 MiB of 3-byte lines would be 5.6
# million of them (15 s); a real log's 16 MiB is about 170,000 lines of 100 bytes.
MAX_LOG_BYTES = 16 << 20
MAX_LOG_LINES = 1_000_000
MAX_LINE_CHARS = 2000  # a line is cut here (a log line is under 300 characters; a vocabulary dump more)
BINARY_PROBE_BYTES = 8192
_CHUNK = 1 << 20
_LONG_LINE_BYTES = 4 * MAX_LINE_CHARS + 4  # a cut line's start: over MAX_LINE_CHARS characters of any width

# Wrapping around each line, taken off in order: a journal (`May 24 22:58:23 host ollama[1391]: `),
# llama-server's own timestamps (`12.46.239.704 I `, `0.00.123.456 W `), a markdown quote.
_JOURNAL = re.compile(r"^[A-Z][a-z]{2} +\d{1,2} \d\d:\d\d:\d\d +(?:[^\s:]+ +)?[\w.@-]+(?:\[\d*\])?: ")
_LOCALAI = re.compile(r"^\d{1,2}:\d\d[AP]M \w+ GRPC\([^)]{0,300}\): (?:stderr|stdout) ")
_EPOCH = re.compile(r"^\[\d{10}\] ")  # llama.cpp's old server log: `[1711291193] system info: ...`
_SERVER_STAMP = re.compile(r"^\d+\.\d\d\.\d\d\d\.\d\d\d [DIWE] ")
_ESCAPES = re.compile(r"\x1b\[[0-9;?]*[ -/]*[@-~]|\x1b\][^\x07\x1b]*(?:\x07|\x1b\\)|\x1b[@-Z\\-_]")
# UTF-8 read as Latin-1 or cp1252 and written back: the characters llama.cpp prints (±, µ, ×).
_MOJIBAKE = {"Â±": "±", "Âµ": "µ", "Ã—": "×", "Â ": " ", "â€™": "'", "â€œ": '"', "â€\x9d": '"'}


@dataclass(frozen=True)
class Line:
    number: int  # 1-based, in the file as given
    text: str


@dataclass
class LogText:
    """A log's lines, streamed once (`lines` are read as they are asked for, never all kept), and
    what reading left out, counted as they are read."""

    name: str
    lines: Iterator[Line] = field(default_factory=lambda: iter(()))
    bytes_read: int = 0
    lines_read: int = 0  # lines of the file read, blank ones too
    truncated: bool = False  # past MAX_LOG_BYTES or MAX_LOG_LINES: the rest was not read
    line_cap: bool = False  # the reading stopped at MAX_LOG_LINES (else at MAX_LOG_BYTES)
    cut_lines: int = 0  # lines longer than MAX_LINE_CHARS, cut
    skipped: tuple[int, int] | None = None  # the byte range of a long file left unread (its middle)


def normalize(raw: str) -> str:
    """One line without its wrapping: escapes, prefixes, fences and quotes, mojibake, controls."""
    s = _ESCAPES.sub("", raw) if "\x1b" in raw else raw
    if "Â" in s or "â€" in s or "Ã" in s:
        for bad, good in _MOJIBAKE.items():
            s = s.replace(bad, good)
    s = s.replace("\t", "    ")
    s = clean(s).strip()  # indentation carries nothing a log line is read by
    if not s:
        return s
    while s.startswith(">"):  # a markdown or e-mail quote
        s = s[1:].removeprefix(" ")
    if s.startswith("`") or s.endswith("`"):  # markdown: inline code, or a fence's own line
        s = (
            s.strip("`").removeprefix("console").removeprefix("shell").removeprefix("bash").strip()
            if s.startswith("```")
            else s.strip("`")
        )
    if s[:1].isupper() and (m := _JOURNAL.match(s)):
        s = s[m.end() :]
    if s[:1] == "[" and (m := _EPOCH.match(s)):
        s = s[m.end() :]
    if s[:1].isdigit():
        for prefix in (_LOCALAI, _SERVER_STAMP):
            m = prefix.match(s)
            if m:
                s = s[m.end() :]
    return s


def _looks_binary(head: bytes) -> bool:
    if b"\x00" in head:
        return True
    if not head:
        return False
    controls = sum(1 for b in head if b < 9 or (13 < b < 32 and b != 27))
    return controls > len(head) // 20


def read_log(path: str) -> LogText:
    """The log at `path` (`-`: standard input), opened now, streamed as its `lines` are read: at
    most MAX_LOG_BYTES and MAX_LOG_LINES, each line cut at MAX_LINE_CHARS. BadInputError (one
    line) for anything but a regular file or standard input (a FIFO, device, socket or folder,
    before a byte is read), and while its lines are read, for binary data or a failing read."""
    if path == "-":
        log = LogText(name="standard input")
        log.lines = _Reader(sys.stdin.buffer, log).stream(None)
        return log
    f = open_regular(path)
    log = LogText(name=clean_name(Path(path).name, 80))
    log.lines = _Reader(f, log).stream(os.fstat(f.fileno()).st_size)
    return log


class _Reader:
    """One pass over a log's bytes, in chunks: whole lines decoded and cleaned, numbered as the
    file counts them (the tail of a long file from where its head stopped: its real numbers are
    unknown without reading the middle)."""

    def __init__(self, f: BinaryIO, log: LogText) -> None:
        self.f, self.log = f, log
        self.number = 0

    def stream(self, size: int | None) -> Iterator[Line]:
        """All of a file up to MAX_LOG_BYTES, else its first and last halves; standard input's start."""
        log = self.log
        try:
            with self.f:
                if size is None or size <= MAX_LOG_BYTES:
                    yield from self.lines(MAX_LOG_BYTES, MAX_LOG_LINES)
                    return
                yield from self.lines(MAX_LOG_BYTES // 2, MAX_LOG_LINES // 2)
                head = log.bytes_read
                at = self.next_line_start(size - MAX_LOG_BYTES // 2)
                log.skipped, log.truncated = (head, at), True
                if at < size:
                    self.f.seek(at)
                    yield from self.lines(MAX_LOG_BYTES // 2, MAX_LOG_LINES // 2, probe=False)
        except OSError as e:
            raise BadInputError(f"{log.name}: cannot be read ({clean_name(e.strerror or e, 80)})") from None

    def next_line_start(self, start: int) -> int:
        """Where the first line at or after `start` starts (the file's end where none does): looked
        for a chunk at a time, never a whole line read at once (a 64 MiB line took 64 MiB)."""
        self.f.seek(start - 1)
        at = start - 1
        while chunk := self.f.read(_CHUNK):
            newline = chunk.find(b"\n")
            if newline >= 0:
                return at + newline + 1
            at += len(chunk)
        return at

    def lines(self, max_bytes: int, max_lines: int, probe: bool = True) -> Iterator[Line]:
        """Lines up to `max_bytes` and `max_lines`. A line without end is cut: its first
        MAX_LINE_CHARS characters kept, the rest skipped up to its newline."""
        log = self.log
        total, left, capped = 0, max_lines, False
        pending = b""
        dropping = False  # inside a line already cut: its bytes are skipped up to its newline
        while left and not capped and (chunk := self.f.read(_CHUNK)):
            if probe:
                if _looks_binary(chunk[:BINARY_PROBE_BYTES]):
                    raise BadInputError(f"{log.name}: binary data, not a text log")
                probe = False
            if total + len(chunk) > max_bytes:
                chunk, capped = chunk[: max_bytes - total], True
            total += len(chunk)
            log.bytes_read += len(chunk)
            if dropping:
                newline = chunk.find(b"\n")
                if newline < 0:
                    continue
                chunk, dropping = chunk[newline + 1 :], False
            data = pending + chunk
            end = data.rfind(b"\n") + 1
            pending = data[end:]
            if len(pending) > _LONG_LINE_BYTES:  # its start, over MAX_LINE_CHARS characters, as a line
                data, end = data[:end] + pending[:_LONG_LINE_BYTES] + b"\n", end + _LONG_LINE_BYTES + 1
                pending, dropping = b"", True
            if data.count(b"\n", 0, end) > left:  # the line cap falls in this chunk: the rest unread
                cut = _after_newlines(data, left)
                log.bytes_read -= len(data) - cut
                end, pending, capped = cut, b"", True
                log.line_cap = True
            left -= data.count(b"\n", 0, end)
            yield from self.decoded(data[:end])
        if capped:
            log.truncated = True
        elif pending and left:
            yield from self.decoded(pending + b"\n")
        elif not left and (pending or self.more()):
            log.truncated = log.line_cap = True

    def more(self) -> bool:
        """Whether bytes are left after the line cap (standard input: taken to have more, as
        asking would wait for its writer)."""
        try:
            return (self.f.seekable() and self.f.tell() < os.fstat(self.f.fileno()).st_size) or not self.f.seekable()
        except (OSError, ValueError):
            return True

    def decoded(self, data: bytes) -> Iterator[Line]:
        """The lines of `data` (whole lines, each ending in a newline), cut and cleaned."""
        log = self.log
        for raw in data.decode("utf-8", errors="replace").split("\n")[:-1]:
            self.number += 1
            log.lines_read += 1
            for piece in raw.split("\r") if "\r" in raw else (raw,):
                if len(piece) > MAX_LINE_CHARS:
                    piece = piece[:MAX_LINE_CHARS]
                    log.cut_lines += 1
                s = normalize(piece)
                if s:
                    yield Line(self.number, s)


def _after_newlines(data: bytes, n: int) -> int:
    """The offset just past the `n`-th newline of `data` (it has more than `n`)."""
    at = -1
    for _ in range(n):
        at = data.find(b"\n", at + 1)
    return at + 1
