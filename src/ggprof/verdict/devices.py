"""The rules for a model over several GPUs (ggprof.physics.devices): what each memory and each
exchange costs a token, and the causes its placement can show by itself (a GPU given more than
it holds, an unbalanced -ts, a split that synchronises often over its link)."""

from __future__ import annotations

from ggprof.physics.roofline import Prediction
from ggprof.units import fmt_bytes, fmt_rate

# A split's exchanges are named as a cause of a slow run when they take this share of its floor
SYNC_SHARE = 0.2


def devices_evidence(p: Prediction) -> tuple[str, ...]:
    """Each memory's term and each exchange, with the sources of its figures."""
    split = p.devices
    if split is None:
        return ()
    return tuple(line.removeprefix("devices: ") for line in p.rules if line.startswith("devices: "))


def placement_evidence(p: Prediction) -> tuple[str, ...]:
    """How the placement was known where the run did not give it (derived as llama.cpp's --fit
    would choose it); then, one GPU with part of the model in RAM (-ngl, -ncmoe, -cmoe, -ot
    ...=CPU, -nkvo): each memory's part of a token, its bandwidth and source, and their sum, the
    time a token takes at least."""
    return (*derived_placement(p), *_parts_evidence(p))


def derived_placement(p: Prediction) -> tuple[str, ...]:
    """The placement judged, where the run did not give it and ggprof derived it (--fit's)."""
    return tuple(r for r in p.rules if r.startswith("placement: ") and "derived" in r)


def _parts_evidence(p: Prediction) -> tuple[str, ...]:
    place, cpu = p.placement, p.cpu
    if p.devices is not None or p.split is not None or not p.device.is_discrete_gpu or cpu is None:
        return ()
    kv_in_ram = p.inputs.no_kv_offload
    on_gpu = place.gpu_decode_bytes + (0 if kv_in_ram else p.kv_bytes_at_depth)
    in_ram = place.cpu_decode_bytes + (p.kv_bytes_at_depth if kv_in_ram else 0)
    gpu_bw, cpu_bw = p.device.bandwidth_bytes_per_s, cpu.bandwidth_bytes_per_s
    if in_ram <= 0 or not gpu_bw or not cpu_bw:
        return ()
    what = [
        f"the experts of -ncmoe {p.inputs.n_cpu_moe}" if place.experts_in_ram_decode_bytes else "",
        "the tensors -ot puts in a CPU buffer" if place.overridden_in_ram_decode_bytes else "",
        "the KV cache (-nkvo)" if kv_in_ram and p.kv_bytes_at_depth else "",
    ]
    named = ", ".join(w for w in what if w) or f"the {len(place.gpu_layers)} layers' rest not offloaded"
    gpu_s, cpu_s = on_gpu / gpu_bw, in_ram / cpu_bw
    sources = (
        p.device.bandwidth.describe() if p.device.bandwidth else "unknown",
        cpu.bandwidth.describe() if cpu.bandwidth else "unknown",
    )
    return (
        f"placement: on {p.device.id} {fmt_bytes(on_gpu, binary=False)} a token at {fmt_rate(gpu_bw)} "
        f"[{sources[0]}] = {gpu_s * 1e3:.3g} ms",
        f"placement: in RAM ({named}) {fmt_bytes(in_ram, binary=False)} a token at {fmt_rate(cpu_bw)} "
        f"[{sources[1]}] = {cpu_s * 1e3:.3g} ms",
        f"placement: a token takes {(gpu_s + cpu_s) * 1e3:.3g} ms at least, the sum (the GPU waits for the CPU's part)",
    )


def devices_causes(p: Prediction) -> tuple[str, ...]:
    """What the placement itself says of a slow run, the likeliest first."""
    split = p.devices
    if split is None:
        return ()
    causes = [*overfull(p)]
    if (unbalanced := split.unbalanced()) is not None:
        now, balanced = unbalanced
        causes.append(
            f"an unbalanced split ({split.shares_source}): the slowest GPU reads its share of the split matrices in "
            f"{now * 1e3:.3g} ms a token, against {balanced * 1e3:.3g} ms with shares in proportion to each GPU's "
            "bandwidth"
        )
    sync = split.sync_s()
    if split.floor_s and sync / split.floor_s >= SYNC_SHARE:
        what = "; ".join(f"{s.what} ({s.count} transfers)" for s in split.syncs)
        causes.append(
            f"-sm {split.mode} synchronises the GPUs often: {what}, {sync * 1e3:.3g} ms of the "
            f"{split.floor_s * 1e3:.3g} ms floor on a PCIe 4.0 x16 link, more over a slower one (PCIe 3.0, x4 or x1 "
            "risers, through the CPU without peer access); -sm layer hands over once between GPUs"
        )
    return tuple(causes)


def overfull(p: Prediction) -> tuple[str, ...]:
    """Each GPU the split gives more than its memory holds."""
    split = p.devices
    if split is None:
        return ()
    return tuple(
        f"{m.pool} is given {fmt_bytes(m.required_bytes, binary=False)} ({split.shares_source}), more than its "
        f"{fmt_bytes(m.total_bytes or 0, binary=False)}: llama.cpp cannot load this split, so the run was placed "
        "otherwise (weights spilled to system memory by the driver, fewer layers offloaded, another -ts)"
        for m in p.memory
        if m.verdict == "does_not_fit" and not m.pool.startswith("CPU")
    )
