"""Running vendor and OS tools (nvidia-smi, sysctl, vulkaninfo ...): never raises, never hangs."""

from __future__ import annotations

import contextlib
import math
import os
import selectors
import signal
import subprocess
import time

from ggprof.errors import BadInputError

TOOL_TIMEOUT_ENV = "GGPROF_TOOL_TIMEOUT_S"
DEFAULT_TOOL_TIMEOUT_S = 5.0
MAX_TOOL_TIMEOUT_S = 600.0


def tool_timeout_cap_s() -> float | None:
    """GGPROF_TOOL_TIMEOUT_S as seconds (None when unset); BadInputError naming it otherwise."""
    raw = os.environ.get(TOOL_TIMEOUT_ENV)
    if raw is None or not raw.strip():
        return None
    try:
        value = float(raw)
    except ValueError:
        value = math.nan
    if not (math.isfinite(value) and 0 < value <= MAX_TOOL_TIMEOUT_S):
        shown = raw[:40].encode("ascii", "replace").decode()
        raise BadInputError(
            f"{TOOL_TIMEOUT_ENV}={shown!r}: must be seconds, a number above 0 and at most {MAX_TOOL_TIMEOUT_S:g}"
        )
    return value


MAX_TOOL_OUTPUT_BYTES = 8 << 20  # what one tool may print: nvidia-smi's or vulkaninfo's answer is kilobytes
CHILD_GRACE_S = 0.2  # after the tool exits, how long a child still holding its output is waited for
_notes: list[str] = []  # what happened to tools this command ran: cut off, ended at their deadline


def tool_notes() -> list[str]:
    """What happened to the tools run since the last call (cut off, ended at the deadline, a
    figure out of its physical range), each naming its tool; the list is emptied."""
    out = list(dict.fromkeys(_notes))
    _notes.clear()
    return out


def note(text: str) -> None:
    """A tool's figure dropped, or the tool cut off: said once in the command's output."""
    if len(_notes) < 100:
        _notes.append(text)


def run_tool(args: list[str], timeout_s: float | None = None) -> str | None:
    """Run a vendor or OS tool; None when it is missing, fails, hangs or prints too much (never
    raises, never waits past its deadline, never keeps more than MAX_TOOL_OUTPUT_BYTES).

    The tool runs in a session (process group) of its own, read as it prints within one whole
    deadline (GGPROF_TOOL_TIMEOUT_S caps it; default 5 s, or the caller's); when it has exited,
    or at its deadline or its cap, the whole group is ended, so a child it left holding its
    output neither delays the answer nor outlives it. Each cut is a note naming the tool.
    """
    try:
        cap = tool_timeout_cap_s()
    except BadInputError:
        cap = None  # the CLI refuses a bad value before anything runs; a library caller gets the default
    timeout = cap or timeout_s or DEFAULT_TOOL_TIMEOUT_S
    name = os.path.basename(args[0]) if args else "?"
    try:
        proc = subprocess.Popen(
            args, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, start_new_session=True
        )
    except (OSError, ValueError):
        return None
    try:
        out, why = _read(proc, timeout)
    finally:
        _end_group(proc)
    if why:
        note(f"{name}: {why}")
        return None
    return out.decode("utf-8", "replace") if proc.returncode == 0 else None


def _read(proc: subprocess.Popen[bytes], timeout_s: float) -> tuple[bytes, str | None]:
    """The tool's output until it ends (EOF, or its exit plus a short grace for a child holding
    the pipe), its deadline or its cap; and why it was cut (None: it was not)."""
    assert proc.stdout is not None
    deadline = time.monotonic() + timeout_s
    fd = proc.stdout.fileno()
    os.set_blocking(fd, False)
    chunks: list[bytes] = []
    size = 0
    exited_at: float | None = None
    with selectors.DefaultSelector() as sel:
        sel.register(fd, selectors.EVENT_READ)
        while True:
            now = time.monotonic()
            if now >= deadline:
                return b"", f"no answer within {timeout_s:g} s; ended"
            if exited_at is None and proc.poll() is not None:
                exited_at = now
            if exited_at is not None and now - exited_at > CHILD_GRACE_S:
                break  # exited; what a child of it still holds open is not its answer
            wait = min(deadline - now, 0.05 if exited_at is not None else 0.5)
            if not sel.select(wait):
                continue
            try:
                chunk = os.read(fd, 1 << 16)
            except BlockingIOError:
                continue
            except OSError:
                break
            if not chunk:
                break
            size += len(chunk)
            if size > MAX_TOOL_OUTPUT_BYTES:
                return b"", f"printed more than {MAX_TOOL_OUTPUT_BYTES >> 20} MiB; cut off, not read"
            chunks.append(chunk)
    if proc.poll() is None:
        try:
            proc.wait(max(0.0, min(deadline - time.monotonic(), CHILD_GRACE_S)))
        except subprocess.TimeoutExpired:
            return b"", "closed its output but did not exit; ended"
    return b"".join(chunks), None


def _end_group(proc: subprocess.Popen[bytes]) -> None:
    """The tool and everything in its session: ended, and the tool reaped."""
    with contextlib.suppress(ProcessLookupError, PermissionError, OSError):
        os.killpg(proc.pid, signal.SIGKILL)
    with contextlib.suppress(OSError, ValueError):
        if proc.stdout is not None:
            proc.stdout.close()
    with contextlib.suppress(subprocess.TimeoutExpired):
        proc.wait(5)
