"""The CPU backend: this host's cores and RAM.

Bandwidth, best source first: measured (STREAM-style read kernel), the theoretical
peak of the installed modules (OS-reported, channels inferred), a matching DDR profile.
Peak FLOP/s is derived from the SIMD width (int8 dot products, what llama.cpp's
quantized kernels use) x cores x clock: a ceiling, never a measurement.
"""

from __future__ import annotations

from collections.abc import Callable

from ggprof import hookimpl
from ggprof.backend import Backend, Detection, Device, EfficiencyBand
from ggprof.figures import Figure
from ggprof.host import HostContext
from ggprof.profiles import load_profiles
from ggprof.units import sig3

# int8 multiply-add operations per cycle per core (2 ops per MAC), widest unit first.
INT8_OPS_PER_CYCLE = (
    ("AMX_INT8", 2048),  # one TMUL tile op: 1024 int8 MACs per cycle
    ("AVX512_VNNI", 256),  # 2 ports x 64 MACs (vpdpbusd)
    ("AVX512BW", 256),
    ("I8MM", 256),  # smmla: 2x the dot-product rate
    ("AVX_VNNI", 128),
    ("AVX2", 128),  # 2 ports x 32 MACs (vpmaddubsw)
    ("DOTPROD", 128),  # 4 x 128-bit sdot pipes
    ("NEON", 64),
    ("AVX", 32),
)
BOOST_ALLOWANCE = 1.3  # when only the current clock is known, allow for turbo


class CPUBackend(Backend):
    name = "cpu"
    # The seeds: llama.cpp decode lands near 70% of the bandwidth ceiling on a desktop.
    band = EfficiencyBand(0.55, 0.85, "assumption from the seeds (~70% typical); see docs/calibration.md")

    def detect(self, host: HostContext) -> Detection:
        facts = host.facts
        bandwidth, profile_id = _bandwidth(host)
        device = Device(
            id="cpu",
            name=facts.cpu_model,
            backend="cpu",
            memory_bytes=facts.ram_total_bytes,
            memory_source="os",
            bandwidth=bandwidth,
            peak_flops=peak_int8_flops(facts.simd, facts.physical_cores, facts.freq_max_mhz, facts.freq_current_mhz),
            profile_id=profile_id,
            llc_bytes=facts.llc_bytes,
            memory_available_bytes=facts.ram_available_bytes,
        )
        return Detection(self.name, [device])


def _bandwidth(host: HostContext) -> tuple[Figure | None, str | None]:
    mem = host.memory
    profile_id = None
    if mem and mem.type and mem.speed_mts and mem.channels_inferred == 2:
        candidate = f"{mem.type.lower()}-{mem.speed_mts}-dual"
        profile_id = candidate if candidate in load_profiles() else None
    if host.bandwidth is not None:
        read = host.bandwidth.read
        detail = (
            f"read kernel, {host.bandwidth.threads} threads, {host.bandwidth.array_bytes >> 20} MiB arrays, "
            f"best of {len(read.samples_bytes_per_s)}, spread {read.spread:.0%}"
        )
        return Figure(read.best_bytes_per_s, "measured", detail), profile_id
    if mem and mem.theoretical_bandwidth_bytes_per_s:
        return Figure(mem.theoretical_bandwidth_bytes_per_s, "os", f"theoretical: {mem.describe()}"), profile_id
    if profile_id:
        p = load_profiles()[profile_id]
        return Figure(p.bandwidth_bytes_per_s, "profile", profile_id), profile_id
    return None, None


def peak_int8_flops(
    simd: tuple[str, ...], cores: int, freq_max_mhz: float | None, freq_current_mhz: float | None
) -> Figure | None:
    ops = next((n for flag, n in INT8_OPS_PER_CYCLE if flag in simd), None)
    if ops is None or not (freq_max_mhz or freq_current_mhz):
        return None
    if freq_max_mhz:
        hz, clock = freq_max_mhz * 1e6, f"{sig3(freq_max_mhz / 1000)} GHz max"
    else:
        hz = (freq_current_mhz or 0) * 1e6 * BOOST_ALLOWANCE
        clock = f"{sig3((freq_current_mhz or 0) / 1000)} GHz now x {BOOST_ALLOWANCE} turbo allowance"
    flag = next(f for f, n in INT8_OPS_PER_CYCLE if f in simd)
    return Figure(cores * hz * ops, "derived", f"{cores} cores x {clock} x {ops} int8 ops/cycle ({flag})")


@hookimpl
def register_backends(register: Callable[[Backend], None]) -> None:
    register(CPUBackend())
