"""Backend: what a plugin says about one llama.cpp backend (cpu, cuda, metal, vulkan, rocm).

The hook `register_backends(register)` says "here I am"; this class says what it can do:
detect its devices on this host, tell whether a run used it, and give the fraction of
the bandwidth ceiling llama.cpp reaches on it (the efficiency band).
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from ggprof.figures import Figure

if TYPE_CHECKING:
    from ggprof.bench.context import RunContext
    from ggprof.host import HostContext
    from ggprof.judge import Finding, JudgeCase
    from ggprof.model import ModelSpec


@dataclass(frozen=True)
class Device:
    """A memory pool and the compute next to it: a CPU with its RAM, a GPU with its VRAM."""

    id: str
    name: str
    backend: str
    memory_bytes: int | None
    memory_source: str | None
    bandwidth: Figure | None  # bytes/s
    peak_flops: Figure | None  # FLOP/s
    profile_id: str | None = None
    unified_memory: bool = False
    llc_bytes: int | None = None
    memory_available_bytes: int | None = None
    notes: tuple[str, ...] = ()

    @property
    def bandwidth_bytes_per_s(self) -> float | None:
        return self.bandwidth.value if self.bandwidth else None


@dataclass(frozen=True)
class Detection:
    """What one backend found: devices, or the reason it found none."""

    backend: str
    devices: list[Device] = field(default_factory=list)
    reason: str | None = None


@dataclass(frozen=True)
class EfficiencyBand:
    """The fraction of the decode bandwidth ceiling llama.cpp reaches on a backend."""

    low: float
    high: float
    source: str


class Backend(ABC):
    """One llama.cpp backend as a plugin sees it."""

    name: str = ""
    # Fraction of the bandwidth ceiling llama.cpp decode reaches; see the plugin's docstring.
    band: EfficiencyBand = EfficiencyBand(0.5, 0.9, "assumption")

    @abstractmethod
    def detect(self, host: HostContext) -> Detection:
        """Devices of this backend on this host; a missing or broken tool means none, never a crash."""

    def used_by(self, run: RunContext) -> bool:
        """Whether a measured run used this backend for its layers."""
        return self.name in run.backends_used

    def efficiency_band(self, model: ModelSpec | None, device: Device | None) -> EfficiencyBand:
        return self.band

    # -- judging (the rules every backend shares live in ggprof.rules) -------------------------
    def judge(self, case: JudgeCase) -> list[Finding]:
        """Findings for a run on this backend: fit, decode and prefill against their ceilings."""
        from ggprof import rules
        from ggprof.judge import Finding

        if case.prediction is None:
            return [Finding("unknown", "NO_BANDWIDTH", "no bandwidth is known for the device: decode cannot be "
                            "judged", next_step="run `ggprof host`, or pass --device ID or --bandwidth GB/s",
                            plugin=self.name)]  # fmt: skip
        return rules.fit_findings(self, case) + rules.decode_findings(self, case) + rules.prefill_findings(self, case)

    def expected_tok_s(self, case: JudgeCase) -> tuple[float | None, float | None, str]:
        """The decode band for this case: the efficiency band times the bandwidth ceiling."""
        p = case.prediction
        if p is None:
            return None, None, "no bandwidth known"
        band = self.efficiency_band(case.model, p.device)
        ceiling = p.decode_ceiling_tok_s
        return band.low * ceiling, band.high * ceiling, f"{band.low:.0%}-{band.high:.0%} of the bandwidth ceiling"

    def fits_in_cache(self, case: JudgeCase) -> bool:
        """Whether a token's bytes fit in the last-level cache (then DRAM is not the limit)."""
        return False

    def impossible_causes(self, case: JudgeCase) -> tuple[str, ...]:
        from ggprof.rules import IMPOSSIBLE_CAUSES

        return IMPOSSIBLE_CAUSES

    def suspect_causes(self, case: JudgeCase) -> tuple[tuple[str, ...], tuple[str, ...]]:
        """(causes found in the run context, most likely first; the checks made, as evidence)."""
        return (), ()

    def generic_slow_causes(self, case: JudgeCase) -> tuple[str, ...]:
        return (
            "another program was using the device or its memory",
            "power or thermal limits lowered the clock",
            "part of the model ran elsewhere (partial offload, paging from disk)",
        )

    def slow_next_step(self, case: JudgeCase) -> str:
        return "run `ggprof profile` on the machine: it records the run's context and checks these causes"

    def notes(self, case: JudgeCase) -> list[Finding]:
        """Plausible findings that explain a number (e.g. compute-bound rather than bandwidth-bound)."""
        return []
