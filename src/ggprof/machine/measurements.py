"""What the bandwidth and sgemm kernels measured: plain data (the kernels, and numpy, live
in ggprof.machine.stream and are imported only when something is measured)."""

from __future__ import annotations

from dataclasses import dataclass, replace

# Repetitions of the read kernel disagreeing by more than this ((best - worst) / best) make the
# figure unreliable: measured again when it was cached, else named in the verdict. Honest hosts
# kept in docs/ showed 13% (a 2-core VM), 27% (a 16-core Xeon, calibration-xeon16-cpu-*.jsonl)
# and 46% (the H200's 16-thread host, tests/data/h200/host.json); a busy machine showed 61%.
MAX_BANDWIDTH_SPREAD = 0.50
# A cached figure resting on fewer read repetitions than this is refined by the next runs that
# measure (each adds REFINE_READS): a best-of figure only rises with more tries at a quiet
# moment. On a 2-core VM the first quick measurement (best of 5) read 18.7 GB/s and a full one
# 24.1 GB/s a minute later: one burst of noise costs a quick figure a quarter of its value.
REFINED_READS = 15
REFINE_READS = 5
# A team of N workers reads at most N times what one worker reads alone (each core's loads,
# prefetchers and line fill buffers are its own; memory is shared): more than this margin over
# N x the one-worker figure is a timing fault, not memory (the main thread's clock once made
# 2 workers read 851 GB/s on a VM whose memory reads 60-80). Memory is shared, so honest teams
# scale below N: 2 workers read 1.86x one on a 2-core Xeon VM (33.9 vs 18.2 GB/s).
MAX_SCALING_MARGIN = 1.5
# A read above the theoretical peak of the installed modules (MT/s x 8 B x channels) by more than
# this is no DRAM figure: the channels are inferred from the populated modules (an overestimate
# where two modules share a channel), so the margin only absorbs rounding and the clock.
MAX_ABOVE_THEORETICAL = 1.10
# The read kernels (ggprof.machine.stream runs them): each reads every byte of the array once,
# so each gives a floor under what memory delivers, and which reaches memory's speed depends on
# the CPU and numpy. A measurement probes them all and reads with the fastest.
READ_KERNELS = {
    "or": "bitwise-or over 64-bit words",
    "max": "max over doubles",
}


@dataclass(frozen=True)
class KernelResult:
    """One kernel's repetitions, in bytes/s (bytes counted as STREAM counts them)."""

    name: str
    samples_bytes_per_s: tuple[float, ...]

    @property
    def best_bytes_per_s(self) -> float:
        return max(self.samples_bytes_per_s)

    @property
    def spread(self) -> float:
        """(best - worst) / best: how much the repetitions disagreed."""
        best = self.best_bytes_per_s
        return (best - min(self.samples_bytes_per_s)) / best if best else 0.0


@dataclass(frozen=True, kw_only=True)
class BandwidthMeasurement:
    read: KernelResult
    copy: KernelResult
    triad: KernelResult
    threads: int
    array_bytes: int
    repetitions: int
    elapsed_s: float
    notes: tuple[str, ...] = ()
    sessions: int = 1  # runs whose read repetitions it holds (refined: more than one)
    read_one_thread: KernelResult | None = None  # the read kernel on one worker, same arrays
    read_kernel: str = "or"  # which of READ_KERNELS read (the fastest of the probe)

    def describe_kernel(self) -> str:
        """`read by a max over doubles (the faster of 2 kernels tried)`."""
        return f"read by a {READ_KERNELS[self.read_kernel]} (the faster of {len(READ_KERNELS)} kernels tried)"

    def implausible(self, theoretical_bytes_per_s: float | None = None) -> str | None:
        """Why this read figure cannot be what memory delivered, or None: above the theoretical
        peak of the modules, or far above what the same kernel reads on one worker times the
        workers. The reason names both figures."""
        best = self.read.best_bytes_per_s
        if theoretical_bytes_per_s and best > theoretical_bytes_per_s * MAX_ABOVE_THEORETICAL:
            return (
                f"read {best / 1e9:.3g} GB/s is above the installed memory's theoretical peak "
                f"({theoretical_bytes_per_s / 1e9:.3g} GB/s)"
            )
        one = self.read_one_thread
        if one is not None and self.threads > 1:
            bound = one.best_bytes_per_s * self.threads * MAX_SCALING_MARGIN
            if best > bound:
                return (
                    f"read {best / 1e9:.3g} GB/s on {self.threads} threads is over {MAX_SCALING_MARGIN:g}x "
                    f"{self.threads} times what the same kernel reads on one ({one.best_bytes_per_s / 1e9:.3g} GB/s)"
                )
        return None

    @property
    def needs_refining(self) -> bool:
        return len(self.read.samples_bytes_per_s) < REFINED_READS

    def refined(self, reads: KernelResult, elapsed_s: float) -> BandwidthMeasurement:
        """This figure with another run's read repetitions (same threads and arrays) added."""
        merged = KernelResult("read", self.read.samples_bytes_per_s + reads.samples_bytes_per_s)
        return replace(
            self,
            read=merged,
            repetitions=len(merged.samples_bytes_per_s),
            elapsed_s=self.elapsed_s + elapsed_s,
            sessions=self.sessions + 1,
        )

    def describe_reads(self) -> str:
        """`best of 5, spread 23%`; refined: `best of 15 over 3 runs, spread 28% (23% in the first)`."""
        n = len(self.read.samples_bytes_per_s)
        if self.sessions == 1:
            return f"best of {n}, spread {self.read.spread:.0%}"
        return (
            f"best of {n} over {self.sessions} runs, spread {self.read.spread:.0%} ({self.own_spread:.0%} in the first)"
        )

    @property
    def own_spread(self) -> float:
        """How much the first run's read repetitions disagreed: what makes the figure unreliable.
        A refining round that disagreed by over MAX_BANDWIDTH_SPREAD is never merged; rounds that
        each agreed may still differ from one another (a busy minute between runs), which only
        raises the best."""
        return KernelResult("read", self.first_run_reads).spread

    @property
    def first_run_reads(self) -> tuple[float, ...]:
        """The read repetitions of the first run (each refining round added REFINE_READS)."""
        n = len(self.read.samples_bytes_per_s) - REFINE_READS * (self.sessions - 1)
        return self.read.samples_bytes_per_s[: max(n, 0)]

    @property
    def unreliable(self) -> bool:
        return self.own_spread > MAX_BANDWIDTH_SPREAD


@dataclass(frozen=True)
class SgemmMeasurement:
    flops_per_s: float
    n: int
    samples_flops_per_s: tuple[float, ...]
