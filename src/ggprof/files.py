"""Opening files named by the user or found in folders: regular files only, bounded reads.

A FIFO, a device or a socket named as a model, a llama-bench result or a profile would
block or stream forever; these helpers refuse anything but a regular file before
reading a byte, and cap how much text is read.
"""

from __future__ import annotations

import contextlib
import os
import stat
import sys
from pathlib import Path
from typing import BinaryIO

from ggprof.errors import BadInputError
from ggprof.units import clean_name


def open_regular(path: str | os.PathLike[str], error: type[BadInputError] = BadInputError) -> BinaryIO:
    """Open `path` for reading if it is a regular file; `error` (one line) otherwise.

    The open itself does not block (O_NONBLOCK), so a FIFO without a writer is refused
    instead of waiting for one."""
    p = Path(path)
    try:
        fd = os.open(p, os.O_RDONLY | getattr(os, "O_NONBLOCK", 0) | getattr(os, "O_BINARY", 0))
    except FileNotFoundError:
        raise error(f"{clean_name(p)}: no such file") from None
    except IsADirectoryError:
        raise error(f"{clean_name(p)}: is a directory, not a file") from None
    except PermissionError:
        raise error(f"{clean_name(p)}: permission denied") from None
    except OSError as e:  # a socket cannot be opened at all (ENXIO): named as what it is
        with contextlib.suppress(OSError):
            if not stat.S_ISREG(mode := os.stat(p).st_mode):
                raise error(f"{clean_name(p)}: not a regular file ({_kind(mode)})") from None
        raise error(f"{clean_name(p)}: {e.strerror or e}") from None
    try:
        mode = os.fstat(fd).st_mode
        if stat.S_ISDIR(mode):
            raise error(f"{clean_name(p)}: is a directory, not a file")
        if not stat.S_ISREG(mode):
            raise error(f"{clean_name(p)}: not a regular file ({_kind(mode)})")
        if hasattr(os, "set_blocking"):
            os.set_blocking(fd, True)
        return os.fdopen(fd, "rb")
    except BaseException:
        with contextlib.suppress(OSError):
            os.close(fd)
        raise


def _kind(mode: int) -> str:
    if stat.S_ISFIFO(mode):
        return "a FIFO"
    if stat.S_ISSOCK(mode):
        return "a socket"
    if stat.S_ISCHR(mode) or stat.S_ISBLK(mode):
        return "a device"
    return "a FIFO, device or socket"


def read_text(path: str | os.PathLike[str], max_bytes: int, error: type[BadInputError] = BadInputError) -> str:
    """The UTF-8 text of a regular file of at most `max_bytes`; `error` (one line) otherwise."""
    with open_regular(path, error) as f:
        return _text(f.read(max_bytes + 1), max_bytes, clean_name(path), error)


def read_stdin_text(max_bytes: int, name: str = "standard input") -> str:
    """Standard input's UTF-8 text, at most `max_bytes` (no more is read), in chunks: a NUL byte
    (`< /dev/zero`) ends the read at once as no text. BadInputError otherwise."""
    data = bytearray()
    try:
        while len(data) <= max_bytes and (chunk := sys.stdin.buffer.read(min(1 << 20, max_bytes + 1 - len(data)))):
            if b"\0" in chunk:
                raise BadInputError(f"{name}: binary data, not text")
            data += chunk
    except OSError as e:
        raise BadInputError(f"{name}: cannot be read ({clean_name(e.strerror or e, 80)})") from None
    return _text(bytes(data), max_bytes, name, BadInputError)


def _text(data: bytes, max_bytes: int, name: str, error: type[BadInputError]) -> str:
    if len(data) > max_bytes:
        raise error(f"{name}: larger than {max_bytes:,} bytes; not read")
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError:
        raise error(f"{name}: not UTF-8 text") from None


MAX_PATH_BYTES = 4096  # PATH_MAX on Linux
MAX_NAME_BYTES = 255  # a file name's limit on Linux, macOS and Windows


def user_path(text: str, where: str) -> Path:
    """A path the user typed (`~` expanded); BadInputError (one line, naming `where`) for one no
    system can open: longer than PATH_MAX, a part longer than a file name, a NUL, an unknown
    user's home."""
    raw = text.encode("utf-8", "surrogateescape")
    if len(raw) > MAX_PATH_BYTES or any(len(part) > MAX_NAME_BYTES for part in raw.split(b"/")):
        raise BadInputError(f"{where}: a path longer than a file system allows")
    if "\0" in text:
        raise BadInputError(f"{where}: a path with a NUL character in it")
    try:
        return Path(text).expanduser()
    except RuntimeError:  # ~user of a user this machine does not have, or no home at all
        user = clean_name(text.split("/")[0], 40)
        raise BadInputError(f"{where}: the home folder of {user} is not known here") from None


def is_regular(path: Path) -> bool:
    """Whether `path` is a regular file (following links); False, never an error, for a name
    too long for the file system, a NUL in it or a folder that cannot be read."""
    try:
        return path.is_file()
    except (OSError, ValueError):
        return False
