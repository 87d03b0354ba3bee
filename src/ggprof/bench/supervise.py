"""Watching a child process (ggprof's own llama.cpp child and an external llama-bench alike):
started in a process group of its own, what it sends read from a queue until it ends or a
deadline passes, and killed with everything it started."""

from __future__ import annotations

import collections
import contextlib
import os
import queue
import signal
import subprocess
import threading
import time
from collections.abc import Callable, Iterator
from typing import IO, TypeVar

import psutil

from ggprof.bench.orphans import adopting
from ggprof.llamacpp import GENERIC_FAILURE, OFFLOADED, TELLING_FAILURE
from ggprof.units import clean, clean_name

T = TypeVar("T")


def spawn(argv: list[str], *, stdin: int, stderr: int) -> subprocess.Popen[str]:
    """The program in a process group of its own (POSIX), so that a kill takes all it started;
    its output as text, bytes that do not decode replaced (what a program prints is untrusted)."""
    return subprocess.Popen(
        argv, stdin=stdin, stdout=subprocess.PIPE, stderr=stderr, text=True, errors="replace", start_new_session=True
    )


def kill_group(proc: subprocess.Popen[str]) -> None:
    """SIGKILL to the process and its group (Windows, without groups: the process), then reap it."""
    with contextlib.suppress(ProcessLookupError, PermissionError):
        if hasattr(os, "killpg"):
            os.killpg(proc.pid, signal.SIGKILL)
        else:
            proc.kill()
    proc.wait()


def drain(q: queue.Queue[T | None], timeout_s: float | None, on_timeout: Callable[[], Exception]) -> Iterator[T]:
    """The items put on `q` until the None that ends them; `on_timeout()` is raised when
    `timeout_s` (None or 0: no limit) passes first."""
    deadline = time.monotonic() + timeout_s if timeout_s else None
    while True:
        wait = None if deadline is None else max(deadline - time.monotonic(), 0)
        try:
            item = q.get(timeout=wait)
        except queue.Empty:
            raise on_timeout() from None
        if item is None:
            return
        yield item


EXIT_GRACE_S = 2.0  # after the program exits, how long its last lines may take to arrive
DESCENDANTS_EVERY_S = 0.5  # how often the processes it started are noted
MAX_LINE_CHARS = 1 << 20  # a protocol line or a JSONL row is ~1 kB; a longer one is not the program's output
LOG_TAIL_LINES = 60  # stderr lines kept for the error line of a failed run


class Supervised:
    """A llama.cpp program running under ggprof's rules (ggprof's own child and the user's
    llama-bench alike): a process group of its own, its stdout lines in a queue (each at most
    MAX_LINE_CHARS), the tail of its stderr, llama.cpp's "offloaded N/M layers" noted, and on
    a fault one line naming the signal or status and its most telling last words.

    `stdin`: text written to its standard input, then closed (None: no input). `on_stderr`
    sees each stderr line first and answers True for one not worth keeping in the tail (a
    progress line, a repacking notice)."""

    def __init__(
        self,
        argv: list[str],
        *,
        stdin: str | None = None,
        on_stderr: Callable[[str], bool] | None = None,
        max_line_chars: int = MAX_LINE_CHARS,
    ) -> None:
        self.max_line_chars = max_line_chars  # -1: no bound (ggprof's own child, whose rows carry every step)
        stdin_mode = subprocess.PIPE if stdin is not None else subprocess.DEVNULL
        self.proc = spawn(argv, stdin=stdin_mode, stderr=subprocess.PIPE)
        self.lines: queue.Queue[str | None] = queue.Queue()
        self.log: collections.deque[str] = collections.deque(maxlen=LOG_TAIL_LINES)
        self.offloaded: tuple[int, int] | None = None
        self.descendants: dict[int, psutil.Process] = {}
        self.started_at = time.time()  # as psutil's create_time counts
        self._on_stderr = on_stderr
        threading.Thread(target=self._read_stdout, args=(self.proc.stdout,), daemon=True).start()
        self.log_thread = threading.Thread(target=self._read_stderr, args=(self.proc.stderr,), daemon=True)
        self.log_thread.start()
        if stdin is not None:
            assert self.proc.stdin is not None
            with contextlib.suppress(BrokenPipeError):  # a program that died at once: its status says why
                self.proc.stdin.write(stdin)
                self.proc.stdin.close()

    def _read_stdout(self, stream: IO[str] | None) -> None:
        assert stream is not None
        while line := stream.readline(self.max_line_chars):
            self.lines.put(line)
        stream.close()
        self.lines.put(None)

    def _read_stderr(self, stream: IO[str] | None) -> None:
        assert stream is not None
        while line := stream.readline(MAX_LINE_CHARS):
            line = line.rstrip()
            if m := OFFLOADED.search(line):
                self.offloaded = (int(m[1]), int(m[2]))
            if not line or (self._on_stderr is not None and self._on_stderr(line)):
                continue
            self.log.append(clean(line[:500]))
        stream.close()

    def output(self, timeout_s: float | None, on_timeout: Callable[[], Exception]) -> Iterator[str]:
        """Its stdout lines until it closes them, or until it has exited and EXIT_GRACE_S pass
        without a line (a child it left behind may hold its stdout open); `on_timeout()` raised
        at the deadline. Its descendants are noted as it runs, to be ended with it."""
        deadline = time.monotonic() + timeout_s if timeout_s else None
        exited_at: float | None = None
        next_look = 0.0
        while True:
            now = time.monotonic()
            if now >= next_look:
                self._note_descendants()
                next_look = now + DESCENDANTS_EVERY_S
            if exited_at is None and self.proc.poll() is not None:
                exited_at = now
            if exited_at is not None and now - exited_at > EXIT_GRACE_S:
                return
            wait = 0.2
            if deadline is not None:
                if now >= deadline:
                    raise on_timeout()
                wait = min(wait, deadline - now)
            try:
                item = self.lines.get(timeout=wait)
            except queue.Empty:
                continue
            if item is None:
                return
            yield item

    def _note_descendants(self) -> None:
        with contextlib.suppress(psutil.Error):
            for child in psutil.Process(self.proc.pid).children(recursive=True):
                self.descendants[child.pid] = child

    def wait(self) -> int:
        rc = self.proc.wait()
        self.end_descendants()
        return rc

    def kill(self) -> None:
        self._note_descendants()
        kill_group(self.proc)
        self.end_descendants()

    def end_descendants(self) -> None:
        """SIGKILL to every process it started that is still running: those noted as it ran,
        those still in its session (it runs in one of its own), and, where this process adopts
        orphans, its children started since (a child in a session of its own escapes a group
        kill). psutil's Process checks the creation time, so a reused pid is never hit."""
        left = list(self.descendants.values())
        with contextlib.suppress(psutil.Error):
            for p in psutil.process_iter():
                with contextlib.suppress(psutil.Error, OSError):
                    if p.pid != self.proc.pid and os.getsid(p.pid) == self.proc.pid:
                        left.append(p)
            if adopting():
                for p in psutil.Process().children():
                    with contextlib.suppress(psutil.Error):
                        if p.pid != self.proc.pid and p.create_time() >= self.started_at - 1:
                            left.append(p)
        for p in left:
            with contextlib.suppress(psutil.Error):
                if p.is_running():
                    p.kill()
                    p.wait(timeout=5)  # reaped where it is our child (adopted)
        self.descendants.clear()

    def last_words(self) -> str:
        """The most telling line it printed: the one naming what was wrong (an unknown
        architecture, an assert) before a generic "failed to load" line."""
        self.log_thread.join(timeout=2)
        lines = [ln for ln in self.log if ln.strip()]
        errors = [ln for ln in lines if TELLING_FAILURE.search(ln)]
        specific = [ln for ln in errors if not GENERIC_FAILURE.search(ln)]
        return clean_name((specific or errors or lines or ["(nothing)"])[-1], 300)


def ended_by(rc: int) -> str:
    """`killed by SIGSEGV` (with the OOM killer's hint for SIGKILL), or `exited with status 3`."""
    if rc >= 0:
        return f"exited with status {rc}"
    name = signal.Signals(-rc).name if -rc in {s.value for s in signal.Signals} else f"signal {-rc}"
    oom = rc == -getattr(signal, "SIGKILL", 9)
    return f"killed by {name}" + (" (out of memory? the kernel's OOM killer sends SIGKILL)" if oom else "")
