"""Who ends what the measured program leaves behind: ggprof, made its descendants' subreaper
before any command runs (kept apart from ggprof.bench.supervise so that asking costs the
command line no import of psutil or the supervisor)."""

from __future__ import annotations

import ctypes
import sys

PR_SET_CHILD_SUBREAPER = 36  # linux/prctl.h
_adopting = False  # set by adopt_orphans: this process is its descendants' subreaper


def adopt_orphans() -> None:
    """Make this process the subreaper of its descendants (Linux: prctl PR_SET_CHILD_SUBREAPER):
    a process that a program it started leaves behind, even in a session of its own, becomes
    this process's child instead of init's, so it can be found and ended. Only the ggprof
    command itself asks for it (not a program that imports ggprof)."""
    global _adopting
    if not sys.platform.startswith("linux"):
        return
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        _adopting = libc.prctl(PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0) == 0
    except (OSError, AttributeError):
        _adopting = False


def adopting() -> bool:
    """Whether orphans of this process's descendants become its children."""
    return _adopting
