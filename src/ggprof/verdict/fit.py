"""Whether the model fits its GPU: a full offload the GPU cannot hold is impossible, unless the
machine's spill explains it (the weights, or the KV cache and buffers, over its memory read from
RAM over the host link)."""

from __future__ import annotations

from ggprof.physics.roofline import Prediction, is_partial_offload
from ggprof.units import fmt_bytes, tps
from ggprof.verdict.backend import Backend
from ggprof.verdict.devices import overfull
from ggprof.verdict.finding import Finding, JudgeCase


def fit_findings(b: Backend, case: JudgeCase) -> list[Finding]:
    """A full-offload result on a GPU whose memory cannot hold the weights plus the KV cache."""
    p = case.prediction
    if p is None or not p.device.is_discrete_gpu or not p.memory:
        return []
    gpu = next((m for m in p.memory if m.verdict == "does_not_fit"), p.memory[0]) if p.devices else p.memory[0]
    if case.context is not None:
        offloaded, layers = case.context.n_gpu_layers_offloaded, case.context.n_layers
        full = offloaded is not None and layers is not None and offloaded > layers
    else:
        full = not is_partial_offload(p.inputs.n_gpu_layers, case.model.n_layers)
    # with Windows' fallback a pool over the memory free ("tight") may spill its cache too
    tight = gpu.verdict == "tight" and p.cache_spill_bytes is not None
    if not full or not (gpu.verdict == "does_not_fit" or tight):
        return []
    total = fmt_bytes(gpu.total_bytes or 0, binary=False)
    if tight:
        total = f"{fmt_bytes(gpu.available_bytes or 0, binary=False)} free of {total}"
    required = fmt_bytes(gpu.required_bytes, binary=False)
    # the weights over the GPU, or the weights fitting and the KV and buffers (an estimate) not: the
    # prediction reads the allocation over the link, and so does the finding
    if p.spill_bytes or p.cache_spill_bytes is not None or (not p.devices and p.parts and p.parts.link_s > 0):
        return [explained_by_spill(b, case, p, required, total, tight)]
    return [
        Finding(
            severity="impossible",
            code="MODEL_DOES_NOT_FIT",
            title=f"a full offload needs {required}; {gpu.pool if p.devices else p.device.name} has {total}",
            expected=f"at most {total} on the device",
            observed=f"{required} needed",
            evidence=(
                f"weights {fmt_bytes(gpu.weight_bytes, binary=False)} + KV at ctx {p.inputs.ctx:,} "
                f"{fmt_bytes(gpu.kv_bytes, binary=False)} + buffers (estimate) "
                f"{fmt_bytes(gpu.compute_buffer_bytes, binary=False)}",
            ),
            causes=(
                *overfull(p),
                "part of the model ran on the CPU (partial offload) or in host memory",
                "a smaller or more quantized model ran",
                "a device with more memory ran it",
            ),
            next_step="check -ngl and the device's memory",
            plugin=b.name,
        )
    ]


def explained_by_spill(
    b: Backend, case: JudgeCase, p: Prediction, required: str, total: str, tight: bool = False
) -> Finding:
    """A full offload larger than the GPU: no load on Linux, but a placement the machine allows
    explains its number (the weights over its memory read from RAM over the link: the band judged
    on), and others may; what the run's log or command line says tells them apart."""
    spill = fmt_bytes(p.spill_bytes, binary=False)
    if p.spill_bytes:
        what = f"{spill} of weights read over the host link a token"
    elif p.cache_spill_bytes is not None:
        cache = fmt_bytes(p.cache_spill_bytes, binary=False)
        pool = (
            "the pool fits the card, not the memory free"
            if tight
            else "the weights fit without the KV cache and compute buffers"
        )
        what = (
            f"{pool} (an estimate): with Windows' system-memory fallback the cache {'may be' if tight else 'is'} "
            f"placed in RAM and a token reads its {cache} over the host link at most"
        )
    else:
        what = (
            "the weights fit without the KV cache and compute buffers (an estimate), so the allocation pages "
            "over the host link"
        )
    moe = "experts in RAM (-ngl 99 -ncmoe N, the experts of the first N layers in RAM at the CPU's bandwidth)"
    return Finding(
        severity="plausible",
        code="WEIGHTS_BEYOND_VRAM",
        title=f"a full offload needs {required}; {p.device.name} has {total}: judged as spill, {what}",
        expected=f"at most {total} on the device, or the rest elsewhere",
        observed=f"{required} needed",
        evidence=(f"spill ceiling {tps(p.decode_ceiling_tok_s)} (the decode judged against it)",),
        causes=(
            "spill: the KV cache beyond the GPU's memory read from RAM over the host link (Windows' CUDA "
            "system-memory fallback) explains the number"
            if p.cache_spill_bytes is not None
            else f"spill: {spill if p.spill_bytes else 'the allocation'} beyond the GPU's memory read from RAM over "
            "the host link (Windows' CUDA system-memory fallback, GGML_CUDA_ENABLE_UNIFIED_MEMORY=1) explains the "
            "number",
            *((moe,) if case.model.n_experts else ()),
            "fewer layers offloaded (-ngl N): the rest read at the CPU's bandwidth",
        ),
        next_step="tell them apart: the load log's buffer sizes (`CUDA0 model buffer size` against `CPU_Mapped` "
        "or `CUDA_Host`), the command line (-ngl, -ncmoe, -ot), GGML_CUDA_ENABLE_UNIFIED_MEMORY and the driver's "
        "sysmem fallback policy",
        plugin=b.name,
    )
