"""Measured memory bandwidth (STREAM-style read, copy, triad) and achievable sgemm FLOP/s.

One worker thread per physical core streams its own slice of arrays far larger than
the last-level cache; numpy releases the GIL inside each kernel. The figure reported is
the best repetition (as STREAM does), with the spread of all repetitions.

Triad: STREAM's a = b + q*c moves two read streams and one write stream per element;
its multiply is free next to the memory traffic. numpy cannot fuse the multiply into
the pass (a two-pass a = q*c; a += b measures numpy's passes, not the memory), so q*c is
prepared untimed and the timed pass is a = b + (q*c): exactly the triad's traffic.
"""

from __future__ import annotations

import contextlib
import mmap
import threading
import time
from collections.abc import Callable

import numpy as np

from ggprof.machine.measurements import BandwidthMeasurement, KernelResult, SgemmMeasurement

MiB = 1 << 20
GiB = 1 << 30
_TRIAD_SCALAR = 3.0


def array_bytes_for(llc_bytes: int | None, available_bytes: int, quick: bool) -> tuple[int, list[str]]:
    """Per-array size: at least 4x the LLC, within a time budget and a third of free RAM / 2."""
    notes = []
    want = max(4 * (llc_bytes or 32 * MiB), 256 * MiB)
    cap = (512 * MiB) if quick else (2 * GiB)
    ram_cap = max(available_bytes // 6, 64 * MiB)
    size = min(want, cap, ram_cap)
    if size < want:
        why = "the time budget" if min(cap, ram_cap) == cap else "free RAM"
        llc = f"{(llc_bytes or 0) / MiB:.0f} MiB"
        notes.append(
            f"arrays are {size / MiB:.0f} MiB, under 4x the reported LLC ({llc}), "
            f"limited by {why}; a VM may report its host's whole L3"
        )
    return int(size) // 4096 * 4096, notes


class _Team:
    """Worker threads that run one kernel over their slices between two barriers."""

    def __init__(self, threads: int) -> None:
        self.threads = threads
        self.start = threading.Barrier(threads + 1)
        self.done = threading.Barrier(threads + 1)
        self.kernel: Callable[[int], None] | None = None
        self.workers = [threading.Thread(target=self._loop, args=(k,), daemon=True) for k in range(threads)]
        for w in self.workers:
            w.start()

    def _loop(self, k: int) -> None:
        while True:
            self.start.wait()
            kernel = self.kernel
            if kernel is None:
                return
            kernel(k)
            self.done.wait()

    def time(self, kernel: Callable[[int], None]) -> float:
        self.kernel = kernel
        self.start.wait()
        t0 = time.perf_counter()
        self.done.wait()
        return time.perf_counter() - t0

    def close(self) -> None:
        self.kernel = None
        self.start.wait()
        for w in self.workers:
            w.join()


def measure_bandwidth(
    threads: int, llc_bytes: int | None, available_bytes: int, quick: bool = False
) -> BandwidthMeasurement:
    t_begin = time.perf_counter()
    size, notes = array_bytes_for(llc_bytes, available_bytes, quick)
    n = size // 8
    reps = 5 if quick else 10
    bounds = [(k * n // threads, (k + 1) * n // threads) for k in range(threads)]
    a, b, c = _alloc(n), _alloc(n), _alloc(n)
    team = _Team(threads)
    try:
        team.time(lambda k: _fill(bounds[k], a, b, c))  # first touch in parallel, like the kernels

        def read(k: int) -> None:
            lo, hi = bounds[k]
            a[lo:hi].max()

        def copy(k: int) -> None:
            lo, hi = bounds[k]
            np.copyto(c[lo:hi], a[lo:hi])

        def triad(k: int) -> None:  # c holds q*c (see the module docstring)
            lo, hi = bounds[k]
            np.add(b[lo:hi], c[lo:hi], out=a[lo:hi])

        for kernel in (read, copy, triad):  # warm-up: thread wake-up, TLB, frequency ramp
            team.time(kernel)
        samples: dict[str, list[float]] = {"read": [], "copy": [], "triad": []}
        for _ in range(reps):  # interleaved, so a burst of noise hits every kernel alike
            samples["read"].append(size / team.time(read))
            samples["copy"].append(2 * size / team.time(copy))
            samples["triad"].append(3 * size / team.time(triad))
    finally:
        team.close()
    results = {k: KernelResult(k, tuple(v)) for k, v in samples.items()}
    return BandwidthMeasurement(
        read=results["read"],
        copy=results["copy"],
        triad=results["triad"],
        threads=threads,
        array_bytes=size,
        repetitions=reps,
        elapsed_s=time.perf_counter() - t_begin,
        notes=tuple(notes),
    )


def measure_reads(threads: int, array_bytes: int, reps: int) -> tuple[KernelResult, float]:
    """More repetitions of the read kernel alone, on one array of `array_bytes` (the size the
    figure being refined used), and the seconds it took: a third of a full measurement's memory."""
    t_begin = time.perf_counter()
    n = array_bytes // 8
    bounds = [(k * n // threads, (k + 1) * n // threads) for k in range(threads)]
    a = _alloc(n)
    team = _Team(threads)
    try:

        def fill(k: int) -> None:
            lo, hi = bounds[k]
            a[lo:hi] = 1.0

        def read(k: int) -> None:
            lo, hi = bounds[k]
            a[lo:hi].max()

        team.time(fill)  # first touch in parallel
        team.time(read)  # warm-up
        samples = [array_bytes / team.time(read) for _ in range(reps)]
    finally:
        team.close()
    return KernelResult("read", tuple(samples)), time.perf_counter() - t_begin


def _fill(bound: tuple[int, int], a: np.ndarray, b: np.ndarray, c: np.ndarray) -> None:
    lo, hi = bound
    a[lo:hi] = 1.0
    b[lo:hi] = 2.0
    c[lo:hi] = 0.5 * _TRIAD_SCALAR


def _alloc(n: int) -> np.ndarray:
    """n doubles, on transparent huge pages where the OS offers them (faster first touch)."""
    if not hasattr(mmap, "MADV_HUGEPAGE"):
        return np.empty(n)
    buf = mmap.mmap(-1, n * 8)
    with contextlib.suppress(OSError):
        buf.madvise(mmap.MADV_HUGEPAGE)
    return np.frombuffer(buf, dtype=np.float64)


def measure_sgemm(quick: bool = False) -> SgemmMeasurement:
    """Achievable fp32 FLOP/s of numpy's BLAS (2 n^3 per product), best of several."""
    n = 1024 if quick else 2048
    rng = np.random.default_rng(0)
    x = rng.standard_normal((n, n), dtype=np.float32)
    y = rng.standard_normal((n, n), dtype=np.float32)
    out = np.empty((n, n), dtype=np.float32)
    np.matmul(x, y, out=out)  # warm-up: BLAS thread pool start, page faults
    samples = []
    for _ in range(3 if quick else 5):
        t0 = time.perf_counter()
        np.matmul(x, y, out=out)
        samples.append(2 * n**3 / (time.perf_counter() - t0))
    return SgemmMeasurement(max(samples), n, tuple(samples))
