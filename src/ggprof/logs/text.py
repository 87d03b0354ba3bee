"""A pasted log as clean lines: streamed, bounded, with the wrapping people paste around it
(markdown fences and quotes, journal and timestamp prefixes, terminal escapes, mojibake)
taken off. Nothing here trusts the text: every line is cut, every control character dropped.
"""

from __future__ import annotations

import os
import re
import sys
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import BinaryIO

from ggprof.errors import BadInputError
from ggprof.files import open_regular
from ggprof.units import clean, clean_name

# Read at most this much of a log (about 3 s of reading): of a longer file its first and last
# halves (the end holds the latest runs), of standard input its start; the rest is named as not read.
MAX_LOG_BYTES = 16 << 20
MAX_LINE_CHARS = 2000  # a line is cut here (a log line is under 300 characters; a vocabulary dump more)
BINARY_PROBE_BYTES = 8192
_CHUNK = 1 << 20

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
    """The lines of a log and what reading it left out."""

    name: str
    lines: list[Line]
    bytes_read: int
    truncated: bool  # more than MAX_LOG_BYTES: the rest was not read
    cut_lines: int  # lines longer than MAX_LINE_CHARS, cut
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
    """The log at `path` (`-`: standard input), streamed: at most MAX_LOG_BYTES read, lines cut
    at MAX_LINE_CHARS. BadInputError for a binary file or one that cannot be read, and for
    anything but a regular file or standard input (a FIFO, device, socket or folder: refused
    before a byte is read, as --llama-bench refuses it; a FIFO without a writer blocked)."""
    name = "standard input" if path == "-" else clean_name(Path(path).name, 80)
    if path == "-":
        return _read(sys.stdin.buffer, name)
    try:
        with open_regular(path) as f:
            size = os.fstat(f.fileno()).st_size
            if size <= MAX_LOG_BYTES:
                return _read(f, name)
            head = _read(f, name, MAX_LOG_BYTES // 2)
            start = size - MAX_LOG_BYTES // 2
            f.seek(start - 1)
            f.readline()  # the rest of the line the tail starts in
            at = f.tell()
            tail = _read(
                f, name, MAX_LOG_BYTES // 2, probe=False, first_number=head.lines[-1].number + 1 if head.lines else 0
            )
            return LogText(
                name=name,
                lines=head.lines + tail.lines,
                bytes_read=head.bytes_read + tail.bytes_read,
                truncated=True,
                cut_lines=head.cut_lines + tail.cut_lines,
                skipped=(head.bytes_read, at),
            )
    except OSError as e:
        raise BadInputError(f"{clean_name(path)}: cannot be read ({clean_name(e.strerror or e, 80)})") from None


def _read(f: BinaryIO, name: str, limit: int = MAX_LOG_BYTES, probe: bool = True, first_number: int = 0) -> LogText:
    """Lines of `f` up to `limit` bytes; the tail of a long file is numbered from where its head
    stopped (its real line numbers are unknown without reading the middle)."""
    lines: list[Line] = []
    total, number, cut = 0, first_number, 0
    head = probe
    pending = b""
    truncated = False
    for chunk in _chunks(f):
        if head:
            if _looks_binary(chunk[:BINARY_PROBE_BYTES]):
                raise BadInputError(f"{name}: binary data, not a text log")
            head = False
        total += len(chunk)
        if total > limit:
            chunk = chunk[: len(chunk) - (total - limit)]
            total = limit
            truncated = True
        data = pending + chunk
        end = data.rfind(b"\n") + 1
        pending = data[end:]
        if len(pending) > 4 * MAX_LINE_CHARS:  # a line without end: keep its start, drop the rest
            data, pending, end = data[:end] + pending[: 4 * MAX_LINE_CHARS] + b"\n", b"", end + 4 * MAX_LINE_CHARS + 1
            cut += 1
        number, cut = _add(lines, data[:end], number, cut)
        if truncated:
            break
    if pending and not truncated:
        number, cut = _add(lines, pending + b"\n", number, cut)
    return LogText(name=name, lines=lines, bytes_read=total, truncated=truncated, cut_lines=cut)


def _add(lines: list[Line], data: bytes, number: int, cut: int) -> tuple[int, int]:
    """The lines of `data` (whole lines, each ending in a newline) added, numbered from `number`."""
    text = data.decode("utf-8", errors="replace")
    for raw in text.split("\n")[:-1]:
        number += 1
        for piece in raw.split("\r") if "\r" in raw else (raw,):
            if len(piece) > MAX_LINE_CHARS:
                piece, cut = piece[:MAX_LINE_CHARS], cut + 1
            s = normalize(piece)
            if s:
                lines.append(Line(number, s))
    return number, cut


def _chunks(f: BinaryIO) -> Iterator[bytes]:
    while True:
        chunk = f.read(_CHUNK)
        if not chunk:
            return
        yield chunk
