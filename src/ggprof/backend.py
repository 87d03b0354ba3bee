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

    @property
    def mid(self) -> float:
        return (self.low + self.high) / 2


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
