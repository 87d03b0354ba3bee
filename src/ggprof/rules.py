"""The rules every backend applies (Backend.judge): decode and prefill against their physical
ceilings, the expected band, and whether the model fits the device it claims to run on."""

from __future__ import annotations

from typing import TYPE_CHECKING

from ggprof.judge import Finding, JudgeCase
from ggprof.units import fmt_bytes, fmt_rate, sig3

if TYPE_CHECKING:
    from ggprof.backend import Backend

# The seeds' three explanations of a decode speed above the bandwidth ceiling, then the usual slips.
IMPOSSIBLE_CAUSES = (
    "the GPU did the work: layers were offloaded to a GPU the claim does not mention",
    "a smaller model ran than the one named (check the file, its size and quantization)",
    "it ran remotely (an API or another machine), not on this device",
    "the bandwidth figure is wrong for this machine (more memory channels, another device)",
    "-ngl / --n-gpu-layers put more layers on the accelerator than assumed",
)


def tps(x: float | None) -> str:
    return "unknown" if x is None else f"{sig3(x)} tok/s"


def decode_findings(b: Backend, case: JudgeCase) -> list[Finding]:
    p, tg = case.prediction, case.measured_tg_tok_s
    if p is None or tg is None:
        return []
    ceiling = p.decode_ceiling_tok_s
    bytes_per_token = p.decode_bytes_per_token + p.kv_bytes_at_depth
    evidence = (f"bytes per token {fmt_bytes(bytes_per_token, binary=False)} (weights "
                f"{fmt_bytes(p.decode_bytes_per_token, binary=False)} + KV at depth {case.depth:,} "
                f"{fmt_bytes(p.kv_bytes_at_depth, binary=False)})",
                f"bandwidth {fmt_rate(p.bandwidth_bytes_per_s)} [{_source(p)}]")  # fmt: skip
    if tg > ceiling * (1 + case.tolerance):
        needed = tg * bytes_per_token
        if b.fits_in_cache(case):
            return [Finding("unknown", "DECODE_CEILING_NOT_APPLICABLE",
                            "the model fits in the last-level cache: the DRAM ceiling does not apply",
                            f"at most {tps(ceiling)} from DRAM", tps(tg),
                            (*evidence, f"last-level cache {fmt_bytes(p.device.llc_bytes or 0)}"),
                            ("weights stay in the LLC between tokens",),
                            "judge a model larger than the LLC", b.name)]  # fmt: skip
        return [Finding("impossible", "DECODE_ABOVE_CEILING",
                        f"decode at {tps(tg)} needs {fmt_rate(needed)}; the device moves "
                        f"{fmt_rate(p.bandwidth_bytes_per_s)}",
                        f"at most {tps(ceiling)}", tps(tg),
                        (*evidence,
                         f"{sig3(tg)} tok/s x {fmt_bytes(bytes_per_token, binary=False)} = {fmt_rate(needed)}",
                         f"tolerance {case.tolerance:.0%} above the ceiling"),
                        b.impossible_causes(case), "check which device and model really ran (ggprof profile runs "
                        "it here and records the context)", b.name)]  # fmt: skip
    low, high, basis = b.expected_tok_s(case)
    share = f"{tg / ceiling:.0%} of the {tps(ceiling)} ceiling"
    if low is not None and tg < low * (1 - case.tolerance):
        causes, checks = b.suspect_causes(case)
        return [Finding("suspicious", "DECODE_BELOW_BAND", f"decode at {tps(tg)} is {share}, below the expected band",
                        f"{tps(low)} to {tps(high)} ({basis})", tps(tg), (*evidence, *checks),
                        causes or b.generic_slow_causes(case), b.slow_next_step(case), b.name)]  # fmt: skip
    findings = [Finding("plausible", "DECODE_PLAUSIBLE", f"decode at {tps(tg)} is {share}",
                        f"{tps(low)} to {tps(high)} ({basis})" if low is not None else f"at most {tps(ceiling)}",
                        tps(tg), evidence, plugin=b.name)]  # fmt: skip
    return findings + b.notes(case)


def prefill_findings(b: Backend, case: JudgeCase) -> list[Finding]:
    p, pp = case.prediction, case.measured_pp_tok_s
    if p is None or pp is None:
        return []
    ceiling = p.prefill_ceiling_tok_s
    if ceiling is None:
        return [
            Finding(
                "unknown",
                "PREFILL_NO_PEAK",
                "no peak FLOP/s is known for this device: prefill cannot be judged",
                None,
                tps(pp),
                next_step="pass --flops TFLOPS or --device ID",
                plugin=b.name,
            )
        ]
    flops_token = p.prefill_flops_per_token
    evidence = (
        f"{sig3(flops_token / 1e9)} GFLOP per prompt token (2 x {sig3(p.active_params / 1e6)}M active "
        "params + attention; LM head once per batch, as llama.cpp does)",
        f"peak {sig3((p.peak_flops or 0) / 1e12)} TFLOP/s "
        f"[{p.device.peak_flops.describe() if p.device.peak_flops else ''}]",
    )
    if pp > ceiling * (1 + case.tolerance):
        return [Finding("impossible", "PREFILL_ABOVE_CEILING",
                        f"prefill at {tps(pp)} needs {sig3(pp * flops_token / 1e12)} TFLOP/s; the device peaks at "
                        f"{sig3((p.peak_flops or 0) / 1e12)}", f"at most {tps(ceiling)}", tps(pp), evidence,
                        b.impossible_causes(case), "check which device and model really ran", b.name)]  # fmt: skip
    return [
        Finding(
            "plausible",
            "PREFILL_PLAUSIBLE",
            f"prefill at {tps(pp)} is {pp / ceiling:.1%} of the compute ceiling {tps(ceiling)}",
            f"at most {tps(ceiling)}",
            tps(pp),
            evidence,
            plugin=b.name,
        )
    ]


def fit_findings(b: Backend, case: JudgeCase) -> list[Finding]:
    """A full-offload result on a GPU whose memory cannot hold the weights plus the KV cache."""
    p = case.prediction
    if p is None or p.device.backend == "cpu" or p.device.unified_memory or not p.memory:
        return []
    gpu = p.memory[0]
    offloaded, layers = (case.context.n_gpu_layers_offloaded, case.context.n_layers) if case.context else (None, None)
    full = (offloaded is not None and layers is not None and offloaded > layers) or (
        case.context is None and (p.inputs.n_gpu_layers is None or p.inputs.n_gpu_layers < 0
                                  or p.inputs.n_gpu_layers > case.model.n_layers))  # fmt: skip
    if not full or gpu.verdict != "does_not_fit":
        return []
    return [Finding("impossible", "MODEL_DOES_NOT_FIT",
                    f"a full offload needs {fmt_bytes(gpu.required_bytes, binary=False)}; {p.device.name} has "
                    f"{fmt_bytes(gpu.total_bytes or 0, binary=False)}",
                    f"at most {fmt_bytes(gpu.total_bytes or 0, binary=False)} on the device",
                    f"{fmt_bytes(gpu.required_bytes, binary=False)} needed",
                    (f"weights {fmt_bytes(gpu.weight_bytes, binary=False)} + KV at ctx {p.inputs.ctx:,} "
                     f"{fmt_bytes(gpu.kv_bytes, binary=False)} + buffers (estimate) "
                     f"{fmt_bytes(gpu.compute_buffer_bytes, binary=False)}",),
                    ("part of the model ran on the CPU (partial offload) or in host memory",
                     "a smaller or more quantized model ran", "a device with more memory ran it"),
                    "check -ngl and the device's memory", b.name)]  # fmt: skip


def _source(p: object) -> str:
    bw = getattr(getattr(p, "device", None), "bandwidth", None)
    return bw.describe() if bw else "unknown"
