"""The lines llama.cpp, llama-server, llama-bench and Ollama print, as patterns, and the
banners read whole (a Vulkan device's, SYCL's build flags, what `-fa` resolved to)."""

from __future__ import annotations

import re

from ggprof.llamacpp import OFFLOADED
from ggprof.logs.records import (
    LogDevice,
)
from ggprof.runfacts.table import BY_LOG_KEY
from ggprof.units import clean_name

# -- the patterns ---------------------------------------------------------------------------------
_META = re.compile(r"^(?:llm_load_print_meta|print_info|llama_model_load_internal):\s+(\w[\w .]*?)\s*=\s*(.*)$")
_KV = re.compile(r"^llama_model_loader: - kv\s+\d+:\s+(\S+)\s+(\S+)\s+=\s+(.*)$")
_TYPE = re.compile(r"^llama_model_loader: - type\s+(\w+):\s+(\d+) tensors")
_LOADED = re.compile(
    r"^llama_model_loader: loaded meta data with (\d+) key-value pairs and (\d+) tensors from (.+?)(?: \(version .*)?$"
)
_OFFLOADED = OFFLOADED
_OFFLOADING = re.compile(r"offloading (\d+) repeating layers to GPU")
_BUFFER = re.compile(r"^(?:llm_)?load_tensors:\s+(\S+?)(?: model)? buffer size =\s+([\d.,]+) MiB")
_KV_BUFFER = re.compile(r"^llama_kv_cache\w*:\s+(\S+) KV buffer size =\s+([\d.,]+) MiB")
# what llama.cpp's --fit chose for each device, its last word per device (common/fit.cpp, before 2026
# src/llama.cpp's llama_params_fit_impl): `  - RPC0 (127.0.0.1:50161):  3 layers ( 3 overflowing),
# 4 MiB used,  24100 MiB free` (overflowing: layers whose experts it moved to system memory)
_FIT_DEVICE = re.compile(
    r"^(?:common|llama)_params_fit_impl:\s+- (\w{1,40}?)(?: \(([^()]{0,200})\))?:\s+(\d+) layers"
    r"(?: \(\s*(\d+) overflowing\))?,\s+(-?\d+) MiB used,\s+(-?\d+) MiB free"
)
_FIT_DONE = re.compile(r"^(?:common_fit_params|llama_params_fit): (successfully fit|failed to fit) params")
# the memory breakdown (llama_memory_breakdown_print, common_memory_breakdown_print in 2026 builds), a
# row a device: `|   - RPC0 (127.0.0.1:50161) | 24105 = 24105 + (   4 =     0 +       0 +       3) +  -4 |`,
# the host's without its total and free: `|   - Host   |   18 =    10 +       0 +       7   |` (MiB)
_BREAKDOWN = re.compile(
    r"^(?:common|llama)_memory_breakdown_print: \|\s+- (\w{1,40}?)(?: \(([^()]{0,200})\))?\s+\|"
    r"\s+(?:\d+ = \d+ \+ \(\s*)?(\d+) =\s+(\d+) \+\s+(\d+) \+\s+(\d+)"
)
_KV_TYPE = re.compile(r"K \((\w+)\):\s+[\d.]+ MiB, V \((\w+)\)")
# a context's settings, one per line, their keys the run-fact table's (`llama_context: n_ubatch = 512`)
_CTX = re.compile(
    r"^(?:llama_new_context_with_model|llama_context|llama_init_from_model):\s+("
    + "|".join(sorted(map(re.escape, BY_LOG_KEY), key=len, reverse=True))
    + r")\s+=\s+(\S+)"
)
_THREADS = re.compile(r"system_info: n_threads = (\d+)(?: \(n_threads_batch = (\d+)\))? / (\d+)")
_THREADS2 = re.compile(r"system info: n_threads = (\d+), n_threads_batch = (-?\d+), total_threads = (\d+)")
_THREADS_JSON = re.compile(r'"n_threads":\s*(\d+).*?"total_threads":\s*(\d+)')
_BUILD = re.compile(r"\bbuild(?: =|:) (\d+) \(([0-9a-f]{6,40})\)")
_BUILD_INFO = re.compile(r"^build_info: b(\d+)-([0-9a-f]{6,40})")
_BUILD_BENCH = re.compile(r"^build: ([0-9a-f]{6,40}) \((\d+)\)$")  # llama-bench's: commit first
_VERSION = re.compile(r"^version: (\d+) \(([0-9a-f]{6,40})\)")
_BUILD_JSON = re.compile(r'"build":\s*(\d+),\s*"commit":\s*"([0-9a-f]{6,40})"')
_FOUND = re.compile(r"found (\d+) (CUDA|ROCm|MUSA|SYCL|Vulkan) devices")
_DEVICE = re.compile(
    r"^\s*Device (\d+): (.+?),\s*(?:(gfx\w+) \(0x\w+\)|compute capability ([\d.]+))(?:.*?VRAM: (\d+) MiB)?"
)
_SYCL_F16 = re.compile(r"\bGGML_SYCL_F16:\s*(yes|no)\b")  # a SYCL build's `Build with Macros` (older: ggml_check_sycl)
# a SYCL run's `Running with Environment Variables` block: its reorder optimizations, on by
# `GGML_SYCL_ENABLE_OPT: 1` (current builds) or `GGML_SYCL_DISABLE_OPT: 0` (from February 2025)
_SYCL_OPT = re.compile(r"\bGGML_SYCL_(DISABLE|ENABLE)_OPT:\s*(\d{1,3})\b")
# llama.cpp resolving `-fa auto`: `Flash Attention was auto, set to enabled` (from September 2025),
# later `llama_context: Flash Attention enabled` or `... not supported, set to disabled`
_FA_RESOLVED = re.compile(
    r": Flash Attention (?:(enabled)$|was auto, set to (enabled|disabled)|not supported, set to disabled)"
)
_SYCL_ROW = re.compile(r"^\|\s*(\d+)\|\s*\[([\w]+):(gpu|cpu|acc):\d+\]\|\s*(.+?)\|\s*([\d.]+)\|.*\|\s*(\d+)\|?\s*$")
_VULKAN = re.compile(r"(?:ggml_vulkan: (\d{1,4}) = |Vulkan(\d{1,4}): |ggml_vulkan: Using )(.+?) \| uma: (\d)(.*)$")
_METAL_NAME = re.compile(r"^ggml_metal(?:_device)?_init: (?:found device: |GPU name:\s+)(.+)$")
_METAL_WS = re.compile(r"recommendedMaxWorkingSetSize\s*=\s*([\d.,]+) MB")
# `using device SYCL0 (Intel(R) Arc(TM) A770 Graphics) - 15473 MiB free`: a name may hold one level
# of parentheses (Intel's (R) and (TM), Asahi's `Apple M2 (G14G B0)`, then ` (unknown id)`)
_USING_DEVICE = re.compile(
    r"using device (\w+?)(\d*) \(((?:[^()]|\([^()]*\)){1,200})\)(?: \([^()]{0,80}\))?(?: - (\d+) MiB free)?"
)
_LOAD_BACKEND = re.compile(r"^load_backend: loaded (\w+) backend")
_NO_GPU = re.compile(r"(not compiled with GPU offload support|no usable GPU found)")
_NGL = re.compile(r"(?:(?:^|\s)(?:-ngl|--n-gpu-layers|--gpu-layers)[ =]|\bn_gpu_layers[:=]\s*)(-?\d+)\b")
_THREADS_ARG = re.compile(r"(?:^|\s)(?:-t|--threads)[ =](\d+)\b")
# a speed's figures are whole tokens, checked by ggprof.logs.figures (`1e308`, `-5`, `inf`)
_TIMING = re.compile(
    r"(?:(prompt) )?eval time =\s*(\S+) ms /\s*(\S+) (?:tokens|runs)"
    r"(?:\s*\(\s*\S+ ms per token(?:,\s*(\S+) tokens per second)?)?"
)
_SAMPLE = re.compile(r"(?:sample|sampling) time =\s*([\d.,]+) ms /\s*(\d+) runs")
_PROGRESS = re.compile(r"n_(?:decoded|gen) =\s*(\S+), tg =\s*(\S+) t/s")
_NEW_PROMPT = re.compile(r"new prompt, n_ctx_slot = \d+, n_keep = \d+, (?:n_prompt_tokens|task\.n_tokens) = (\d+)")
# llama-cli's end-of-run summary (2026 builds): `[ Prompt: 282.9 t/s | Generation: 104.9 t/s ]`
_CLI_SUMMARY = re.compile(r"\[\s*Prompt:\s*(\S+) t/s\s*\|\s*Generation:\s*(\S+) t/s\s*\]")
# llama-server's per-request drafting line: `draft acceptance = 0.58824 (   10 accepted /    17 generated)`
_DRAFT_COUNTS = re.compile(r"draft acceptance(?: rate)? = [\d.]+ \(\s*(\d+) accepted /\s*(\d+) generated\)")
# its acceptance per draft position (2026 builds, at -lv 4): the share of verify steps that kept
# position i, so unconditional and falling (tools/server/server-context.cpp print_timings);
# `     acc per pos = (0.897, 0.662, 0.456)`, and while merged (PR #24536) on the line above:
# `..., mean acceptance length =  2.92, acceptance rate per position = (0.805, 0.632, 0.483)`
_DRAFT_PER_POS = re.compile(r"(?:acc per pos|acceptance rate per position) = \(([\d., ]{0,8000})\)")
_DRAFT = re.compile(
    r"draft acceptance(?: rate)? = ([\d.]+)|(?:^|\s)(?:--model-draft|-md|--spec-type|--draft-max)[ =]\S"
)
_JSON_NUM = r'"{}"\s*:\s*([^\s,}}\]]+)'
_API_FIELDS = {  # a server's answer pasted as JSON: (count, duration, unit in ms) per kind
    "ollama": (("prompt_eval_count", "prompt_eval_duration", 1e-6, ""), ("eval_count", "eval_duration", 1e-6, "")),
    "llama-server": (
        ("prompt_n", "prompt_ms", 1.0, "prompt_per_second"),
        ("predicted_n", "predicted_ms", 1.0, "predicted_per_second"),  # its own rate: n - 1 tokens timed
    ),
}
_LCP = re.compile(r"selected slot by LCP similarity, f_sim_best = ([\d.]+)")
_FULL_RM = re.compile(r"(?:kv cache rm|memory_seq_rm) \[0, end\)")
_OLLAMA = re.compile(
    r"^(prompt eval count|prompt eval duration|prompt eval rate|eval count|eval duration|eval rate):\s+(.+)$"
)
_OLLAMA_KV = re.compile(r'([\w.]+)=("(?:[^"\\]|\\.)*"|\S+)')
_BENCH_SEP = re.compile(r"^\|?\s*:?-{2,}")
_COMMAND = re.compile(
    r"(?:^|[\s/\\$>])(?:main|llama-cli|llama-completion|llama-server|server|llama-bench|llama-llava-cli|llamafile)"
    r"(?:\.exe)? .*-m "
)
_PY_META = re.compile(r"'([\w.]+)': '([^']*)'")
_OLLAMA_PS = re.compile(r"\b(\d{1,3})%/(\d{1,3})% CPU/GPU\b|\b100% (CPU|GPU)\b")


def vulkan_banner(text: str, line_no: int = 0) -> LogDevice | None:
    """A `ggml_vulkan: 0 = NAME | uma: 0 | fp16: 1 | ... | matrix cores: KHR_coopmat` line (or
    an older build's `Vulkan0: NAME | uma: ...`) as a device; None for any other line."""
    if "uma: " not in text or not (m := _VULKAN.search(text)):
        return None
    rest = m[5]
    cores = re.search(r"matrix cores: (\w+)", rest)
    # `ggml_vulkan: N = NAME (DRIVER)`: the last parenthesis is the driver (RADV's name has its
    # own); an older build's `Vulkan0: NAME (...)` has none, its parenthesis is left off the name too
    name = m[3].strip()
    driver = re.search(r"\s*\(([^()]*)\)$", name)
    return LogDevice(
        int(m[1] or m[2] or 0),
        name[: driver.start()] if driver else name,
        "vulkan",
        line_no,
        text,
        uma=m[4] == "1",
        fp16=_flag(rest, "fp16"),
        int_dot=_flag(rest, "int dot"),
        matrix_cores=cores[1] if cores else None,
        driver=(clean_name(driver[1].strip(), 60) or None) if driver and m[1] is not None else None,
    )


def sycl_f16(text: str) -> bool | None:
    """A SYCL build's `GGML_SYCL_F16: yes|no` line (None for any other line): whether it
    multiplies a prompt's quantized weights in FP16 on the XMX units."""
    m = _SYCL_F16.search(text) if "GGML_SYCL_F16" in text else None
    return m[1] == "yes" if m else None


# how llama.cpp prints a flash-attention setting: 0/1 (its context line before September 2025,
# llama-bench's fa column), then the names of llama_flash_attn_type; `auto` says nothing
_FLASH_ATTN = {"1": True, "enabled": True, "on": True, "true": True, "0": False, "disabled": False, "off": False}


def flash_attn(text: object) -> bool | None:
    """A printed flash-attention setting as on/off (None: `auto`, or anything else)."""
    return _FLASH_ATTN.get(str(text).strip().lower())


def sycl_reorder(text: str) -> bool | None:
    """A SYCL run's `GGML_SYCL_ENABLE_OPT: N` or `GGML_SYCL_DISABLE_OPT: N` line (None for any
    other line): whether it reordered quantized weights for its decode kernels."""
    m = _SYCL_OPT.search(text) if "_OPT" in text else None
    if m is None:
        return None
    return (int(m[2]) != 0) == (m[1] == "ENABLE")


def _flag(text: str, key: str) -> bool | None:
    """A Vulkan device line's `key: 0|1`."""
    v = re.search(rf"{key}: (\d)", text)
    return bool(int(v[1])) if v else None


def _ollama_fields(text: str) -> dict[str, str]:
    return {k: v.strip('"') for k, v in _OLLAMA_KV.findall(text)}


# -- what llama.cpp's programs print as they run (read by the engines) ---------------------------
BENCH_PROGRESS = re.compile(r"llama-bench: benchmark (\d+)/(\d+): (prompt|generation) run (\d+)/(\d+)")
BENCH_DEVICE = re.compile(r"^\s*([A-Za-z]+)\d*\s*:")  # `--list-devices`: `  CUDA0: NVIDIA GeForce RTX 4090 (...)`
MODEL_REFUSED = re.compile(r"failed to load model|error loading model|unknown model architecture", re.IGNORECASE)
FLAG_REFUSED = re.compile(r"error: invalid parameter|unknown argument", re.IGNORECASE)
SIMD_COMPILED = re.compile(r"(\w+) = 1")  # llama_print_system_info(): `AVX2 = 1 | ...`
SERVER_BUILD = re.compile(r"b(\d{1,7})-")  # llama-server's /props build_info: `b5315-8c83449c`
