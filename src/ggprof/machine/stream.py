"""Measured memory bandwidth (STREAM-style read, copy, triad) and achievable sgemm FLOP/s.

One worker thread per usable physical core (HostFacts.usable_cores: the machine's cores,
its affinity set and its cgroup quota) streams its own slice of arrays far larger than the
last-level cache; numpy releases the GIL inside each kernel. The figure reported is the best
repetition (as STREAM does), with the spread of all repetitions.

Timing: every worker stamps its own start and end, and a pass lasts from the earliest start
to the latest end, as STREAM's OpenMP timing does (the clock is read around the parallel
region, whose threads all do the work). A clock read by the main thread after releasing the
workers would start late whenever the scheduler runs the workers first (as many workers as
CPUs: the usual case), and a pass would look far shorter than it was: 59-1,135 GB/s on a
2-vCPU VM whose memory reads 60.

Memory: private anonymous mappings on transparent huge pages where the OS offers them, as a C
program's malloc gets. Python's mmap(-1, n) is a *shared* mapping, backed by shmem, which the
kernel gives huge pages only where shmem_enabled allows (rarely): on 4 KiB pages the read
kernel lost a fifth of its speed to TLB misses (12.5 vs 15.8 GB/s a core on a 2-core Xeon VM).

Read: which numpy reduction reaches memory's speed depends on the CPU and numpy, so two are
kept (measurements.READ_KERNELS), a bitwise-or over the array's 64-bit words and a max over its
doubles, and a short probe (each kernel on the whole team, best of PROBE_PASSES, interleaved)
picks the faster for every read of the measurement. Each reads every byte once, so neither can
report more than memory delivers. Against a compiled OpenMP loop on the same arrays and threads
(benchmarks/bench_bandwidth.py), on a 2-core Xeon VM: on 2026-12-01 the bitwise-or read 0.96x
and the max 0.86x; on 2026-12-04, on an Emerald Rapids VM with numpy 2.4, the bitwise-or alone
0.74x (medians 18.2 against 24.7 GB/s, benchmarks/data/bandwidth-2026-12-04-before.txt) and
the probe's pick, the max, 1.03x (26.7 against 26.0, bandwidth-2026-12-04.txt); with numpy
1.26 on that VM, the bitwise-or 16-17 GB/s and the max 25-27.

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

from ggprof.machine.measurements import READ_KERNELS, BandwidthMeasurement, KernelResult, SgemmMeasurement

MiB = 1 << 20
GiB = 1 << 30
_TRIAD_SCALAR = 3.0
ONE_THREAD_READS = 3  # passes of the read kernel on one worker: the per-CPU figure a team is held to
PROBE_PASSES = 2  # passes of each read kernel with the whole team, after a warm-up one, to pick the faster


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
    """Worker threads that run one kernel over their slices between two barriers, each
    stamping its own start and end. `after_release` runs in the main thread right after the
    start barrier (a test delays it there, as a busy scheduler would)."""

    def __init__(self, threads: int, after_release: Callable[[], None] | None = None) -> None:
        self.threads = threads
        self.start = threading.Barrier(threads + 1)
        self.done = threading.Barrier(threads + 1)
        self.kernel: Callable[[int], None] | None = None
        self.after_release = after_release
        self.starts = [0.0] * threads
        self.ends = [0.0] * threads
        self.errors: list[BaseException] = []
        self.workers = [threading.Thread(target=self._loop, args=(k,), daemon=True) for k in range(threads)]
        for w in self.workers:
            w.start()

    def _loop(self, k: int) -> None:
        while True:
            self.start.wait()
            kernel = self.kernel
            if kernel is None:
                return
            self.starts[k] = time.perf_counter()
            try:
                kernel(k)
            except BaseException as e:  # reported by time(), never a team left waiting at the barrier
                self.errors.append(e)
            self.ends[k] = time.perf_counter()
            self.done.wait()

    def time(self, kernel: Callable[[int], None]) -> float:
        """Seconds from the earliest worker's start to the latest worker's end."""
        self.kernel = kernel
        self.errors.clear()
        self.start.wait()
        if self.after_release is not None:
            self.after_release()
        self.done.wait()
        if self.errors:
            raise self.errors[0]
        return max(max(self.ends) - min(self.starts), 1e-9)

    def close(self) -> None:
        self.kernel = None
        self.start.wait()
        for w in self.workers:
            w.join()


def _bounds(n: int, threads: int) -> list[tuple[int, int]]:
    """Each worker's slice of n elements, cut at 4 KiB (512 doubles) so no page is shared."""
    cuts = [k * n // threads // 512 * 512 for k in range(threads)] + [n]
    return [(cuts[k], cuts[k + 1]) for k in range(threads)]


def _or_words(x: np.ndarray) -> None:
    np.bitwise_or.reduce(x.view(np.int64))


def _max_doubles(x: np.ndarray) -> None:
    np.max(x)


# READ_KERNELS's names, each to its function: every byte of `x` (doubles) read once
_READ_FUNCTIONS: dict[str, Callable[[np.ndarray], None]] = {"or": _or_words, "max": _max_doubles}
assert _READ_FUNCTIONS.keys() == READ_KERNELS.keys()


def fastest_kernel(rates_bytes_per_s: dict[str, float]) -> str:
    """The kernel that read the most (the first named where two tie)."""
    return max(rates_bytes_per_s, key=lambda k: rates_bytes_per_s[k])


def _reads(kernel: str, a: np.ndarray, bounds: list[tuple[int, int]]) -> Callable[[int], None]:
    """Worker k's part of a read pass: the named read kernel over its slice of `a`."""
    fn = _READ_FUNCTIONS[kernel]
    return lambda k: fn(a[bounds[k][0] : bounds[k][1]])


def _probe_read_kernels(team: _Team, bounds: list[tuple[int, int]], a: np.ndarray) -> str:
    """Each read kernel over `a` with the whole team, best of PROBE_PASSES after a warm-up pass,
    the kernels interleaved so a burst of noise hits them alike: the fastest's name."""
    kernels = {name: _reads(name, a, bounds) for name in _READ_FUNCTIONS}
    for k in kernels.values():
        team.time(k)
    rates: dict[str, float] = dict.fromkeys(kernels, 0.0)
    for _ in range(PROBE_PASSES):
        for name, k in kernels.items():
            rates[name] = max(rates[name], a.nbytes / team.time(k))
    return fastest_kernel(rates)


def measure_bandwidth(
    threads: int, llc_bytes: int | None, available_bytes: int, quick: bool = False
) -> BandwidthMeasurement:
    t_begin = time.perf_counter()
    size, notes = array_bytes_for(llc_bytes, available_bytes, quick)
    n = size // 8
    reps = 5 if quick else 10
    bounds = _bounds(n, threads)
    a, b, c = _alloc(n), _alloc(n), _alloc(n)
    team = _Team(threads)
    try:
        team.time(lambda k: _fill(bounds[k], a, b, c))  # first touch in parallel, like the kernels
        read_kernel = _probe_read_kernels(team, bounds, a)  # its passes warm the read up too
        read = _reads(read_kernel, a, bounds)

        def copy(k: int) -> None:
            lo, hi = bounds[k]
            np.copyto(c[lo:hi], a[lo:hi])

        def triad(k: int) -> None:  # c holds q*c (see the module docstring)
            lo, hi = bounds[k]
            np.add(b[lo:hi], c[lo:hi], out=a[lo:hi])

        for kernel in (copy, triad):  # warm-up: thread wake-up, TLB, frequency ramp
            team.time(kernel)
        samples: dict[str, list[float]] = {"read": [], "copy": [], "triad": []}
        for _ in range(reps):  # interleaved, so a burst of noise hits every kernel alike
            samples["read"].append(size / team.time(read))
            samples["copy"].append(2 * size / team.time(copy))
            samples["triad"].append(3 * size / team.time(triad))
    finally:
        team.close()
    one = _one_thread_reads(a, read_kernel) if threads > 1 else KernelResult("read", tuple(samples["read"]))
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
        read_one_thread=one,
        read_kernel=read_kernel,
    )


def _one_thread_reads(a: np.ndarray, kernel: str) -> KernelResult:
    """The read kernel on one worker over the whole array: what a CPU reads alone, the figure a
    team of N can never beat N times over (BandwidthMeasurement.implausible)."""
    read_words = _READ_FUNCTIONS[kernel]
    team = _Team(1)
    try:
        samples = tuple(a.nbytes / team.time(lambda _k: read_words(a)) for _ in range(ONE_THREAD_READS))
    finally:
        team.close()
    return KernelResult("read", samples)


def measure_reads(threads: int, array_bytes: int, reps: int, kernel: str) -> tuple[KernelResult, float]:
    """More repetitions of the read kernel alone, on one array of `array_bytes` (the size and
    the kernel the figure being refined used), and the seconds it took: a third of a full
    measurement's memory."""
    t_begin = time.perf_counter()
    n = array_bytes // 8
    bounds = _bounds(n, threads)
    a = _alloc(n)
    read = _reads(kernel, a, bounds)
    team = _Team(threads)
    try:

        def fill(k: int) -> None:
            lo, hi = bounds[k]
            a[lo:hi] = 1.0

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
    """n doubles in a private anonymous mapping, on transparent huge pages where the OS offers
    them (see the module docstring: a shared one gets 4 KiB pages). Elsewhere: numpy's own."""
    flags = getattr(mmap, "MAP_PRIVATE", None), getattr(mmap, "MAP_ANONYMOUS", None)
    if flags[0] is None or flags[1] is None:
        return np.empty(n)
    buf = mmap.mmap(-1, n * 8, flags=flags[0] | flags[1])
    if hasattr(mmap, "MADV_HUGEPAGE"):
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
