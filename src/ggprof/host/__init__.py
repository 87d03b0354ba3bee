"""`ggprof host`: facts from the OS, measured bandwidth and FLOP/s, and devices from plugins."""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from pathlib import Path

from ggprof.backend import Detection, Device
from ggprof.figures import Figure
from ggprof.host import cache
from ggprof.host.facts import HostFacts, gather_facts
from ggprof.host.memory import MemoryConfig, detect_memory
from ggprof.host.stream import BandwidthMeasurement, SgemmMeasurement, measure_bandwidth, measure_sgemm

__all__ = ["HostContext", "HostFacts", "HostReport", "describe_host"]


@dataclass(frozen=True)
class HostContext:
    """What a backend's detect() gets: OS facts, memory modules, and any measurement."""

    facts: HostFacts
    memory: MemoryConfig | None
    bandwidth: BandwidthMeasurement | None
    sgemm: SgemmMeasurement | None


@dataclass(frozen=True)
class HostReport:
    context: HostContext
    measured_at: float | None  # when the bandwidth was measured (now, or cached)
    from_cache: bool
    cache_path: Path
    detections: list[Detection] = field(default_factory=list)

    @property
    def facts(self) -> HostFacts:
        return self.context.facts

    @property
    def devices(self) -> list[Device]:
        return [d for det in self.detections for d in det.devices]

    @property
    def cpu(self) -> Device | None:
        return next((d for d in self.devices if d.backend == "cpu"), None)

    @property
    def theoretical_bandwidth(self) -> Figure | None:
        mem = self.context.memory
        value = mem.theoretical_bandwidth_bytes_per_s if mem else None
        return Figure(value, "os", mem.describe()) if mem and value else None


def describe_host(measure: bool = True, quick: bool = False, refresh: bool = False) -> HostReport:
    """Gather facts; reuse the cached measurement unless `refresh`; measure if none (and `measure`)."""
    from ggprof.plugins import backends

    facts = gather_facts()
    cached = None if refresh else cache.load(facts)
    bandwidth = sgemm = None
    measured_at: float | None = None
    if cached:
        bandwidth, sgemm, measured_at = cached
    elif measure:
        bandwidth = measure_bandwidth(facts.physical_cores, facts.llc_bytes, facts.ram_available_bytes, quick)
        sgemm = measure_sgemm(quick)
        measured_at = time.time()
        cache.save(facts, bandwidth, sgemm)
    context = HostContext(facts, detect_memory(), bandwidth, sgemm)
    detections = [_detect(b.name, b, context) for b in backends().values()]
    return HostReport(context, measured_at, cached is not None, cache.cache_path(facts), detections)


def _detect(name: str, backend: object, context: HostContext) -> Detection:
    """A plugin's detect(); an exception in it means 'not detected', with the reason."""
    try:
        return backend.detect(context)  # type: ignore[attr-defined, no-any-return]
    except Exception as e:  # a plugin's bug must not take `ggprof host` down
        return Detection(name, [], f"detection failed: {type(e).__name__}: {e}")
