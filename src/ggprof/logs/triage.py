"""What a log's facts say about its speed, before any ceiling: the run's placement (backend,
device, layers on the GPU), and the causes of slowness a log shows by itself, most likely first.
"""

from __future__ import annotations

from dataclasses import dataclass

from ggprof.logs.records import Fact, LogDevice, LogRun, Speed
from ggprof.units import fmt_bytes

MIN_PREFILL_TOKENS = 32  # fewer prompt tokens are a tiny batch: no prefill rate to judge
SAMPLING_SHARE = 0.20  # sampling taking more of the generation time than this is named
SMT_THREADS_MIN = 8  # hardware threads from which a -t of all of them counts as SMT siblings
CPU_BUFFER_SHARE = 0.25  # weights in plain CPU buffers, with every layer offloaded (tensor overrides)
REPROCESS_MIN = 2  # prompts evaluated from the first token, more than this many: cache not reused

# ggprof's backend names for the buffers llama.cpp prints (`CUDA0 model buffer size`)
_BUFFER_BACKENDS = {
    "cuda": "cuda",
    "rocm": "rocm",
    "vulkan": "vulkan",
    "metal": "metal",
    "sycl": "sycl",
    "musa": "musa",
    "rpc": "rpc",  # `RPC0[127.0.0.1:50052]`: a device behind an rpc-server
}


@dataclass(frozen=True)
class Cause:
    code: str
    title: str
    evidence: tuple[Fact, ...]
    next_step: str


def _buffer_backend(name: str) -> str | None:
    low = name.split("[", 1)[0].lower().rstrip("0123456789")
    if low in ("cpu", "cpu_mapped", "cpu_repack", "cuda_host", "cpu_aarch64"):
        return None
    return _BUFFER_BACKENDS.get(low)


def backend_of(run: LogRun) -> tuple[str, Fact | None]:
    """The backend that held the model's layers, and the line that says so ("cpu": none other)."""
    if any(w for w in run.warnings):
        return "cpu", run.warnings[0]
    offloaded = run.value("layers_offloaded")
    for name, fact in (*run.model_buffers.items(), *run.kv_buffers.items()):  # weights, then the KV cache
        if (b := _buffer_backend(name)) is not None:
            return b, fact
    in_ram = ("CPU", "CPU_MAPPED", "CPU_REPACK", "CPU_AARCH64")
    if (
        run.model_buffers
        and all(n.upper() in in_ram for n in run.model_buffers)
        and (not run.kv_buffers or all(n.upper() in in_ram for n in run.kv_buffers))
    ):
        return "cpu", next(iter(run.model_buffers.values()))  # every weight and the KV cache in RAM
    bench = [s for s in run.speeds if s.backend]
    if bench:
        names = {
            "cuda": "cuda",
            "metal": "metal",
            "vulkan": "vulkan",
            "rocm": "rocm",
            "hip": "rocm",
            "sycl": "sycl",
            "cpu": "cpu",
            "blas": "cpu",
        }
        b = names.get(bench[0].backend or "")
        if b:
            return b, Fact(b, bench[0].line, bench[0].text)
    if offloaded == 0 and run.facts.get("layers_offloaded"):
        return "cpu", run.facts["layers_offloaded"]
    if run.devices and (offloaded or run.value("n_gpu_layers_requested")):
        d = run.devices[0]
        return d.backend, Fact(d.backend, d.line, d.text)
    if (f := run.facts.get("backend_named")) is not None:
        return f.value, f
    # nothing says where the layers went: a device found is not a device used (no -ngl: the CPU)
    return "unknown", None


def gpu_device(run: LogRun, backend: str) -> LogDevice | None:
    """The GPU the layers went to: the first one of the run's backend (llama.cpp's main device)."""
    for d in run.devices:
        if d.backend == backend:
            return d
    return None


def is_partial(run: LogRun) -> bool:
    n, total = run.value("layers_offloaded"), run.value("layers_total")
    return isinstance(n, int) and isinstance(total, int) and 0 < n < total


def causes(run: LogRun, backend: str) -> list[Cause]:
    """The causes of slowness the log shows by itself, most likely first."""
    out: list[Cause] = []
    facts = run.facts
    ngl = run.value("n_gpu_layers_requested")
    if run.warnings:
        w = run.warnings[0]
        out.append(
            Cause(
                "NO_GPU_BACKEND",
                f"llama.cpp ran on the CPU: {w.value} (the GPU layers asked for were ignored)",
                (w, *([facts["n_gpu_layers_requested"]] if ngl else [])),
                "use a llama.cpp build with the GPU's backend (CUDA, ROCm/HIP, Vulkan, Metal, SYCL) and a driver "
                "that sees the GPU; `ggml_cuda_init: found` / `ggml_vulkan:` lines show it was found",
            )
        )
    offloaded, total = run.value("layers_offloaded"), run.value("layers_total")
    if offloaded == 0 and total:
        found = f"{run.devices[0].name} was found, " if run.devices else ""
        out.append(
            Cause(
                "CPU_FALLBACK",
                f"no layer on the GPU ({found}0/{total} layers offloaded): the model ran on the CPU",
                (
                    facts["layers_offloaded"],
                    *([Fact(run.devices[0].name, run.devices[0].line, run.devices[0].text)] if run.devices else []),
                ),
                "pass -ngl 99 (all layers) to llama.cpp, or num_gpu in Ollama",
            )
        )
    elif (
        offloaded is None
        and not ngl
        and "command" in facts
        and not run.warnings
        and (run.devices or backend not in ("cpu", "unknown"))
        and not any(sp.n_gpu_layers for sp in run.speeds)  # llama-bench's ngl column (its default is 99)
    ):
        cmd = facts["command"]
        where = f" ({run.devices[0].name} was found)" if run.devices else f" (a {backend} build)"
        out.append(
            Cause(
                "NO_NGL",
                f"the command gives no -ngl and the log shows no layer offloaded{where}: llama.cpp then runs "
                "every layer on the CPU (its default before it offloaded all layers by itself)",
                (cmd, *([Fact(run.devices[0].name, run.devices[0].line, run.devices[0].text)] if run.devices else [])),
                "pass -ngl 99 (all layers), and check that the log shows `offloaded N/N layers to GPU`",
            )
        )
    if is_partial(run):
        gpu = run.model_buffers
        on_gpu = sum(f.value for n, f in gpu.items() if _buffer_backend(n))
        on_cpu = sum(f.value for n, f in gpu.items() if not _buffer_backend(n))
        shares = (
            f"; {on_cpu / 2**30:.2f} GiB of weights in system RAM, {on_gpu / 2**30:.2f} GiB on the GPU"
            if on_gpu
            else ""
        )
        ev = [facts["layers_offloaded"]]
        need, have = facts.get("ollama_required_full_bytes"), facts.get("ollama_available_bytes")
        why = ""
        if need is not None and have is not None and need.value > have.value:
            why = f": the whole model needs {need.value / 2**30:.1f} GiB, the GPU has {have.value / 2**30:.1f} GiB free"
            ev.append(need)
        out.append(
            Cause(
                "PARTIAL_OFFLOAD",
                f"partial offload: {offloaded} of {total} layers on the GPU, the other {total - offloaded} read "
                f"from system RAM every token{shares}{why}",
                tuple(ev),
                "fit every layer on the GPU: a smaller quant or context (-c), quantized KV (-ctk q8_0 -ctv q8_0), "
                "or close what else holds GPU memory",
            )
        )
    elif (pct := facts.get("ollama_cpu_percent")) is not None and 0 < pct.value < 100:
        out.append(
            Cause(
                "PARTIAL_OFFLOAD",
                f"partial offload: Ollama placed {pct.value}% of the model in system RAM (`ollama ps`)",
                (pct,),
                "fit the model on the GPU: a smaller quant or context (num_ctx), or OLLAMA_FLASH_ATTENTION=1 "
                "with OLLAMA_KV_CACHE_TYPE=q8_0",
            )
        )
    elif offloaded and total and offloaded == total:
        # the embedding stays in a CPU buffer (a lookup, read one row a token); more is weights in RAM
        in_ram = {n: f for n, f in run.model_buffers.items() if n.upper() in ("CPU", "CPU_MAPPED", "CPU_REPACK")}
        cpu_only = sum(f.value for f in in_ram.values())
        all_bytes = sum(f.value for f in run.model_buffers.values())
        if all_bytes and cpu_only / all_bytes > CPU_BUFFER_SHARE:
            big = max(in_ram.values(), key=lambda f: f.value)
            out.append(
                Cause(
                    "WEIGHTS_IN_RAM",
                    f"every layer is offloaded, yet {fmt_bytes(cpu_only)} of {fmt_bytes(all_bytes)} of "
                    "weights sit in CPU buffers (tensor overrides, -ot/--cpu-moe): those are read from system RAM",
                    (big,),
                    "judge the run as a split between the GPU and system RAM (its ceiling is set by the RAM part)",
                )
            )
    if run.kv_buffers and offloaded and all(not _buffer_backend(n) for n in run.kv_buffers):
        f = next(iter(run.kv_buffers.values()))
        out.append(
            Cause(
                "KV_ON_CPU",
                "the KV cache is kept in system RAM while layers run on the GPU (--no-kv-offload / -nkvo)",
                (f,),
                "drop --no-kv-offload, or quantize the KV cache (-ctk q8_0 -ctv q8_0) to make it fit",
            )
        )
    threads, hw = run.value("threads"), run.value("hardware_threads")
    if (backend == "cpu" or is_partial(run)) and (
        isinstance(threads, int)
        and isinstance(hw, int)
        and hw
        and (threads > hw or (threads == hw and hw >= SMT_THREADS_MIN))
    ):
        out.append(
            Cause(
                "TOO_MANY_THREADS",
                f"{threads} threads on {hw} hardware threads: "
                + (
                    "more threads than the machine has"
                    if threads > hw
                    else "SMT siblings share each core's memory ports"
                ),
                (facts["threads"],),
                "-t at the physical core count (decode is memory-bound: more threads only wait)",
            )
        )
    for s in run.speeds:
        if (
            s.kind == "decode"
            and s.sample_ms
            and s.eval_ms
            and s.sample_ms / (s.sample_ms + s.eval_ms) > SAMPLING_SHARE
        ):
            share = s.sample_ms / (s.sample_ms + s.eval_ms)
            out.append(
                Cause(
                    "SAMPLING_TIME",
                    f"sampling took {share:.0%} of the generation time ({s.sample_ms:,.0f} ms beside "
                    f"{s.eval_ms:,.0f} ms of eval)",
                    (Fact(s.sample_ms, s.line, s.text),),
                    "fewer or cheaper samplers (--samplers), no grammar, or a smaller --top-k",
                )
            )
            break
    similar = [f for f in run.full_reprocess if f.value[1] == "similar"]
    if similar or run.reprocessed >= REPROCESS_MIN:
        f = (similar or run.full_reprocess)[0]
        what = (
            f"the server evaluated a {f.value[0]}-token prompt again whole although its slot held it "
            "(LCP similarity at least 0.9): the KV cache was not reused"
            if similar
            else f"the server evaluated {run.reprocessed} prompts from their first token (the KV cache "
            "was not reused): each request pays the whole prompt again"
        )
        out.append(
            Cause(
                "PROMPT_REPROCESSING",
                what,
                (f,),
                "keep cache_prompt on, give each client its own slot (-np), or --cache-reuse 256",
            )
        )
    ws, size = facts.get("metal_working_set_bytes"), run.value("model_size_bytes")
    if ws is not None and size and size > ws.value:
        out.append(
            Cause(
                "ABOVE_WORKING_SET",
                f"the model ({size / 1e9:.1f} GB) is larger than the GPU's recommended working set "
                f"({ws.value / 1e9:.1f} GB): macOS pages it in and out",
                (ws,),
                "a smaller quant, or raise the limit (sudo sysctl iogpu.wired_limit_mb=...)",
            )
        )
    return out


ALL_LAYERS_NGL = 99  # llama.cpp's own idiom for "every layer" (-ngl 99), where the layer count is not known


def every_layer_on_gpu(run: LogRun, speed: Speed, n_layers: int | None) -> str | None:
    """What in the log shows every layer of `speed`'s run on the GPU (a cause that needs layers
    left on the CPU is then ruled out), with its line; None where the log does not show it.
    `n_layers`: the model's layer count where known (a model file, the log's n_layer)."""
    ngl = speed.n_gpu_layers
    if ngl is not None and n_layers and ngl >= n_layers:
        return f"line {speed.line}: llama-bench's ngl {ngl}, every one of the model's {n_layers} layers on the GPU"
    if ngl is not None and not n_layers and ngl >= ALL_LAYERS_NGL:
        return f"line {speed.line}: llama-bench's ngl {ngl}, every layer on the GPU (llama.cpp's -ngl 99)"
    offloaded, total = run.value("layers_offloaded"), run.value("layers_total")
    if isinstance(offloaded, int) and isinstance(total, int) and total and offloaded >= total and not run.warnings:
        return f"line {run.facts['layers_offloaded'].line}: {offloaded}/{total} layers offloaded to the GPU"
    return None


def tiny_prefill(s: Speed) -> bool:
    return s.kind == "prefill" and (s.n_tokens or 0) < MIN_PREFILL_TOKENS
