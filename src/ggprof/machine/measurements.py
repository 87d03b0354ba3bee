"""What the bandwidth and sgemm kernels measured: plain data (the kernels, and numpy, live
in ggprof.machine.stream and are imported only when something is measured)."""

from __future__ import annotations

from dataclasses import dataclass


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


@dataclass(frozen=True)
class SgemmMeasurement:
    flops_per_s: float
    n: int
    samples_flops_per_s: tuple[float, ...]
