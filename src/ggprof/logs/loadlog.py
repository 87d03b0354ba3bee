"""llama.cpp's load log (stderr): what the model is, where its layers and buffers went, its
context, threads and build, and the devices it found."""

from __future__ import annotations

import re

from ggprof.logs.patterns import (
    _BREAKDOWN,
    _BUFFER,
    _BUILD,
    _BUILD_BENCH,
    _BUILD_INFO,
    _BUILD_JSON,
    _CTX,
    _DEVICE,
    _FA_RESOLVED,
    _FIT_DEVICE,
    _FIT_DONE,
    _FOUND,
    _KV,
    _KV_BUFFER,
    _KV_TYPE,
    _LOAD_BACKEND,
    _LOADED,
    _META,
    _METAL_NAME,
    _METAL_WS,
    _NGL,
    _NO_GPU,
    _OFFLOADED,
    _OFFLOADING,
    _SYCL_ROW,
    _THREADS,
    _THREADS2,
    _THREADS_ARG,
    _THREADS_JSON,
    _TYPE,
    _USING_DEVICE,
    _VERSION,
    sycl_f16,
    sycl_reorder,
    vulkan_banner,
)
from ggprof.logs.records import (
    MAX_BYTES,
    MAX_DEVICES,
    MAX_LISTED,
    METADATA_FACTS,
    Fact,
    LogDevice,
    bytes_of,
    count,
    num,
    params_of,
)
from ggprof.logs.state import (
    ParserState,
)
from ggprof.logs.text import Line
from ggprof.runfacts.table import BY_LOG_KEY
from ggprof.units import clean_name

BUFFER_NAME_CHARS = 80  # an RPC device's buffer names its server: `RPC0[192.168.100.200:50052]`


class LoadLog(ParserState):
    """The load log on stderr: model metadata, the loader's keys and types, tensors and buffers,
    the context, the system line, devices."""

    def model_meta(self, line: Line) -> bool:
        m = _META.match(line.text)
        if not m:
            return False
        if line.text.startswith(("print_info", "llm_load_print_meta")):
            self.new_run_if_measured(line) if m[1] in ("file format", "format") else None
            self.saw("llama.cpp model info")
        key, value = m[1].strip(), m[2].strip()
        r = self.run
        ints = {
            "n_ctx_train": "n_ctx_train",
            "n_embd": "n_embd",
            "n_layer": "n_layers",
            "n_head": "n_heads",
            "n_head_kv": "n_kv_heads",
            "n_embd_head_k": "head_dim_k",
            "n_embd_head_v": "head_dim_v",
            "n_ff": "n_ff",
            "n_expert": "n_experts",
            "n_expert_used": "n_experts_used",
            "n_vocab": "n_vocab",
            "n_ff_exp": "n_ff_exp",
            "n_expert_shared": "n_experts_shared",
            "n_swa": "sliding_window",
            "n_swa_pattern": "swa_pattern",
            "n_embd_k_gqa": "n_embd_k_gqa",
            "n_embd_v_gqa": "n_embd_v_gqa",
            "n_ctx": "n_ctx",
            "n_lora_kv": "kv_lora_rank",
            "n_rot": "n_rot",
        }
        if key in ints:
            if value.startswith("["):  # a value per layer: the largest
                items = [count(v) for v in value.strip("[]").split(",")[:4096]]
                vals = [v for v in items if v is not None]
                r.set(ints[key], max(vals) if vals else None, line)
                if key == "n_head_kv" and vals:
                    r.set("kv_heads_per_layer", tuple(vals), line)
            else:
                r.set(ints[key], count(value.split()[0]) if value else None, line)
        elif key == "arch":
            r.set("architecture", value[:40], line)
        elif key in ("model ftype", "file type", "ftype"):
            r.set("quant", re.sub(r"^\d+ \((?:mostly )?(.*)\)$", r"\1", value).removeprefix("mostly ")[:40], line)
        elif key == "model params":
            r.set("model_params", params_of(value), line)
        elif key in ("model size", "file size"):
            if re.search(r"[KMGT]i?B\b", value.split("(")[0]) and bytes_of(value) is not None:
                r.set("model_size_bytes", bytes_of(value), line)
            elif re.fullmatch(r"\d+[BM]", value):  # ggjt's `model size = 7B`: the model's type
                r.set("model_type", value, line)
            else:  # old llama.cpp printed the parameter count as the "model size"
                r.set("model_params", params_of(value), line)
        elif key == "model type":
            r.set("model_type", value[:40], line)
        elif key == "general.name":
            r.set("model_name", value[:120], line)
        return True

    def loader(self, line: Line) -> bool:
        t = line.text
        if not t.startswith("llama_model_loader:"):
            return False
        self.saw("llama.cpp model loader")
        r = self.run
        if m := _LOADED.match(t):
            r.set("n_tensors", count(m[2]), line)
            r.set("model_file", re.split(r"[\\/]", m[3].strip())[-1][:200], line)
        elif m := _TYPE.match(t):
            n = count(m[2])
            if n is not None and len(r.type_counts) < 64:
                r.type_counts[m[1].upper()] = r.type_counts.get(m[1].upper(), 0) + n
        elif m := _KV.match(t):
            key, kind, value = m[1], m[2], m[3].strip()
            arch = r.value("architecture") or (value if key == "general.architecture" else None)
            if arch is None and key.endswith((".block_count", ".embedding_length")) and "." in key:
                arch = key.split(".", 1)[0][:40]  # the excerpt starts after `general.architecture`
                r.set("architecture", arch, line)
            if key == "general.architecture":
                r.setdefault("architecture", value[:40], line)
            elif key == "general.name":
                r.setdefault("model_name", value[:120], line)
            elif key == "general.file_type":
                r.setdefault("file_type", count(value), line)
            elif key == "tokenizer.ggml.tokens" and (v := re.search(r"arr\[\w+,\s*(\d+)\]", kind)):
                r.setdefault("n_vocab", count(v[1]), line)
            elif arch and key.startswith(arch + "."):
                short = key[len(arch) + 1 :]
                if short in METADATA_FACTS and kind in ("u32", "i32", "u64", "i64", "u16"):
                    r.setdefault(METADATA_FACTS[short], count(value), line)
        return True

    def tensors(self, line: Line) -> bool:
        t = line.text
        if "layers to GPU" not in t and "buffer size" not in t and "VRAM used" not in t:
            return False
        r = self.run
        self.saw("llama.cpp load_tensors")
        if m := _OFFLOADED.search(t):
            r.set("layers_offloaded", count(m[1]), line)
            r.set("layers_total", count(m[2]), line)
        elif m := _OFFLOADING.search(t):
            r.setdefault("layers_offloaded", count(m[1]), line)
        elif m := _BUFFER.match(t):
            b = num(m[2])
            if b is not None and len(r.model_buffers) < 32:
                name = m[1][:BUFFER_NAME_CHARS]
                have = r.model_buffers[name].value if name in r.model_buffers else 0  # a buffer type twice: both
                r.model_buffers[name] = Fact(have + int(b * (1 << 20)), line.number, line.text)
        elif m := _KV_BUFFER.match(t):
            b = num(m[2])
            if b is not None and len(r.kv_buffers) < 32:  # a sliding-window model has two caches: both
                name = m[1][:BUFFER_NAME_CHARS]
                have = r.kv_buffers[name].value if name in r.kv_buffers else 0
                r.kv_buffers[name] = Fact(have + int(b * (1 << 20)), line.number, line.text)
        else:
            return False
        return True

    def context(self, line: Line) -> bool:
        t = line.text
        if m := _CTX.match(t):
            self.saw("llama.cpp context")
            fact = BY_LOG_KEY[m[1]]
            self.run.set(fact.name, fact.read(m[2][:40]), line)
            return True
        if m := _KV_TYPE.search(t):
            self.run.set("cache_type_k", m[1].lower(), line)
            self.run.set("cache_type_v", m[2].lower(), line)
            return True
        if "Flash Attention" in t and (m := _FA_RESOLVED.search(t)):  # what `flash_attn = auto` became
            if self.run.value("flash_attn") in (None, "auto"):  # the first context's (a draft model's is later)
                self.run.set("flash_attn", "on" if m[1] or m[2] == "enabled" else "off", line)
            return True
        return False

    def system(self, line: Line) -> bool:
        t, r = line.text, self.run
        threads = "n_threads" in t
        if threads and (m := _THREADS.search(t) or _THREADS2.search(t)):
            r.set("threads", count(m[1]), line)
            r.set("threads_batch", count(m[2]) if m[2] and not m[2].startswith("-") else None, line)
            r.set("hardware_threads", count(m[3]), line)
            flags = re.findall(r"\b([A-Z][A-Z0-9_]+) = 1\b", t)
            r.set("cpu_flags", tuple(flags[:64]), line)
            compiled = [
                b.lower() for b in re.findall(r"\| (CUDA|Metal|Vulkan|ROCm|HIP|SYCL|MUSA|BLAS|RPC|OPENCL|CANN) : ", t)
            ]
            if compiled:
                r.set("backends_compiled", tuple(compiled), line)
            return True
        if threads and (m := _THREADS_JSON.search(t)):
            r.set("threads", count(m[1]), line)
            r.set("hardware_threads", count(m[2]), line)
        if ("build" in t or "version" in t) and (
            m := _BUILD.search(t) or _BUILD_INFO.match(t) or _VERSION.match(t) or _BUILD_JSON.search(t)
        ):
            r.set("build", f"b{m[1]} ({m[2]})", line)
            return True
        if (f16 := sycl_f16(t)) is not None:
            r.set("sycl_f16", f16, line)
            return True
        if (reorder := sycl_reorder(t)) is not None:
            r.set("sycl_reorder", reorder, line)
            return True
        if t.startswith("build: ") and (m := _BUILD_BENCH.match(t)):
            r.set("build", f"b{m[2]} ({m[1]})", line)
            return True
        if "using ROCm for GPU acceleration" in t or "using CUDA for GPU acceleration" in t:
            r.set("backend_named", "rocm" if "ROCm" in t else "cuda", line)
            return True
        if "GPU" in t and (m := _NO_GPU.search(t)):
            if len(r.warnings) < MAX_LISTED:
                r.warnings.append(Fact(m[1], line.number, t))
            return True
        if t.startswith("load_backend") and (m := _LOAD_BACKEND.match(t)):
            have = r.value("backends_loaded") or ()
            r.set("backends_loaded", (*have, m[1].lower())[:16], line)
            if t.lower().endswith(".dll"):  # Windows: a GPU's allocation over its memory falls back to RAM
                r.setdefault("windows", True, line)
            return True
        if ("ngl" in t or "gpu-layers" in t or "gpu_layers" in t) and (m := _NGL.search(t)):
            r.set("n_gpu_layers_requested", int(m[1]), line)
        if ("-t" in t or "--threads" in t) and (m := _THREADS_ARG.search(t)):
            r.setdefault("threads", count(m[1]), line)
        return False

    def devices(self, line: Line) -> bool:
        t, r = line.text, self.run
        if "found " in t and (m := _FOUND.search(t)):
            self.backend_of_devices = {
                "ROCm": "rocm",
                "CUDA": "cuda",
                "MUSA": "musa",
                "SYCL": "sycl",
                "Vulkan": "vulkan",
            }[m[2]]
            self.saw(f"{m[2]} devices")
            return True
        if "Device " in t and (m := _DEVICE.match(t)):
            backend = self.backend_of_devices or "cuda"
            vram = count(m[5])
            self._device(
                LogDevice(
                    int(m[1]),
                    m[2].strip(),
                    backend,
                    line.number,
                    t,
                    memory_bytes=vram << 20 if vram else None,
                    compute=m[3] or m[4],
                )
            )
            return True
        if t.startswith("|") and (m := _SYCL_ROW.match(t)):
            if m[3] == "gpu":
                mem = int(m[6]) if len(m[6]) < 16 and int(m[6]) < MAX_BYTES else None
                self._device(LogDevice(int(m[1]), m[4].strip(), "sycl", line.number, t, memory_bytes=mem, compute=m[5]))
            return True
        if device := vulkan_banner(t, line.number):
            self._device(device)
            self.saw("Vulkan devices")
            return True
        if t.startswith("ggml_metal") and (m := _METAL_NAME.match(t)):
            self._device(LogDevice(0, m[1].strip(), "metal", line.number, t, uma=True))
            self.saw("Metal device")
            return True
        if "recommendedMax" in t and (m := _METAL_WS.search(t)):
            ws = num(m[1])
            r.set("metal_working_set_bytes", int(ws * 1e6) if ws else None, line)
            return True
        if "using device" in t and (m := _USING_DEVICE.search(t)):
            used = {
                "cuda": "cuda",
                "rocm": "rocm",
                "vulkan": "vulkan",
                "metal": "metal",
                "sycl": "sycl",
                "rpc": "rpc",
            }.get(m[1].lower())
            if used and not any(d.name == m[3] for d in r.devices):
                free = count(m[4])
                self._device(
                    LogDevice(int(m[2] or 0), m[3], used, line.number, t, memory_bytes=free << 20 if free else None)
                )
            return True
        return False

    def fit(self, line: Line) -> bool:
        """--fit's choice for each device and its outcome; the memory breakdown printed after the
        load (the ones --fit prints while it tries placements come before the model's buffers)."""
        t, r = line.text, self.run
        if m := _FIT_DEVICE.match(t):
            self.saw("llama.cpp --fit")
            if len(r.fit_devices) < MAX_DEVICES or m[1] in r.fit_devices:
                values = (clean_name(m[2] or "", 80), count(m[3]), count(m[4] or "0"), int(m[5]), int(m[6]))
                r.fit_devices[m[1]] = Fact(values, line.number, t)
            return True
        if m := _FIT_DONE.match(t):
            r.set("fit_status", "fit" if m[1].startswith("successfully") else "failed", line)
            return True
        if (m := _BREAKDOWN.match(t)) and r.model_buffers:
            if len(r.memory_breakdown) < MAX_DEVICES or m[1] in r.memory_breakdown:
                mib = tuple(count(v) for v in m.group(3, 4, 5, 6))
                r.memory_breakdown[m[1]] = Fact((clean_name(m[2] or "", 80), *mib), line.number, t)
            return True
        return bool(_BREAKDOWN.match(t))
