"""Opening files named by the user or found in folders: regular files only, bounded reads.

A FIFO, a device or a socket named as a model, a llama-bench result or a profile would
block or stream forever; these helpers refuse anything but a regular file before
reading a byte, and cap how much text is read.
"""

from __future__ import annotations

import contextlib
import os
import stat
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
    except OSError as e:
        raise error(f"{clean_name(p)}: {e.strerror or e}") from None
    try:
        mode = os.fstat(fd).st_mode
        if stat.S_ISDIR(mode):
            raise error(f"{clean_name(p)}: is a directory, not a file")
        if not stat.S_ISREG(mode):
            raise error(f"{clean_name(p)}: not a regular file (a FIFO, device or socket)")
        if hasattr(os, "set_blocking"):
            os.set_blocking(fd, True)
        return os.fdopen(fd, "rb")
    except BaseException:
        with contextlib.suppress(OSError):
            os.close(fd)
        raise


def read_text(path: str | os.PathLike[str], max_bytes: int, error: type[BadInputError] = BadInputError) -> str:
    """The UTF-8 text of a regular file of at most `max_bytes`; `error` (one line) otherwise."""
    with open_regular(path, error) as f:
        data = f.read(max_bytes + 1)
    if len(data) > max_bytes:
        raise error(f"{clean_name(path)}: larger than {max_bytes:,} bytes; not read")
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError:
        raise error(f"{clean_name(path)}: not UTF-8 text") from None
