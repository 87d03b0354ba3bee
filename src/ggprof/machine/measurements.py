"""What the bandwidth and sgemm kernels measured: plain data (the kernels, and numpy, live
in ggprof.machine.stream and are imported only when something is measured)."""

from __future__ import annotations

from dataclasses import dataclass

# Repetitions of the read kernel disagreeing by more than this ((best - worst) / best) make the
# figure unreliable: measured again when it was cached, else named in the verdict. Honest hosts
# kept in docs/ showed 13% (a 2-core VM), 27% (a 16-core Xeon, calibration-xeon16-cpu-*.jsonl)
# and 46% (the H200's 16-thread host, tests/data/h200/host.json); a busy machine showed 61%.
MAX_BANDWIDTH_SPREAD = 0.50


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

    @property
    def unreliable(self) -> bool:
        """The read kernel's repetitions disagree by more than MAX_BANDWIDTH_SPREAD."""
        return self.read.spread > MAX_BANDWIDTH_SPREAD


@dataclass(frozen=True)
class SgemmMeasurement:
    flops_per_s: float
    n: int
    samples_flops_per_s: tuple[float, ...]
