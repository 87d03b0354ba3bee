"""The CPU backend: this host's cores and RAM.

Bandwidth, best source first: measured (STREAM-style read kernel), the theoretical
peak of the installed modules (OS-reported, channels inferred), a matching DDR profile.
Peak FLOP/s is derived from the SIMD width (int8 dot products, what llama.cpp's
quantized kernels use) x cores x clock: a ceiling, never a measurement.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING

from ggprof import (
    Backend,
    Causes,
    Detection,
    Device,
    Diagnosis,
    EfficiencyBand,
    ExpectedSpeed,
    Figure,
    Finding,
    fmt_bytes,
    fmt_rate,
    hookimpl,
    sig3,
)
from ggprof_backends import _fitted
from ggprof_backends._diagnosis import (
    COLD_CACHE_FRACTION,
    COLD_FIRST_REPETITION,
    NOISY_REPETITIONS_CV,
    SWAP_GROWTH_BYTES,
    THREADS_MIN_GAIN,
    THROTTLED_CLOCK_FRACTION,
)

if TYPE_CHECKING:  # annotations only: importing the plugin stays cheap
    from ggprof import HostContext, JudgeCase, ModelSpec

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
# llama.cpp's CPU prefill as a share of the vector units' int8 peak (AMX's tiles left out: llama.cpp
# uses them only through its repacked AMX buffers), pp512 measured on four CPUs (docs/calibration.md,
# "Prefill on a CPU"): from 1.6% (a 57M-parameter synthetic model) and 2.1% (Gemma 3 270M's K-quants
# without repacking, a busy 2-core Xeon) to 11.7% (Gemma 3 270M repacked on a 2-core EPYC). Four
# machines are too few to call a prompt below it suspicious: an expectation (what `fit` and
# `predict` show), never a verdict's threshold.
PREFILL_SHARE = (0.015, 0.12)


# Parallel efficiency of llama.cpp CPU decode going from the probe's threads to the run's:
# tok/s(N) / (N/p x tok/s(p)), measured 1 -> 2 threads on two machines (docs/calibration.md):
# a 2-core Xeon VM: dense 0.79-1.00, MoE 0.92-1.25; a 2-core AMD EPYC VM: dense 0.64-0.91,
# MoE 0.67-0.89 in a sweep but 0.54 in one profile run (docs/calibration-threads-2026-11-29-epyc.jsonl,
# docs/calibration-run-2026-11-29-epyc.txt; the synthetic router makes MoE noisy); another 2-core EPYC
# VM, 2026-12-02: Gemma 3 270M dense 0.53-0.60 (0.39 in one disturbed round), synthetic small 0.65-0.82
# (docs/calibration-threads-2026-12-02-epyc.jsonl: there 0.60 called honest Gemma runs suspicious).
# The ranges cover all three, with a small margin below the lowest steady measurement.
PARALLEL_EFFICIENCY = {"dense": (0.50, 1.00), "moe": (0.50, 1.35)}


class CPUBackend(Backend):
    name = "cpu"
    # Against a measured streaming bandwidth, llama.cpp CPU decode lands near 70% of the ceiling
    # (local runs: docs/calibration.md; docs/physics.md).
    band = EfficiencyBand(
        low=0.55,
        high=0.85,
        source="~70% of the measured-bandwidth ceiling is typical for llama.cpp CPU decode (docs/physics.md)",
    )
    causes = Causes(
        slow=(
            "compute-bound: on few cores llama.cpp's quantized kernels cannot use all the bandwidth "
            "(`ggprof profile` measures how tok/s scales with threads)",
            "threads: more than the physical cores, on efficiency cores, or fewer than the cores",
            "paging: the model larger than free RAM, or swap in use",
            "a llama.cpp build without AVX2/NEON, or another program competing for the CPU",
        )
    )

    def efficiency_band(self, model: ModelSpec | None, device: Device | None) -> EfficiencyBand:
        """Against a published bandwidth (a profile, a figure given by hand): the band fitted on
        public CPU results, which are fractions of published bandwidth. Against this host's
        measured bandwidth, already what its memory delivers, the band calibrated on measured
        local runs (docs/calibration.md); a measured run is also held to its thread probe."""
        if device is not None and device.bandwidth is not None and device.bandwidth.source == "measured":
            return self.band
        return _fitted.decode_band(self.name, model, device) or self.band

    def prefill_band(self, model: ModelSpec | None, device: Device | None) -> EfficiencyBand | None:
        """The fit on public results where there is one (none yet), else the share of the vector
        units' peak llama.cpp reached on measured local runs: an expectation, not judged."""
        fitted = _fitted.prefill_band(self.name, model, device)
        if fitted is not None or device is None or device.peak_flops is None:
            return fitted
        vector = device.vector_flops or device.peak_flops
        share, (low, high) = vector.value / device.peak_flops.value, PREFILL_SHARE
        return EfficiencyBand(
            low=low * share,
            high=high * share,
            source=f"llama.cpp CPU prefill measured on 4 CPUs: {low:.1%}-{high:.0%} of the vector units' int8 "
            f"peak{' (AMX left out)' if share < 1 else ''}, docs/calibration.md; an expectation, not judged",
            judged=False,
        )

    def compute_roof(self, case: JudgeCase) -> ExpectedSpeed | None:
        return compute_roof(case)

    def diagnose(self, case: JudgeCase) -> Diagnosis:
        causes, checks = cpu_checks(case)
        return Diagnosis(causes=causes, checks=checks)

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
            peak_flops=peak_int8_flops(facts.simd, facts.usable_cores, facts.freq_max_mhz, facts.freq_current_mhz),
            vector_flops=vector_int8_flops(facts.simd, facts.usable_cores, facts.freq_max_mhz, facts.freq_current_mhz),
            profile_id=profile_id,
            llc_bytes=facts.llc_bytes,
            memory_available_bytes=facts.ram_available_bytes,
            notes=(f"measured bandwidth refused: {host.refused_bandwidth[1]}",) if host.refused_bandwidth else (),
        )
        return Detection(backend=self.name, devices=[device])


BACKEND = CPUBackend()


def compute_roof(case: JudgeCase) -> ExpectedSpeed | None:
    """The probe's decode rate scaled to the run's threads by the calibrated parallel efficiency."""
    probe, threads = case.probe, case.run_threads
    if probe is None or not threads or probe.n_threads >= threads:
        return None
    scale = threads / probe.n_threads
    kind = "moe" if case.model.n_experts else "dense"
    lo, hi = PARALLEL_EFFICIENCY[kind]
    how = (
        f"{sig3(probe.tok_s)} tok/s on {probe.n_threads} thread(s) x {sig3(scale)} x {lo:.0%}-{hi:.0%} "
        f"parallel efficiency ({kind})"
    )
    return ExpectedSpeed(low_tok_s=probe.tok_s * scale * lo, high_tok_s=probe.tok_s * scale * hi, basis=how)


def compute_bound_note(case: JudgeCase) -> Finding | None:
    """Name compute-bound decode with its evidence: tok/s still rising with threads, and the
    weights consumed per second below what memory supplies."""
    probe, threads, p, tg = case.probe, case.run_threads, case.prediction, case.measured_tg_tok_s
    if probe is None or p is None or tg is None or p.band is None or not threads:
        return None
    bandwidth_low = p.band.low * p.decode_ceiling_tok_s
    scale = threads / probe.n_threads
    gain = tg / probe.tok_s if probe.tok_s else 0.0
    if tg >= bandwidth_low or gain < 1 + PARALLEL_EFFICIENCY["dense"][0] * (scale - 1):
        return None
    consumed = tg * (p.decode_bytes_per_token + p.kv_bytes_at_depth)
    types = ", ".join(f"{name} {share:.0%}" for name, share in _type_shares(case)[:3])
    share = consumed / p.bandwidth_bytes_per_s
    return Finding(
        severity="plausible",
        code="CPU_COMPUTE_BOUND",
        title=f"decode is compute-bound on {threads} threads, not bandwidth-bound",
        expected=f"memory alone would allow {sig3(p.decode_ceiling_tok_s)} tok/s",
        observed=f"{sig3(tg)} tok/s",
        evidence=(
            f"tok/s still rises with threads: {sig3(probe.tok_s)} on {probe.n_threads}, {sig3(tg)} on "
            f"{threads} (x{gain:.2f} for x{sig3(scale)} threads)",
            f"the kernels consume {fmt_rate(consumed)} of weights and KV, {share:.0%} of the "
            f"{fmt_rate(p.bandwidth_bytes_per_s)} memory supplies",
            f"weights by type: {types}",
        ),
        causes=("few cores for this model's quantized matrix-vector kernels",),
        next_step="more cores (or a GPU) would help; more memory bandwidth would not",
        plugin="cpu",
    )


def _type_shares(case: JudgeCase) -> list[tuple[str, float]]:
    by_type = case.model.bytes_by_type()
    total = sum(by_type.values()) or 1
    return [(name, b / total) for name, b in by_type.items()]


def cpu_checks(case: JudgeCase) -> tuple[tuple[str, ...], tuple[str, ...]]:
    """What the run context says about a slow CPU decode: (causes found, checks made)."""
    ctx = case.context
    if ctx is None:
        return (), ()
    causes: list[str] = []
    checks: list[str] = []
    threads, cores, e_cores = ctx.n_threads or 0, ctx.physical_cores or 0, ctx.efficiency_cores or 0
    if cores:
        checks.append(f"threads {threads} of {cores} physical cores" + (f" ({e_cores} efficiency)" if e_cores else ""))
    elif threads:
        checks.append(f"threads {threads} (the machine's cores not known)")
    usable = ctx.usable_cores
    if usable and cores and usable < cores:
        checks.append(f"{usable} of the {cores} cores usable by this process (limited by {ctx.cores_limited_by})")
    if usable and cores and usable < cores and threads > usable:
        causes.append(
            f"more threads ({threads}) than the {usable} cores this process may use (limited by "
            f"{ctx.cores_limited_by}): threads wait for CPU time"
        )
    elif cores and threads > cores:
        causes.append(f"more threads ({threads}) than physical cores ({cores}): threads contend for cores")
    elif e_cores and threads > cores - e_cores:
        causes.append(f"threads on efficiency cores: {threads} threads, {cores - e_cores} performance cores")
    elif cores and threads < cores - e_cores:
        causes.append(f"only {threads} thread(s) of {cores - e_cores} performance cores were used (-t)")
    swap_grew = (ctx.swap_used_after_bytes or 0) - (ctx.swap_used_before_bytes or 0)
    checks.append(
        f"swap used {fmt_bytes(ctx.swap_used_before_bytes or 0, binary=False)} before, "
        f"{fmt_bytes(ctx.swap_used_after_bytes or 0, binary=False)} after"
    )
    if swap_grew > SWAP_GROWTH_BYTES:
        causes.append(f"swapping: swap use grew by {fmt_bytes(swap_grew, binary=False)} during the run")
    free = ctx.ram_available_before_bytes
    if free is not None and case.model.file_size_bytes > free:
        causes.append(
            f"the model ({fmt_bytes(case.model.file_size_bytes, binary=False)}) is larger than free RAM "
            f"({fmt_bytes(free, binary=False)}): weights are paged from disk"
        )
    if ctx.page_cache_fraction_before is not None:
        checks.append(f"{ctx.page_cache_fraction_before:.0%} of the file was in the page cache before loading")
        samples = case.tg_samples_tok_s
        cold = ctx.page_cache_fraction_before < COLD_CACHE_FRACTION
        if cold and len(samples) >= 2 and samples[0] < COLD_FIRST_REPETITION * min(samples[1:]):
            causes.append(
                f"first-touch mmap: the model was not in the page cache and the first repetition "
                f"({sig3(samples[0])} tok/s vs {sig3(min(samples[1:]))}) paid for reading it from disk"
            )
    if ctx.cpu_freq_max_mhz and ctx.cpu_freq_after_mhz:
        checks.append(f"clock {ctx.cpu_freq_after_mhz:.0f} MHz after the run, {ctx.cpu_freq_max_mhz:.0f} MHz max")
        if ctx.cpu_freq_after_mhz < THROTTLED_CLOCK_FRACTION * ctx.cpu_freq_max_mhz:
            causes.append(
                f"throttling: the clock ran at {ctx.cpu_freq_after_mhz:.0f} of {ctx.cpu_freq_max_mhz:.0f}"
                " MHz (thermal or power limits)"
            )
    simd = set(ctx.simd_compiled)
    if simd and not simd & {"AVX2", "NEON", "AVX512", "SVE"}:
        causes.append("llama.cpp was built without AVX2/NEON kernels: " + (" ".join(sorted(simd)) or "none"))
    if simd:  # an engine that does not report its build's features (llama-bench, a server) says nothing
        checks.append("llama.cpp built with " + " ".join(sorted(simd)))
    # a busy machine is the likeliest cause there is: the shared rules name it first (its share
    # against the cores the threads left free, RunContext.contention); its noise is no other cause
    busy = ctx.contention is not None and ctx.contention.material
    if ctx.cpu_load_during_percent is not None:
        checks.append(f"other processes used {ctx.cpu_load_during_percent:.0f}% of the run's CPUs during the run")
    if case.tg_cv is not None:
        checks.append(f"repetitions vary by {case.tg_cv:.1%} (coefficient of variation)")
        if case.tg_cv > NOISY_REPETITIONS_CV and not busy:
            causes.append(
                f"noisy repetitions (CV {case.tg_cv:.0%} > {NOISY_REPETITIONS_CV:.0%}): something else competed"
            )
    if ctx.governor == "powersave":
        checks.append("CPU governor: powersave")
        causes.append("the powersave governor may hold the clock low (with acpi-cpufreq; intel_pstate is fine)")
    probe = case.probe
    if probe and case.measured_tg_tok_s and threads > probe.n_threads:
        gain = case.measured_tg_tok_s / probe.tok_s
        checks.append(f"{sig3(probe.tok_s)} tok/s on {probe.n_threads} thread(s), x{gain:.2f} on {threads}")
        if gain < THREADS_MIN_GAIN and not busy:  # a busy machine is that other process, named first
            causes.append(
                "more threads did not help, yet memory is far from busy: another process streaming "
                "memory, throttling, or threads pinned to one core"
            )
    return tuple(causes), tuple(checks)


def _bandwidth(host: HostContext) -> tuple[Figure | None, str | None]:
    mem = host.memory
    profile_id = None
    if mem and mem.type and mem.speed_mts and mem.channels_inferred == 2:
        candidate = f"{mem.type.lower()}-{mem.speed_mts}-dual"
        profile_id = candidate if candidate in host.profiles else None
    if host.bandwidth is not None:
        read = host.bandwidth.read
        detail = (
            f"{host.bandwidth.describe_kernel()}, {host.bandwidth.threads} threads, "
            f"{host.bandwidth.array_bytes >> 20} MiB arrays, "
            f"{host.bandwidth.describe_reads()}"
        )
        if host.bandwidth.unreliable:
            detail += " (unreliable)"
        return Figure(read.best_bytes_per_s, "measured", detail, spread=host.bandwidth.own_spread), profile_id
    if mem and mem.theoretical_bandwidth_bytes_per_s:
        return Figure(mem.theoretical_bandwidth_bytes_per_s, "os", f"theoretical: {mem.describe()}"), profile_id
    if profile_id:
        p = host.profiles.get(profile_id)
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


def vector_int8_flops(
    simd: tuple[str, ...], cores: int, freq_max_mhz: float | None, freq_current_mhz: float | None
) -> Figure | None:
    """The peak without AMX's tiles, where AMX sets the peak (None otherwise): what llama.cpp's
    kernels reach outside its repacked AMX buffers."""
    if not any(flag.startswith("AMX") for flag in simd):
        return None
    vector = tuple(flag for flag in simd if not flag.startswith("AMX"))
    return peak_int8_flops(vector, cores, freq_max_mhz, freq_current_mhz)


@hookimpl
def register_backends(register: Callable[[Backend], None]) -> None:
    register(BACKEND)


def oversubscribed_note(case: JudgeCase) -> Finding | None:
    """More threads than physical cores: named whatever the speed (llama.cpp's own advice is
    one thread per physical core), so a user sees the fix even when the run was not slowed."""
    ctx = case.context
    if ctx is None or not ctx.n_threads or not ctx.physical_cores:
        return None
    usable = min(ctx.usable_cores or ctx.physical_cores, ctx.physical_cores)
    if ctx.n_threads <= usable:
        return None
    best = max(min(usable, ctx.physical_cores - (ctx.efficiency_cores or 0)), 1)
    if usable < ctx.physical_cores:
        where = f"{usable} usable cores (limited by {ctx.cores_limited_by}; {ctx.physical_cores} in the machine)"
        cause = f"-t / --threads above the cores this process may use ({ctx.cores_limited_by})"
    else:
        where, cause = f"{ctx.physical_cores} physical cores", "-t / --threads above the physical core count"
    return Finding(
        severity="plausible",
        code="CPU_THREADS_OVERSUBSCRIBED",
        title=f"{ctx.n_threads} threads on {where}: threads contend for cores",
        expected=f"-t {best}",
        observed=f"-t {ctx.n_threads}",
        evidence=(f"threads {ctx.n_threads} of {where}",),
        causes=(cause,),
        next_step=f"run with -t {best}",
        plugin="cpu",
    )


def other_load_note(case: JudgeCase) -> Finding | None:
    """Other processes busy on the run's CPUs while it measured, beyond the cores its threads
    left free: named whatever the speed, since every figure of the run (and its thread probe)
    read less than a quiet machine gives."""
    busy = case.context.contention if case.context is not None else None
    if busy is None or not busy.material:
        return None
    return Finding(
        severity="plausible",
        code="CPU_OTHER_LOAD",
        title=f"the machine was busy: other processes used {busy.others_percent:.0f}% of the run's CPUs while "
        "it measured: its tok/s read low",
        expected=f"at most {busy.limit_percent:.0f}% by other processes ("
        + (
            f"the {busy.left_free} core(s) its {busy.threads} threads left free, and 20% more)"
            if busy.left_free
            else f"its {busy.threads} threads used every core)"
        ),
        observed=f"{busy.others_percent:.0f}% ({busy.others_cpus:.1f} of {busy.cores} cores)",
        evidence=(f"other processes' CPU time over the run on the {busy.cores} cores it may use, its own left out",),
        causes=("another program ran on the same CPUs (llama.cpp's threads wait for it at every step)",),
        next_step=busy.next_step(),
        plugin="cpu",
    )


@hookimpl
def judge(case: JudgeCase) -> list[Finding]:
    """Extra findings on CPU runs: compute-bound decode, oversubscribed threads and other load,
    with evidence."""
    if case.backend != BACKEND.name:
        return []
    notes = (compute_bound_note(case), oversubscribed_note(case), other_load_note(case))
    return [n for n in notes if n is not None]
