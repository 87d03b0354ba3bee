"""`ggprof host` and `ggprof profiles`: JSON objects and human text."""

from __future__ import annotations

import time
from typing import Any

from ggprof.figures import Figure
from ggprof.machine.cpus import cpu_list
from ggprof.machine.device import Device
from ggprof.machine.facts import HostFacts
from ggprof.machine.host import HostReport
from ggprof.machine.measurements import KernelResult
from ggprof.machine.profiles import Profile
from ggprof.paths import cache_dir, config_dir
from ggprof.units import clean, clean_name, fmt_bytes, fmt_rate, sig3


def device_dict(d: Device) -> dict[str, Any]:
    return {
        "id": d.id,
        "name": d.name,
        "backend": d.backend,
        "memory_bytes": d.memory_bytes,
        "memory_source": d.memory_source,
        "memory_available_bytes": d.memory_available_bytes,
        "bandwidth_bytes_per_s": d.bandwidth.value if d.bandwidth else None,
        "bandwidth_source": d.bandwidth.source if d.bandwidth else None,
        "bandwidth_detail": d.bandwidth.detail if d.bandwidth else None,
        "peak_flops_per_s": d.peak_flops.value if d.peak_flops else None,
        "peak_flops_source": d.peak_flops.describe() if d.peak_flops else None,
        "profile_id": d.profile_id,
        "unified_memory": d.unified_memory,
        "notes": list(d.notes),
    }


def host_dict(r: HostReport) -> dict[str, Any]:
    f, ctx = r.facts, r.context
    bw, sg = ctx.bandwidth, ctx.sgemm
    theo = r.theoretical_bandwidth
    cpu = r.cpu
    return {
        "cpu_model": f.cpu_model,
        "cpu_vendor": f.cpu_vendor,
        "machine": f.machine,
        "os": f.os,
        "physical_cores": f.physical_cores,
        "logical_cores": f.logical_cores,
        "performance_cores": f.performance_cores,
        "efficiency_cores": f.efficiency_cores,
        "usable_cores": f.usable_cores,
        "usable_cores_limited_by": f.cpus.limited_by if f.cpus else "physical cores",
        "cpu_affinity": list(f.cpus.affinity) if f.cpus and f.cpus.affinity is not None else None,
        "cpu_affinity_cores": f.cpus.affinity_cores if f.cpus else None,
        "cpu_quota_cpus": f.cpus.quota_cpus if f.cpus else None,
        "cpu_quota_source": f.cpus.quota_source if f.cpus else None,
        "default_threads": f.default_threads,
        "freq_max_mhz": f.freq_max_mhz,
        "freq_current_mhz": f.freq_current_mhz,
        "l2_bytes": f.l2_bytes,
        "l3_bytes": f.l3_bytes,
        "llc_bytes": f.llc_bytes,
        "simd": list(f.simd),
        "numa_nodes": f.numa_nodes,
        "governor": f.governor,
        "ram_total_bytes": f.ram_total_bytes,
        "ram_available_bytes": f.ram_available_bytes,
        "swap_total_bytes": f.swap_total_bytes,
        "swap_used_bytes": f.swap_used_bytes,
        "memory_modules": [vars(m) for m in ctx.memory.modules] if ctx.memory else [],
        "memory_type": ctx.memory.type if ctx.memory else None,
        "memory_speed_mts": ctx.memory.speed_mts if ctx.memory else None,
        "measured_read_bandwidth_bytes_per_s": bw.read.best_bytes_per_s if bw else None,
        "measured_copy_bandwidth_bytes_per_s": bw.copy.best_bytes_per_s if bw else None,
        "measured_triad_bandwidth_bytes_per_s": bw.triad.best_bytes_per_s if bw else None,
        "measured_bandwidth_spread": {k.name: k.spread for k in (bw.read, bw.copy, bw.triad)} if bw else None,
        "measured_read_kernel": bw.read_kernel if bw else None,
        "measured_read_one_thread_bytes_per_s": bw.read_one_thread.best_bytes_per_s
        if bw and bw.read_one_thread
        else None,
        "refused_bandwidth": {
            "read_bytes_per_s": ctx.refused_bandwidth[0].read.best_bytes_per_s,
            "threads": ctx.refused_bandwidth[0].threads,
            "why": ctx.refused_bandwidth[1],
        }
        if ctx.refused_bandwidth
        else None,
        "measured_bandwidth_method": _method(r) if bw else None,
        "measured_sgemm_flops_per_s": sg.flops_per_s if sg else None,
        "measured_sgemm_method": f"numpy BLAS sgemm n={sg.n}, best of {len(sg.samples_flops_per_s)}" if sg else None,
        "measured_at": r.measured_at,
        "measurement_from_cache": r.from_cache,
        "theoretical_bandwidth_bytes_per_s": theo.value if theo else None,
        "theoretical_bandwidth_source": theo.detail
        if theo
        else "unknown: no memory module speeds readable without root (udevadm, SMBIOS, system_profiler or CIM)",
        "profile_id": cpu.profile_id if cpu else None,
        "devices": [device_dict(d) for d in r.devices],
        "backends": [
            {"backend": det.backend, "detected": bool(det.devices), "reason": det.reason} for det in r.detections
        ],
        "cache_path": str(r.cache_path),
        "cache_dir": str(cache_dir()),
        "config_dir": str(config_dir()),
    }


def _method(r: HostReport) -> str:
    bw = r.context.bandwidth
    assert bw is not None
    return (
        f"STREAM-style kernels, {bw.threads} threads, each pass timed from the first worker's start to the "
        f"last one's end, {bw.array_bytes >> 20} MiB arrays, {bw.describe_kernel()}, {bw.describe_reads()}"
        + (f"; {'; '.join(bw.notes)}" if bw.notes else "")
    )


def host_text(r: HostReport) -> str:
    f, ctx = r.facts, r.context
    cores = f"{f.physical_cores} physical / {f.logical_cores} logical cores"
    if f.performance_cores is not None:
        cores += f" ({f.performance_cores} P + {f.efficiency_cores} E)"
    caches = ", ".join(f"{n} {fmt_bytes(b, binary=False)}" for n, b in (("L2", f.l2_bytes), ("L3", f.l3_bytes)) if b)
    lines = [
        f"{clean(f.cpu_model)}  ({f.machine}, {clean(f.os)})"[:80],
        _row("cores", cores + (f", {sig3(f.freq_max_mhz / 1000)} GHz max" if f.freq_max_mhz else "")),
        *_wrapped("usable", _usable(f)),
        _row("caches", caches or "not reported"),
        *_wrapped("SIMD", " ".join(f.simd) or "none reported"),
        _row(
            "RAM",
            f"{fmt_bytes(f.ram_total_bytes)} total, {fmt_bytes(f.ram_available_bytes)} available, "
            f"swap used {fmt_bytes(f.swap_used_bytes, binary=False)}",
        ),
    ]
    if ctx.memory:
        lines.append(_row("modules", clean(ctx.memory.describe())))
    bw = ctx.bandwidth
    if bw:
        when = (
            "cached " + time.strftime("%Y-%m-%d %H:%M", time.localtime(r.measured_at))
            if r.from_cache
            else f"measured now in {bw.elapsed_s:.1f} s"
        )
        lines.append(_row("bandwidth", f"read {_k(bw.read)}, copy {_k(bw.copy)}, triad {_k(bw.triad)}"))
        one = (
            f", one thread reads {sig3(bw.read_one_thread.best_bytes_per_s / 1e9)} GB/s"
            if bw.read_one_thread and bw.threads > 1
            else ""
        )
        lines.extend(
            _wrapped(
                "",
                f"({when}; {bw.threads} threads, each pass timed by its workers, {bw.array_bytes >> 20} MiB "
                f"arrays, {bw.describe_kernel()}, {bw.describe_reads()}{one})",
            )
        )
    elif ctx.refused_bandwidth:
        refused, why = ctx.refused_bandwidth
        lines.extend(
            _wrapped(
                "bandwidth",
                f"refused as a basis: {clean(why)} (measured twice, {refused.threads} threads)",
            )
        )
    else:
        lines.append(_row("bandwidth", "not measured (run `ggprof host` without --no-measure)"))
    if ctx.sgemm:
        lines.append(
            _row("sgemm", f"{sig3(ctx.sgemm.flops_per_s / 1e9)} GFLOP/s measured (numpy BLAS fp32, n={ctx.sgemm.n})")
        )
    theo = r.theoretical_bandwidth
    lines.append(
        _row(
            "theoretical",
            f"{fmt_rate(theo.value)} ({theo.source})" if theo else "unknown (modules not readable without root)",
        )
    )
    lines.append("devices")
    for d in r.devices:
        lines.extend(_device_lines(d))
    for det in r.detections:
        if not det.devices:
            lines.append(f"  {clean_name(det.backend, 20):<8} not detected: {clean(det.reason or 'no device')}"[:80])
    return "\n".join(lines)


def _usable(f: HostFacts) -> str:
    """`2 of 16 physical cores (limited by cgroup quota: 2 CPUs ...); llama.cpp -t 2`."""
    if f.cpus is None:
        return f"{f.usable_cores} physical cores; -t {f.default_threads} by default"
    c = f.cpus
    affinity = f"affinity {cpu_list(c.affinity)}" if c.affinity is not None else "affinity not reported"
    quota = f"quota {c.quota_cpus:g} CPUs ({clean(c.quota_source or '')})" if c.quota_cpus else "no CPU quota"
    return (
        f"{f.usable_cores} of {f.physical_cores} physical cores, limited by {c.limited_by} ({affinity}; {quota}); "
        f"bandwidth threads {f.usable_cores}, -t {f.default_threads} by default"
    )


def _k(k: KernelResult) -> str:
    return f"{sig3(k.best_bytes_per_s / 1e9)} GB/s (+-{k.spread:.0%})"


def _fig_lines(label: str, fig: Figure | None, unit: str, scale: float) -> list[str]:
    import textwrap

    if fig is None:
        return [f"{'':11}{label:<10}unknown"]
    head = f"{'':11}{label:<10}{sig3(fig.value / scale)} {unit}"
    rest = textwrap.wrap(clean(fig.describe()), 80 - 23)
    return [head] + [f"{'':23}{line}" for line in rest]


def _device_lines(d: Device) -> list[str]:
    mem = fmt_bytes(d.memory_bytes) if d.memory_bytes else "memory unknown"
    profile = f", profile {d.profile_id}" if d.profile_id else ""
    lines = [
        f"  {clean_name(d.id, 20):<8} {clean(d.name)} ({clean_name(d.backend, 20)}{profile})"[:80],
        f"{'':11}{'memory':<10}{mem}",
    ]
    lines += _fig_lines("bandwidth", d.bandwidth, "GB/s", 1e9)
    lines += _fig_lines("peak", d.peak_flops, "TFLOP/s", 1e12)
    lines.extend(f"{'':11}note: {clean(n)}"[:80] for n in d.notes)
    return lines


def _row(label: str, text: str) -> str:
    return f"  {label:<12}{text}"


def _wrapped(label: str, text: str, width: int = 80) -> list[str]:
    import textwrap

    chunks = textwrap.wrap(text, width - 14) or [""]
    return [_row(label if i == 0 else "", chunk) for i, chunk in enumerate(chunks)]


def profile_dict(p: Profile) -> dict[str, Any]:
    return {
        "id": p.id,
        "name": p.name,
        "kind": p.kind,
        "backends": list(p.backends),
        "memory_bandwidth_gbs": p.memory_bandwidth_gbs,
        "memory_gb": p.memory_gb,
        "peak_fp16_tflops": p.peak_fp16_tflops,
        "peak_fp32_tflops": p.peak_fp32_tflops,
        "peak_int8_tops": p.peak_int8_tops,
        "peak_flops_per_s": p.peak_flops,  # the highest dense peak: the prefill ceiling's
        "vector_flops_per_s": p.vector_flops,  # the vector units' (twice FP32): a build without matrix cores
        "gpu_cores": p.gpu_cores,
        "architecture": p.architecture,
        "vendor": p.vendor,
        "device_class": p.device_class,  # what the speed fits group by beyond the architecture
        "aliases": list(p.aliases),
        "source": p.source,
        "sources": p.sources,
        "notes": p.notes,
        "path": str(p.path) if p.path else None,
    }


def profiles_text(profiles: list[Profile]) -> str:
    lines = [f"{'id':<18} {'kind':<10} {'GB/s':>7} {'GB':>6} {'TFLOP/s':>8}  name"]
    for p in profiles:
        mem = f"{p.memory_gb:g}" if p.memory_gb else "-"
        peak = sig3(p.peak_flops / 1e12) if p.peak_flops else "-"
        lines.append(f"{p.id:<18} {p.kind:<10} {p.memory_bandwidth_gbs:>7g} {mem:>6} {peak:>8}  {clean(p.name)}")
    lines.append("GB/s: theoretical memory bandwidth (GB = 1e9 bytes); TFLOP/s: dense peak; sources: --json")
    return "\n".join(lines)
