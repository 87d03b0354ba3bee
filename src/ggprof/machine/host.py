"""This host: facts from the OS, measured bandwidth and FLOP/s, and the devices detectors find.

`describe_host` gathers the facts once; the detectors (backend plugins) are passed in by
the caller, so nothing here knows about the plugin manager.
"""

from __future__ import annotations

import time
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Protocol

from ggprof.figures import Figure
from ggprof.machine import cache
from ggprof.machine.device import Detection, Device
from ggprof.machine.facts import HostFacts, gather_facts
from ggprof.machine.measurements import MAX_BANDWIDTH_SPREAD, REFINE_READS, BandwidthMeasurement, SgemmMeasurement
from ggprof.machine.memory import MemoryConfig, detect_memory
from ggprof.machine.profiles import ProfileDB
from ggprof.machine.tools import tool_notes

__all__ = ["Detector", "HostContext", "HostFacts", "HostReport", "describe_host"]


@dataclass(frozen=True, kw_only=True)
class HostContext:
    """What a detector gets: OS facts, memory modules, any measurement, and the profiles."""

    facts: HostFacts
    memory: MemoryConfig | None
    bandwidth: BandwidthMeasurement | None
    sgemm: SgemmMeasurement | None
    profiles: ProfileDB
    # a measurement that cannot be what memory delivered, and why: never a basis (`bandwidth` is
    # None then), shown by `ggprof host` and named in the warning
    refused_bandwidth: tuple[BandwidthMeasurement, str] | None = None


class Detector(Protocol):
    """Anything that finds the devices of one backend on a host (every Backend plugin is one)."""

    name: str

    def detect(self, host: HostContext) -> Detection: ...


@dataclass(frozen=True, kw_only=True)
class HostReport:
    context: HostContext
    measured_at: float | None  # when the bandwidth was measured (now, or cached)
    from_cache: bool
    cache_path: Path
    detections: list[Detection] = field(default_factory=list)
    warnings: tuple[str, ...] = ()  # for stderr: nothing was lost, but the user should know
    refined_now: bool = False  # a cached figure took more read repetitions in this run

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

    def device_of(self, backend: str) -> Device | None:
        return next((d for d in self.devices if d.backend == backend), None)


def describe_host(
    detectors: Iterable[Detector],
    profiles: ProfileDB,
    *,
    measure: bool = True,
    quick: bool = False,
    refresh: bool = False,
    refine: bool = False,
    facts: HostFacts | None = None,
) -> HostReport:
    """Gather facts; reuse the cached measurement unless `refresh`; measure if none (and `measure`).
    `refine`: a cached figure on few read repetitions takes REFINE_READS more (the main job's
    first run measures quickly; the next ones make the figure firm, a second or so each).
    `facts`: the OS facts when the caller has gathered them already."""
    facts = facts or gather_facts()
    memory = detect_memory()  # its theoretical peak bounds what a measurement may claim
    peak = memory.theoretical_bandwidth_bytes_per_s if memory and memory.names_dram else None
    warnings: list[str] = []
    cached = None if refresh else cache.load(facts)
    if cached and cached[0].unreliable and measure:
        # a noisy figure is never reused quietly: measure again (the new one replaces it)
        warnings.append(
            f"the cached bandwidth measurement's repetitions disagreed by {cached[0].own_spread:.0%} "
            f"(over {MAX_BANDWIDTH_SPREAD:.0%}): measured again"
        )
        cached = None
    elif cached and (why := cached[0].implausible(peak)):
        warnings.append(f"the cached bandwidth measurement cannot be right ({why}): not used")
        cached = None
    bandwidth = sgemm = None
    refused: tuple[BandwidthMeasurement, str] | None = None
    measured_at: float | None = None
    refined_now = False
    if cached:
        bandwidth, sgemm, measured_at = cached
        if refine and measure and bandwidth.needs_refining:
            before = bandwidth
            bandwidth = _refined(facts, bandwidth, sgemm, peak, warnings)
            refined_now = bandwidth is not before
    elif measure:
        # imported here, not at the top: the kernels need numpy (~60 ms), which a command that
        # only reads a cached measurement (or `ggprof --help`) should not pay for
        from ggprof.machine.stream import measure_sgemm

        bandwidth, refused = _measured(facts, quick, peak, warnings)
        sgemm = measure_sgemm(quick)
        measured_at = time.time()
        if bandwidth is not None:
            try:
                cache.save(facts, bandwidth, sgemm)
            except OSError as e:  # the measurement stands; only reusing it later is lost
                warnings.append(
                    f"could not cache the measurement in {cache.cache_path(facts).parent}: {e.strerror or e}"
                )
    if bandwidth is not None and bandwidth.unreliable:
        warnings.append(
            f"the bandwidth measurement is unreliable: its repetitions disagree by {bandwidth.own_spread:.0%} "
            "(another program is using memory?); verdicts that rest on it say so. "
            "`ggprof host --refresh` on a quiet machine measures it again"
        )
    context = HostContext(
        facts=facts, memory=memory, bandwidth=bandwidth, sgemm=sgemm, profiles=profiles, refused_bandwidth=refused
    )
    detections = [_detect(d, context) for d in detectors]
    warnings += tool_notes()  # a vendor tool cut off, or a figure of one out of its physical range
    return HostReport(
        context=context,
        measured_at=measured_at,
        from_cache=cached is not None,
        cache_path=cache.cache_path(facts),
        detections=detections,
        warnings=tuple(warnings),
        refined_now=refined_now,
    )


def _measured(
    facts: HostFacts, quick: bool, peak: float | None, warnings: list[str]
) -> tuple[BandwidthMeasurement | None, tuple[BandwidthMeasurement, str] | None]:
    """A measurement on the usable cores (the figure, or None and the refused one with why): one
    that cannot be what memory delivered is measured again, and refused if it still cannot."""
    from ggprof.machine.stream import measure_bandwidth

    def once() -> BandwidthMeasurement:
        return measure_bandwidth(facts.usable_cores, facts.llc_bytes, facts.ram_available_bytes, quick)

    first = once()
    why = first.implausible(peak)
    if why is None:
        return first, None
    again = once()
    why_again = again.implausible(peak)
    if why_again is None:
        warnings.append(f"the first bandwidth measurement cannot be right ({why}): measured again")
        return again, None
    warnings.append(
        f"the measured bandwidth is refused as a basis: measured twice, {why_again}; "
        "verdicts use the theoretical peak or a profile where one is known (else they cannot judge decode); "
        "pass --bandwidth GB/s or --device ID"
    )
    return None, (again, why_again)


def _refined(
    facts: HostFacts,
    bandwidth: BandwidthMeasurement,
    sgemm: SgemmMeasurement,
    peak: float | None,
    warnings: list[str],
) -> BandwidthMeasurement:
    """The cached figure with more read repetitions, saved; a noisy round, or one that would
    make the figure impossible, is left out."""
    from ggprof.machine.stream import measure_reads

    reads, elapsed_s = measure_reads(bandwidth.threads, bandwidth.array_bytes, REFINE_READS, bandwidth.read_kernel)
    if reads.spread > MAX_BANDWIDTH_SPREAD:
        warnings.append(
            f"refining the cached bandwidth: this round's repetitions disagreed by {reads.spread:.0%}; left out"
        )
        return bandwidth
    refined = bandwidth.refined(reads, elapsed_s)
    if why := refined.implausible(peak):
        warnings.append(f"refining the cached bandwidth: this round cannot be right ({why}); left out")
        return bandwidth
    try:
        cache.save(facts, refined, sgemm)
    except OSError as e:
        warnings.append(
            f"could not cache the refined measurement in {cache.cache_path(facts).parent}: {e.strerror or e}"
        )
    return refined


def _detect(detector: Detector, context: HostContext) -> Detection:
    """A detector's answer; an exception in it means 'not detected', with the reason."""
    try:
        return detector.detect(context)
    except Exception as e:  # a plugin's bug must not take `ggprof host` down
        return Detection(backend=detector.name, reason=f"detection failed: {type(e).__name__}: {e}")
